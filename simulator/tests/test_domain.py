"""Unit tests of domain rules: ACL evaluation, credentials, UPIDs, clocks, guests."""

from __future__ import annotations

import asyncio
import time

import pytest

from proxmox_simulator.api.routes import RouteTable
from proxmox_simulator.api.validation import parse_boolean, validate
from proxmox_simulator.contracts.model import Contract, Endpoint
from proxmox_simulator.contracts.sources import FAKEPVE_SCHEMA_VERSION, parse_artifact, read_fakepve
from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import (
    AccessState,
    AclEntry,
    Principal,
    TokenRecord,
    UserRecord,
    check_permissions,
)
from proxmox_simulator.domain.auth import (
    AuthKeys,
    TicketAuthority,
    TokenCredentials,
    TokenVerificationCache,
    hash_secret,
    parse_token_header,
    verify_secret,
)
from proxmox_simulator.domain.errors import (
    AuthenticationFailed,
    ParameterError,
    PermissionDenied,
    PveError,
)
from proxmox_simulator.domain.privileges import BUILTIN_ROLES
from proxmox_simulator.simulation.clock import AcceleratedClock, ManualClock, clock_from_spec
from proxmox_simulator.tasks.upid import Upid


def _state(acl, groups=None, tokens=None):
    users = {
        "alice@pve": UserRecord("alice@pve", True, 0, frozenset(groups or ())),
        "bob@pve": UserRecord("bob@pve", True, 0, frozenset()),
    }
    return AccessState(
        users=users,
        roles=dict(BUILTIN_ROLES),
        acl=[AclEntry(*a) for a in acl],
        tokens=tokens or {},
    )


ALICE = Principal("alice@pve")


def test_acl_propagates_down_and_deeper_level_replaces_roles():
    state = _state(
        [
            ("/vms", "user", "alice@pve", "PVEVMAdmin", True),
            ("/vms/101", "user", "alice@pve", "NoAccess", True),
        ]
    )
    assert state.has(ALICE, "/vms/100", ["VM.PowerMgmt"])
    assert not state.has(ALICE, "/vms/101", ["VM.Audit"])
    assert not state.has(ALICE, "/nodes/pve1", ["Sys.Audit"])


def test_non_propagating_acl_applies_only_to_its_own_path():
    state = _state([("/vms", "user", "alice@pve", "PVEAuditor", False)])
    assert state.has(ALICE, "/vms", ["VM.Audit"])
    assert not state.has(ALICE, "/vms/100", ["VM.Audit"])


def test_user_acl_beats_group_acl_at_same_level():
    state = _state(
        [
            ("/", "group", "ops", "Administrator", True),
            ("/", "user", "alice@pve", "PVEAuditor", True),
        ],
        groups=["ops"],
    )
    assert state.has(ALICE, "/vms/1", ["VM.Audit"])
    assert not state.has(ALICE, "/vms/1", ["VM.PowerMgmt"])


def test_privilege_separated_token_is_intersection_with_owner():
    token = TokenRecord("alice@pve", "ci", "h", True, 0, 1)
    state = _state(
        [
            ("/vms", "user", "alice@pve", "PVEVMUser", True),
            ("/", "token", "alice@pve!ci", "Administrator", True),
        ],
        tokens={("alice@pve", "ci"): token},
    )
    tok = Principal("alice@pve", "ci", privsep=True)
    # The token's Administrator role cannot exceed what alice herself has.
    assert state.has(tok, "/vms/5", ["VM.PowerMgmt"])
    assert not state.has(tok, "/vms/5", ["VM.Allocate"])
    assert not state.has(tok, "/", ["Sys.Modify"])
    # Without privilege separation the token is its owner.
    assert state.has(Principal("alice@pve", "ci", privsep=False), "/vms/5", ["VM.PowerMgmt"])
    # A privilege-separated root token is not root.
    root_tok = Principal("root@pam", "ro", privsep=True)
    assert not root_tok.is_root


def test_contract_checks_and_or_and_templating():
    state = _state([("/vms/100", "user", "alice@pve", "PVEVMUser", True)])
    perm = {"check": ["perm", "/vms/{vmid}", ["VM.PowerMgmt"]]}
    check_permissions(state, ALICE, perm, {"vmid": "100"})
    with pytest.raises(PermissionDenied, match=r"/vms/200"):
        check_permissions(state, ALICE, perm, {"vmid": "200"})
    either = {
        "check": [
            "or",
            ["perm", "/", ["Sys.Audit"]],
            ["perm", "/vms/{vmid}", ["VM.Audit", "VM.Allocate"], "any", 1],
        ]
    }
    check_permissions(state, ALICE, either, {"vmid": "100"})
    both = {"check": ["and", ["perm", "/vms/{vmid}", ["VM.Audit"]], ["perm", "/", ["Sys.Audit"]]]}
    with pytest.raises(PermissionDenied):
        check_permissions(state, ALICE, both, {"vmid": "100"})
    needs_param = {"check": ["perm", "/pool/{pool}", ["VM.Allocate"], "require_param", "pool"]}
    with pytest.raises(PermissionDenied):
        check_permissions(state, ALICE, needs_param, {})


def test_userid_checks_and_defaults():
    state = _state([("/access/groups", "user", "bob@pve", "PVEUserAdmin", True)])
    self_or_admin = {"check": ["or", ["userid-param", "self"], ["userid-group", ["User.Modify"]]]}
    check_permissions(state, ALICE, self_or_admin, {"userid": "alice@pve"})
    with pytest.raises(PermissionDenied):
        check_permissions(state, ALICE, self_or_admin, {"userid": "bob@pve"})
    check_permissions(state, Principal("bob@pve"), self_or_admin, {"userid": "alice@pve"})
    check_permissions(state, ALICE, {"user": "all"}, {})
    with pytest.raises(PermissionDenied):
        check_permissions(state, ALICE, None, {})  # undeclared: root only
    check_permissions(state, Principal("root@pam"), None, {})


def test_userid_group_with_groups_param_limits_group_admins():
    # bob administers only group "devs"; alice is in "devs", dave is in "ops".
    state = _state(
        [("/access/groups/devs", "user", "bob@pve", "PVEUserAdmin", True)], groups=["devs"]
    )
    state.users["dave@pve"] = UserRecord("dave@pve", True, 0, frozenset({"ops"}))
    bob = Principal("bob@pve")
    update = {"check": ["userid-group", ["User.Modify"], "groups_param", "update"]}
    check_permissions(state, bob, update, {"userid": "alice@pve"})
    with pytest.raises(PermissionDenied):
        check_permissions(state, bob, update, {"userid": "dave@pve"})
    # bob cannot move alice into a group he does not administer (e.g. "admins").
    with pytest.raises(PermissionDenied):
        check_permissions(state, bob, update, {"userid": "alice@pve", "groups": "devs,admins"})
    create = {"check": ["userid-group", ["User.Modify"], "groups_param", "create"]}
    check_permissions(state, bob, create, {"userid": "new@pve", "groups": "devs"})
    with pytest.raises(PermissionDenied):
        check_permissions(state, bob, create, {"userid": "new@pve"})


def test_ticket_signature_age_and_user_binding():
    authority = TicketAuthority(AuthKeys.generate())
    now = time.time()
    ticket = authority.issue("alice@pve", now)
    assert ticket.startswith("PVE:alice@pve:") and "::" in ticket
    assert authority.verify(ticket, now) == "alice@pve"
    with pytest.raises(AuthenticationFailed):
        authority.verify(ticket.replace("alice@pve", "root@pam"), now)  # forged user
    with pytest.raises(AuthenticationFailed, match="expired"):
        authority.verify(ticket, now + 7201)
    with pytest.raises(AuthenticationFailed):
        TicketAuthority(AuthKeys.generate()).verify(ticket, now)  # another key
    csrf = authority.csrf_token("alice@pve", now)
    assert authority.verify_csrf(csrf, "alice@pve", now)
    assert not authority.verify_csrf(csrf, "bob@pve", now)
    assert not authority.verify_csrf(None, "alice@pve", now)


def test_scrypt_hashes_and_token_cache():
    encoded = hash_secret("s3cret")
    assert encoded.startswith("$scrypt$") and "s3cret" not in encoded
    assert verify_secret("s3cret", encoded) and not verify_secret("other", encoded)
    creds = parse_token_header("PVEAPIToken=alice@pve!ci=11111111-2222-3333-4444-555555555555")
    assert creds == TokenCredentials("alice@pve", "ci", "11111111-2222-3333-4444-555555555555")
    assert parse_token_header("PVEAPIToken=broken") is None
    cache = TokenVerificationCache(ttl=60)
    assert not cache.lookup(creds, 1)
    cache.remember(creds, 1)
    assert cache.lookup(creds, 1)
    assert not cache.lookup(creds, 2)  # token changed → verify again
    wrong = TokenCredentials("alice@pve", "ci", "wrong-secret")
    cache.remember(creds, 1)
    assert not cache.lookup(wrong, 1)  # keyed by the full secret


def test_upid_round_trip():
    upid = Upid("pve1", 0x1A2B, 0x3C4D, 0x65000000, "qmstart", "100", "root@pam!sync")
    text = str(upid)
    assert text == "UPID:pve1:00001A2B:00003C4D:65000000:qmstart:100:root@pam!sync:"
    assert len(text.split(":")) == 9  # PVE splits a UPID into nine fields (last empty)
    parsed = Upid.parse(text)
    assert parsed == upid and parsed.tokenid == "sync" and parsed.userid == "root@pam"
    with pytest.raises(ValueError):
        Upid.parse("UPID:pve1:xyz")


def test_clocks():
    assert clock_from_spec("real").now() == pytest.approx(time.time(), abs=1)
    fast = AcceleratedClock(100)
    start = fast.now()
    time.sleep(0.05)
    assert fast.now() - start >= 4
    with pytest.raises(ValueError):
        clock_from_spec("sideways")

    async def manual():
        clock = ManualClock(start=1000)
        sleeper = asyncio.create_task(clock.sleep(10))
        await asyncio.sleep(0.01)
        assert not sleeper.done()
        clock.advance(5)
        await asyncio.sleep(0.01)
        assert not sleeper.done()
        clock.advance(5)
        await asyncio.wait_for(sleeper, 1)
        assert clock.now() == 1010

    asyncio.run(manual())


def test_guest_state_machine():
    assert rules.check_transition("qemu", 100, "stopped", "start") is True
    with pytest.raises(PveError, match="VM 100 already running"):
        rules.check_transition("qemu", 100, "running", "start")
    assert rules.check_transition("qemu", 100, "stopped", "stop") is False  # no-op
    with pytest.raises(PveError, match="CT 101 not running"):
        rules.check_transition("lxc", 101, "stopped", "shutdown")
    with pytest.raises(PveError, match="paused - cannot shutdown"):
        rules.check_transition("qemu", 100, "paused", "shutdown")
    assert rules.check_transition("qemu", 100, "paused", "resume") is True
    with pytest.raises(PveError, match="destroy failed"):
        rules.require_stopped_for_destroy("qemu", 100, "running")


def test_disk_requests_and_interfaces():
    config = {
        "scsi0": "local-lvm:32,iothread=1",
        "ide2": "local:iso/x.iso,media=cdrom",
        "virtio1": "local-lvm:vm-1-disk-0",
    }
    requests = rules.new_disk_requests("qemu", config)
    assert [(r.key, r.storage, r.size_gib) for r in requests] == [("scsi0", "local-lvm", 32.0)]
    config = rules.ensure_macs(
        "qemu", 100, {"net0": "virtio,bridge=vmbr0", "ipconfig0": "ip=10.0.0.5/24,gw=10.0.0.1"}
    )
    nics = rules.guest_interfaces("qemu", config)
    assert nics[0]["hardware-address"] == rules.mac_for(100, 0).lower()
    assert nics[0]["ip-addresses"] == [
        {"ip-address-type": "ipv4", "ip-address": "10.0.0.5", "prefix": 24}
    ]


@pytest.fixture(scope="module")
def contract() -> Contract:
    return parse_artifact(read_fakepve(), FAKEPVE_SCHEMA_VERSION).contract


def test_route_table_handles_hyphens_and_slashes(contract):
    table = RouteTable(contract)
    match = table.match("/nodes/pve1/storage/local/content/local:iso/debian.iso")
    assert match.template == "/nodes/{node}/storage/{storage}/content/{volume}"
    assert match.params["volume"] == "local:iso/debian.iso"
    match = table.match("/nodes/pve1/qemu/100/status/current")
    assert match.template == "/nodes/{node}/qemu/{vmid}/status/current"
    hyphenated = [p for p in contract.paths if "-id}" in p or "{route-map-id}" in p]
    assert hyphenated, "the contract declares hyphenated parameter names"
    sample = hyphenated[0]
    concrete = sample.replace("{", "").replace("}", "")
    assert table.match(concrete).template == sample
    assert table.match("/no/such/path") is None


def test_validation_spellings_and_messages(contract):
    endpoint = contract.endpoint("/nodes/{node}/qemu/{vmid}/status/stop", "POST")
    for spelling, expected in (("yes", 1), ("off", 0), ("TRUE", 1), ("0", 0), (True, 1)):
        assert parse_boolean(spelling) == expected
    values = validate(
        endpoint, {"node": "pve1", "vmid": "100"}, {"skiplock": "on", "timeout": "+30"}
    )
    assert values["skiplock"] == 1 and values["timeout"] == 30 and values["vmid"] == 100
    with pytest.raises(ParameterError) as err:
        validate(endpoint, {"node": "pve1", "vmid": "99"}, {"skiplock": "maybe", "bogus": "1"})
    errors = err.value.errors
    assert errors["vmid"] == "value must have a minimum value of 100"
    assert "boolean" in errors["skiplock"]
    assert "not defined in schema" in errors["bogus"]
    create = contract.endpoint("/nodes/{node}/qemu", "POST")
    with pytest.raises(ParameterError) as err:
        validate(create, {"node": "pve1"}, {"net0": "virtio", "ostype": "amiga"})
    assert err.value.errors["vmid"] == "property is missing and it is not optional"
    assert "enumeration" in err.value.errors["ostype"]
    ok = validate(create, {"node": "pve1"}, {"vmid": 100, "net0": "virtio,bridge=vmbr0"})
    assert ok["net0"] == "virtio,bridge=vmbr0"


def test_endpoint_model_round_trip(contract):
    endpoint = contract.endpoint("/nodes/{node}/qemu", "POST")
    assert Endpoint.from_dict(endpoint.to_dict()) == endpoint


def test_rendered_list_cache_single_flight_and_failures():
    from proxmox_simulator.domain.guest_service import RenderedListCache

    calls = []

    async def scenario():
        cache = RenderedListCache()

        async def render():
            calls.append(1)
            await asyncio.sleep(0.01)
            return "[1]"

        results = await asyncio.gather(*(cache.get_or_render(("k",), render) for _ in range(5)))
        assert results == ["[1]"] * 5 and len(calls) == 1
        assert cache.get(("k",)) == "[1]"

        async def broken():
            raise PveError("boom")

        with pytest.raises(PveError):
            await cache.get_or_render(("bad",), broken)
        assert cache.get(("bad",)) is None

        disabled = RenderedListCache(max_entries=0)
        await disabled.get_or_render(("k",), render)
        await disabled.get_or_render(("k",), render)
        assert len(calls) == 3  # no caching when disabled

    asyncio.run(scenario())


def test_access_cache_does_not_keep_a_load_that_raced_an_invalidation(monkeypatch):
    from contextlib import asynccontextmanager

    from proxmox_simulator.repositories import access as access_repo
    from proxmox_simulator.runtime import AccessCache

    class FakePool:
        @asynccontextmanager
        async def acquire(self):
            yield None

    cache = AccessCache(FakePool(), TokenVerificationCache())
    loads = []

    async def load_state(_conn):
        loads.append(1)
        if len(loads) == 1:
            cache.invalidate()  # a change commits while the first load is running
        return AccessState()

    monkeypatch.setattr(access_repo, "load_state", load_state)

    async def scenario():
        return await cache.get(), await cache.get(), await cache.get()

    first, second, third = asyncio.run(scenario())
    # The raced load served its caller but was not cached; the clean reload was.
    assert len(loads) == 2 and second is third and first is not second


def test_arrays_given_once_are_lists_and_nul_characters_are_refused(contract):
    """Form-encoded arrays (a mapping's ``map``) arrive as one string or several."""
    create = contract.endpoint("/cluster/mapping/usb", "POST")
    values = validate(create, {}, {"id": "m1", "map": "node=pve1,id=1234:5678"})
    assert values["map"] == ["node=pve1,id=1234:5678"]
    values = validate(create, {}, {"id": "m1", "map": ["node=pve1,id=1:2", "node=pve2,id=1:2"]})
    assert len(values["map"]) == 2
    with pytest.raises(ParameterError) as err:
        validate(create, {}, {"id": "m1", "map": "node=pve1,id=1\x00"})
    assert "NUL" in err.value.errors["map"]
    with pytest.raises(ParameterError) as err:
        validate(create, {}, {"id": "m1", "map": "node=pve1", "description": "a\x00b"})
    assert "NUL" in err.value.errors["description"]
