"""Who may read an endpoint's decrypted Proxmox API token: explicit holders of one action.

The reader is meant to be the sync backend's dedicated NetBox user (its API token), holding
an ObjectPermission with the custom action `reveal_credentials` on the endpoints it syncs.
Unlike every other permission in NetBox, superuser status does NOT imply it: administrators
routinely browse the REST API with superuser sessions and tokens, and a secret that any
superuser token can fetch leaks with the first pasted token or screen share. A superuser who
really needs it grants the action to themselves, which leaves a record in the permission list.
"""

from __future__ import annotations

from netbox.authentication import ObjectPermissionBackend
from users.constants import CONSTRAINT_TOKEN_USER
from utilities.permissions import qs_filter_from_constraints

from .constants import REVEAL_CREDENTIALS_ACTION

REVEAL_CREDENTIALS_PERMISSION = f"netbox_proxbox.{REVEAL_CREDENTIALS_ACTION}_proxmoxendpoint"


def may_reveal_credentials(user, endpoint) -> bool:
    """Whether an ObjectPermission assigned to `user` (or a group) grants the action on `endpoint`.

    Evaluated from the user's object permissions directly (constraints included), because
    `has_perm()` and `restrict()` wave superusers through.
    """
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    granted = ObjectPermissionBackend().get_all_permissions(user)
    if REVEAL_CREDENTIALS_PERMISSION not in granted:
        return False
    constraints = qs_filter_from_constraints(
        granted[REVEAL_CREDENTIALS_PERMISSION], {CONSTRAINT_TOKEN_USER: user}
    )
    return type(endpoint).objects.filter(constraints, pk=endpoint.pk).exists()
