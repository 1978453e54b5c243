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
    """Outcome of the latest synchronization the backend reflected into a sidecar.

    Degraded: the run went to its end, but Proxmox reads or NetBox writes failed (counted
    in `errors`, named in `message`). Failed: the run stopped (the reason leads `message`).
    """

    STATUS_NEVER = "never"
    STATUS_RUNNING = "running"
    STATUS_SUCCEEDED = "succeeded"
    STATUS_DEGRADED = "degraded"
    STATUS_FAILED = "failed"

    CHOICES = (
        (STATUS_NEVER, _("Never synchronized"), "gray"),
        (STATUS_RUNNING, _("Running"), "blue"),
        (STATUS_SUCCEEDED, _("Succeeded"), "green"),
        (STATUS_DEGRADED, _("Degraded"), "orange"),
        (STATUS_FAILED, _("Failed"), "red"),
    )

    # Outcomes whose message says what went wrong.
    PROBLEMS = (STATUS_DEGRADED, STATUS_FAILED)


class BackupVerificationChoices(ChoiceSet):
    """A vzdump archive's verification state (`verification.state` of the volume)."""

    STATE_NONE = "none"
    STATE_OK = "ok"
    STATE_FAILED = "failed"

    CHOICES = (
        (STATE_NONE, _("Not verified"), "gray"),
        (STATE_OK, _("Verified"), "green"),
        (STATE_FAILED, _("Verification failed"), "red"),
    )


class ReplicationStateChoices(ChoiceSet):
    """How a replication job's last run went."""

    STATE_UNKNOWN = "unknown"
    STATE_OK = "ok"
    STATE_SYNCING = "syncing"
    STATE_ERROR = "error"
    STATE_DISABLED = "disabled"

    CHOICES = (
        (STATE_UNKNOWN, _("Not run yet"), "gray"),
        (STATE_OK, _("OK"), "green"),
        (STATE_SYNCING, _("Syncing"), "blue"),
        (STATE_ERROR, _("Error"), "red"),
        (STATE_DISABLED, _("Disabled"), "gray"),
    )


class HAStateChoices(ChoiceSet):
    """The state an HA resource is requested to be in."""

    STATE_STARTED = "started"
    STATE_STOPPED = "stopped"
    STATE_DISABLED = "disabled"
    STATE_IGNORED = "ignored"

    CHOICES = (
        (STATE_STARTED, _("Started"), "green"),
        (STATE_STOPPED, _("Stopped"), "red"),
        (STATE_DISABLED, _("Disabled"), "gray"),
        (STATE_IGNORED, _("Ignored"), "orange"),
    )


class HARuleTypeChoices(ChoiceSet):
    """A PVE 9 HA rule's type."""

    TYPE_NODE_AFFINITY = "node-affinity"
    TYPE_RESOURCE_AFFINITY = "resource-affinity"

    CHOICES = (
        (TYPE_NODE_AFFINITY, _("Node affinity"), "blue"),
        (TYPE_RESOURCE_AFFINITY, _("Resource affinity"), "purple"),
    )


class HARuleAffinityChoices(ChoiceSet):
    """Node affinity: on the rule's nodes (positive only). Resource affinity: the rule's
    resources on one node (positive) or on different nodes (negative)."""

    AFFINITY_POSITIVE = "positive"
    AFFINITY_NEGATIVE = "negative"

    CHOICES = (
        (AFFINITY_POSITIVE, _("Positive"), "green"),
        (AFFINITY_NEGATIVE, _("Negative"), "orange"),
    )


class RemovedGuestChoices(ChoiceSet):
    """What a sync does with a VM whose guest is gone from Proxmox."""

    OFFLINE = "offline"
    OFFLINE_THEN_DELETE = "offline-then-delete"
    DELETE = "delete"
    KEEP = "keep"

    CHOICES = (
        (OFFLINE, _("Mark offline"), "orange"),
        (OFFLINE_THEN_DELETE, _("Mark offline, delete after a number of days"), "orange"),
        (DELETE, _("Delete"), "red"),
        (KEEP, _("Keep as it is"), "gray"),
    )


class SyncModeChoices(ChoiceSet):
    """How much of one object type a sync may write."""

    ALWAYS = "always"
    CREATE_ONLY = "create_only"
    OFF = "off"

    CHOICES = (
        (ALWAYS, _("Create, update and delete"), "green"),
        (CREATE_ONLY, _("Create only"), "blue"),
        (OFF, _("Off"), "gray"),
    )


class ProtectedFieldChoices(ChoiceSet):
    """Fields operators edit by hand, which a sync then leaves as they are."""

    CHOICES = (
        ("name", _("Name")),
        ("status", _("Status")),
        ("role", _("Role")),
        ("platform", _("Platform")),
        ("tenant", _("Tenant")),
        ("site", _("Site")),
        ("description", _("Description")),
        ("primary_ip", _("Primary IP")),
        ("dns_name", _("DNS name")),
    )
