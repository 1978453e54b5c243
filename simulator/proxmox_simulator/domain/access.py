"""Who may do what: principals, ACL propagation and contract permission checks.

``AccessState`` is an immutable snapshot of users, groups, roles, ACLs and
tokens.  Evaluation follows PVE's rules:

* walk the path from ``/`` to the target; an ACL on an ancestor applies only
  if it propagates, an ACL on the target itself always applies;
* at each level user ACLs replace group ACLs, and a deeper level replaces the
  roles found above it;
* ``root@pam`` holds every privilege;
* a privilege-separated token gets (token ACL privileges) ∩ (owner's
  privileges), so a token can never exceed its owner.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from proxmox_simulator.domain.errors import PermissionDenied
from proxmox_simulator.domain.privileges import PRIVILEGES

ROOT = "root@pam"


@dataclass(frozen=True)
class AclEntry:
    path: str
    ugid_type: str  # user | group | token
    ugid: str
    roleid: str
    propagate: bool


@dataclass(frozen=True)
class UserRecord:
    userid: str
    enable: bool
    expire: int
    groups: frozenset[str]


@dataclass(frozen=True)
class TokenRecord:
    userid: str
    tokenid: str
    secret_hash: str
    privsep: bool
    expire: int
    generation: int

    @property
    def full_id(self) -> str:
        return f"{self.userid}!{self.tokenid}"


@dataclass(frozen=True)
class Principal:
    """The authenticated caller: a user, or one of a user's API tokens."""

    userid: str
    tokenid: str | None = None
    privsep: bool = False
    via_ticket: bool = False

    @property
    def auth_id(self) -> str:
        return f"{self.userid}!{self.tokenid}" if self.tokenid else self.userid

    @property
    def is_root(self) -> bool:
        # A privilege-separated root token is *not* root: it only has its ACLs.
        return self.userid == ROOT and not (self.tokenid and self.privsep)


def split_userid(userid: str) -> tuple[str, str]:
    name, _, realm = userid.rpartition("@")
    return name, realm


@dataclass
class AccessState:
    users: dict[str, UserRecord] = field(default_factory=dict)
    roles: dict[str, frozenset[str]] = field(default_factory=dict)
    acl: list[AclEntry] = field(default_factory=list)
    tokens: dict[tuple[str, str], TokenRecord] = field(default_factory=dict)
    loaded_at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        by_path: dict[str, list[AclEntry]] = {}
        for entry in self.acl:
            by_path.setdefault(normalize_path(entry.path), []).append(entry)
        self._acl_by_path = by_path
        self._cache: dict[tuple[str, str], frozenset[str]] = {}

    # -- privilege computation -------------------------------------------

    def _roles_for(self, ugid_type: str, ugids: set[str], path: str) -> set[str]:
        """Roles granted to the given subjects, resolved along the path."""
        effective: set[str] | None = None
        parts = [p for p in path.split("/") if p]
        prefixes = ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]
        for depth, prefix in enumerate(prefixes):
            exact = depth == len(prefixes) - 1
            entries = [
                e
                for e in self._acl_by_path.get(prefix, ())
                if (exact or e.propagate) and e.ugid_type == ugid_type and e.ugid in ugids
            ]
            if entries:
                effective = {e.roleid for e in entries}
        return effective or set()

    def _subject_privs(self, userid: str, path: str) -> frozenset[str]:
        user = self.users.get(userid)
        if user is None:
            return frozenset()
        path_key = normalize_path(path)
        # User ACLs beat group ACLs at the same depth; a deeper level wins overall.
        roles: set[str] | None = None
        parts = [p for p in path_key.split("/") if p]
        prefixes = ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]
        for depth, prefix in enumerate(prefixes):
            exact = depth == len(prefixes) - 1
            entries = [e for e in self._acl_by_path.get(prefix, ()) if exact or e.propagate]
            user_roles = {e.roleid for e in entries if e.ugid_type == "user" and e.ugid == userid}
            group_roles = {
                e.roleid for e in entries if e.ugid_type == "group" and e.ugid in user.groups
            }
            if user_roles:
                roles = user_roles
            elif group_roles:
                roles = group_roles
        return self._privs_of(roles or set())

    def _privs_of(self, roles: set[str]) -> frozenset[str]:
        if "NoAccess" in roles:
            return frozenset()
        privs: set[str] = set()
        for role in roles:
            privs |= self.roles.get(role, frozenset())
        return frozenset(privs)

    def privileges(self, principal: Principal, path: str) -> frozenset[str]:
        key = (principal.auth_id + ("/sep" if principal.privsep else ""), path)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        if principal.userid == ROOT:
            owner = PRIVILEGES
        else:
            owner = self._subject_privs(principal.userid, path)
        if principal.tokenid and principal.privsep:
            token_roles = self._roles_for("token", {principal.auth_id}, normalize_path(path))
            result = owner & self._privs_of(token_roles)
        else:
            result = owner
        self._cache[key] = frozenset(result)
        return self._cache[key]

    def has(
        self,
        principal: Principal,
        path: str,
        privs,
        *,
        any_of: bool = False,
        pool: str | None = None,
    ) -> bool:
        """``pool``: the resource pool of the guest behind a ``/vms/<vmid>`` path;
        as in PVE, ACLs on ``/pool/<pool>`` then apply to the guest as well."""
        held = self.privileges(principal, path)
        if pool and path.startswith("/vms/"):
            held = held | self.privileges(principal, f"/pool/{pool}")
        wanted = set(privs)
        return bool(wanted & held) if any_of else wanted <= held

    def has_any_below(self, principal: Principal, prefix: str, privs) -> bool:
        """PVE's "any ACL below this path" test, used for list filtering."""
        if self.has(principal, prefix, privs, any_of=True):
            return True
        prefix = normalize_path(prefix).rstrip("/") + "/"
        return any(
            self.has(principal, path, privs, any_of=True)
            for path in self._acl_by_path
            if path.startswith(prefix)
        )

    def require(self, principal: Principal, path: str, privs, *, any_of: bool = False) -> None:
        if not self.has(principal, path, privs, any_of=any_of):
            raise PermissionDenied(f"Permission check failed ({path}, {', '.join(privs)})")

    def group_ids(self) -> set[str]:
        groups: set[str] = set()
        for user in self.users.values():
            groups |= user.groups
        groups |= {e.ugid for e in self.acl if e.ugid_type == "group"}
        return groups

    def user_active(self, userid: str, now: float) -> bool:
        user = self.users.get(userid)
        return bool(user and user.enable and (user.expire == 0 or user.expire > now))


def normalize_path(path: str) -> str:
    path = "/" + "/".join(p for p in path.split("/") if p)
    return path


# -- contract permission expressions ------------------------------------------


def _template(path: str, params: dict) -> str | None:
    """Fill ``{name}`` placeholders from request parameters; None if one is missing."""
    out = path
    while "{" in out:
        start = out.index("{")
        end = out.index("}", start)
        name = out[start + 1 : end]
        value = params.get(name)
        if value is None or value == "":
            return None
        out = out[:start] + str(value) + out[end + 1 :]
    return out


def check_permissions(
    state: AccessState,
    principal: Principal,
    permissions: dict | None,
    params: dict,
    *,
    pool: str | None = None,
) -> None:
    """Evaluate an endpoint's declared ``permissions``; raise PermissionDenied."""
    if permissions is None:
        # PVE's default for a method without a permission declaration: root only.
        if principal.is_root:
            return
        raise PermissionDenied("Permission check failed (root only)")
    user = permissions.get("user")
    if user in ("world", "all"):
        return
    if principal.is_root:
        return
    check = permissions.get("check")
    if check is None:
        raise PermissionDenied("Permission check failed")
    failure: list[str] = []
    if not _evaluate(state, principal, check, params, failure, pool):
        detail = failure[0] if failure else ""
        raise PermissionDenied(f"Permission check failed{detail}")


def _evaluate(state, principal, expr, params, failure: list[str], pool: str | None = None) -> bool:
    op = expr[0]
    if op == "and":
        return all(_evaluate(state, principal, sub, params, failure, pool) for sub in expr[1:])
    if op == "or":
        return any(_evaluate(state, principal, sub, params, failure, pool) for sub in expr[1:])
    if op == "perm":
        options = dict(zip(expr[3::2], expr[4::2], strict=False))
        required = options.get("require_param")
        if required and not params.get(required):
            return False
        path = _template(expr[1], params)
        if path is None:
            return False
        ok = state.has(principal, path, expr[2], any_of=bool(options.get("any")), pool=pool)
        if not ok:
            failure.append(f" ({path}, {', '.join(expr[2])})")
        return ok
    if op == "perm-modify":
        path = _template(expr[1], params)
        if path is None:
            return False
        ok = state.has(principal, path, ["Permissions.Modify"])
        if not ok:
            failure.append(f" ({path}, Permissions.Modify)")
        return ok
    if op == "userid-param":
        target = params.get("userid")
        if not target:
            return False
        if expr[1] == "self":
            # As in PVE, a token is not its owner: "self" is the full token id,
            # so a token manages its owner's tokens only with User.Modify.
            return target == principal.auth_id
        _name, realm = split_userid(str(target))
        return state.has(principal, f"/access/realm/{realm}", [expr[1]])
    if op == "userid-group":
        # PVE: privileges on /access/groups cover every user; otherwise only
        # groups the caller may administer count, and with ``groups_param``
        # every group named in the request must be one of them.
        privs = expr[1]
        if state.has(principal, "/access/groups", privs, any_of=True):
            return True
        options = dict(zip(expr[2::2], expr[3::2], strict=False))
        allowed = {
            g
            for g in state.group_ids()
            if state.has(principal, f"/access/groups/{g}", privs, any_of=True)
        }
        requested = {g for g in str(params.get("groups") or "").replace(";", ",").split(",") if g}
        if options.get("groups_param") and requested and not requested <= allowed:
            failure.append(f" (/access/groups, {', '.join(privs)})")
            return False
        if options.get("groups_param") == "create":
            return bool(requested) and requested <= allowed
        target = state.users.get(str(params.get("userid", "")))
        ok = bool(target and target.groups & allowed)
        if not ok:
            failure.append(f" (/access/groups, {', '.join(privs)})")
        return ok
    failure.append(f" (unsupported check {op!r})")
    return False
