"""Every enumeration of the plugin in one place."""

from django.utils.translation import gettext_lazy as _
from utilities.choices import ChoiceSet


class EndpointModeChoices(ChoiceSet):
    """How a Proxmox endpoint is deployed: a multi-node cluster or a standalone node."""

    MODE_CLUSTER = "cluster"
    MODE_STANDALONE = "standalone"

    CHOICES = (
        (MODE_CLUSTER, _("Cluster"), "blue"),
        (MODE_STANDALONE, _("Standalone"), "cyan"),
    )


class SyncStatusChoices(ChoiceSet):
    """Outcome of the latest synchronization the backend reflected into a sidecar."""

    STATUS_NEVER = "never"
    STATUS_RUNNING = "running"
    STATUS_SUCCEEDED = "succeeded"
    STATUS_FAILED = "failed"

    CHOICES = (
        (STATUS_NEVER, _("Never synchronized"), "gray"),
        (STATUS_RUNNING, _("Running"), "blue"),
        (STATUS_SUCCEEDED, _("Succeeded"), "green"),
        (STATUS_FAILED, _("Failed"), "red"),
    )
