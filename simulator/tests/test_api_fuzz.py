"""Schemathesis against the simulator through its contract: every operation the
simulator handles, with generated parameters (valid and not), over TLS on a database of
its own (the fuzzing deletes and changes whatever it reaches).

Schemathesis reads the OpenAPI 3.1 document the simulator serves at ``/openapi.json``
(generated from the contract it answers from). Zero 5xx, except 501, which is how the simulator (like
PVE) names what it does not implement, and PVE's own 500 refusals (see `_crash`). A small,
derandomized example budget here; `nox -s fuzz` runs it longer with PROXBOX_FUZZ_EXAMPLES.
"""

from __future__ import annotations

import os
import re

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup
from simtest_support import ROOT_PASSWORD, create_database, drop_database, run

from proxmox_simulator.api.handlers.dispatch import handling
from proxmox_simulator.config import Settings
from proxmox_simulator.contracts.registry import resolve_contract

# The default run replays the same 2 cases per operation (hundreds of operations: the
# budget is CI's time); `nox -s fuzz` explores anew with PROXBOX_FUZZ_EXAMPLES.
EXAMPLES = int(os.environ.get("PROXBOX_FUZZ_EXAMPLES", "2"))
DERANDOMIZE = "PROXBOX_FUZZ_EXAMPLES" not in os.environ
BASE = "/api2/json"
NOT_IMPLEMENTED = 501


def handled_document(server, contract) -> dict:
    """The OpenAPI document the simulator serves, cut to the operations it handles."""
    import httpx

    document = httpx.get(f"{server.base_url}/openapi.json", verify=False, timeout=30).json()
    for path, operations in list(document["paths"].items()):
        for method in list(operations):
            endpoint = contract.endpoint(path.removeprefix(BASE), method.upper())
            if endpoint is None or handling(contract, endpoint) is None:
                del operations[method]
            else:
                # Only crashes are checked here; schemathesis would spend the run's time
                # preparing the response schemas (twice the generation time).
                operations[method]["responses"] = {"default": {"description": "PVE envelope"}}
        if not operations:
            del document["paths"][path]
    return document


@pytest.fixture(scope="module")
def fuzzed_server(data_dir):
    """A simulator on its own seeded database: the shared session one stays intact."""
    from proxmox_simulator.cli import seed_database
    from proxmox_simulator.server import SimulatorServer

    url = create_database("fuzz")
    own = Settings(
        database_url=url,
        data_dir=data_dir,
        contract="fakepve",
        clock="instant",
        task_workers=2,
        lease_seconds=10,
        pool_max_size=5,
    )
    run(seed_database(own, "small", 11, ROOT_PASSWORD))
    try:
        with SimulatorServer(own, tls=True) as server:
            yield server, own
    finally:
        drop_database(url)


@pytest.fixture(scope="module")
def pve_session():
    """One HTTP session for every generated request. Without it schemathesis opens a
    session, a connection and a TLS context (reading the system's CA store) per request:
    two fifths of the fuzzing's CPU. No cookie is kept, so each request stands alone
    (`verify=False` goes with each call: requests lets REQUESTS_CA_BUNDLE override a
    session's own)."""
    from http.cookiejar import DefaultCookiePolicy

    import requests

    with requests.Session() as session:
        session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
        yield session


def _login(server) -> dict:
    import httpx

    response = httpx.post(
        f"{server.base_url}{BASE}/access/ticket",
        data={"username": "root@pam", "password": ROOT_PASSWORD},
        verify=False,
        timeout=30,
    )
    response.raise_for_status()
    data = response.json()["data"]
    return {
        "Cookie": f"PVEAuthCookie={data['ticket']}",
        "CSRFPreventionToken": data["CSRFPreventionToken"],
    }


def _crash(response) -> str | None:
    """A server error that is not PVE's own answer: an unhandled exception.

    PVE itself answers 500 with its message in the status line for many refusals
    ("group '0' does not exist") and the simulator does the same; 501 names what it
    does not implement. A crash says "internal error" (the dispatcher's last resort) or
    is not PVE's JSON envelope at all (an error escaping the dispatcher).
    """
    if response.status_code < 500 or response.status_code == NOT_IMPLEMENTED:
        return None
    try:
        enveloped = "data" in response.json()
    except ValueError:
        enveloped = False
    if enveloped and response.message not in ("internal error", "Internal Server Error"):
        return None
    return f"{response.status_code} {response.message!r} {response.text[:300]}"


def _explain(failure: BaseException) -> str:
    if isinstance(failure, BaseExceptionGroup):
        return "\n".join(_explain(inner) for inner in failure.exceptions)
    return str(failure)


def test_handled_operations_answer_without_server_errors(fuzzed_server, pve_session):
    server, own = fuzzed_server
    contract = resolve_contract(own.contract, own.data_dir)
    schema = schemathesis.openapi.from_dict(handled_document(server, contract))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 50, len(operations)
    headers = _login(server)
    findings: dict[str, str] = {}

    for operation in operations:
        # Logging out or changing root's password would end the run's session.
        if re.search(r"/access/(ticket|password)$", operation.path):
            continue
        strategy = st.one_of(operation.as_strategy(mode) for mode in GenerationMode)

        @given(case=strategy)
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            phases=[Phase.generate, Phase.shrink],
            derandomize=DERANDOMIZE,
        )
        def answers(case):
            response = case.call(
                base_url=server.base_url, headers=headers, session=pve_session, verify=False
            )
            error = _crash(response)
            assert error is None, f"{case.method} {case.formatted_path}: {error}"

        try:
            answers()
        except (Exception, FailureGroup) as failure:  # every finding is reported
            findings[operation.label] = _explain(failure)[:2000]
    assert not findings, "\n\n".join(f"{label}\n{text}" for label, text in findings.items())


# Random integers stay small; storage and Python stop at fixed widths. Each unbounded
# integer parameter is also sent at these: int4's and int8's edges, past uint8, and more
# digits than Python's int() reads (sys.get_int_max_str_digits).
ABOVE = ("2147483647", "2147483648", "9223372036854775807", "9223372036854775808", "1" * 21)
BELOW = ("-2147483649", "-9223372036854775809")
TOO_MANY_DIGITS = "9" * 5000
# Reads (positions, counts, windows) by default; `nox -s fuzz` probes every method.
BOUND_METHODS = ("GET", "DELETE") if DERANDOMIZE else ("GET", "DELETE", "POST", "PUT")


def _integer_bounds(endpoint) -> dict[str, tuple[str, ...]]:
    """Each integer parameter's boundary values the contract admits (or that PVE's
    validation must refuse by name): its unbounded sides only."""
    in_path = set(endpoint.path_params)
    bounds = {}
    for parameter in endpoint.parameters:
        if parameter.type != "integer" or parameter.name in in_path or parameter.enum:
            continue
        values: tuple[str, ...] = ()
        if parameter.maximum is None:
            values += (*ABOVE, TOO_MANY_DIGITS)
        if parameter.minimum is None:
            values += (*BELOW, "-" + TOO_MANY_DIGITS)
        if values:
            bounds[parameter.name] = values
    return bounds


def _probe_guest(pve, guests: list[dict], kind: str) -> dict:
    """A running guest of `kind`, for qemu one whose agent is configured, so agent calls
    reach the agent's storage instead of stopping at "not running"."""
    running = [g for g in guests if g["type"] == kind and g["status"] == "running"]
    for guest in running if kind == "qemu" else ():
        config = pve.get(f"/nodes/{guest['node']}/qemu/{guest['vmid']}/config").json()["data"]
        if str(config.get("agent", "0")).split(",")[0] in ("1", "enabled=1"):
            return guest
    return (running or [g for g in guests if g["type"] == kind])[0]


def _existing_path_values(server, headers) -> dict[str, dict[str, str]]:
    """Path parameters naming seeded objects, so a probe reaches the handler's storage
    instead of stopping at "no such node": per guest kind, then for any other path."""
    import httpx

    with httpx.Client(
        base_url=server.base_url + BASE, headers=headers, verify=False, timeout=30
    ) as pve:
        guests = pve.get("/cluster/resources", params={"type": "vm"}).json()["data"]
        probed = {kind: _probe_guest(pve, guests, kind) for kind in ("qemu", "lxc")}
        # A task of its own, on a guest no probe names (its state changes under the task):
        # one with a log whose positions the probes go past.
        guest = next(g for g in guests if g not in probed.values())
        action = "stop" if guest["status"] == "running" else "start"
        upid = pve.post(f"/nodes/{guest['node']}/{guest['type']}/{guest['vmid']}/status/{action}")
    values = {"": {"node": guest["node"], "upid": upid.json()["data"]}}
    for kind, guest in probed.items():
        values[f"/{kind}/"] = {**values[""], "node": guest["node"], "vmid": str(guest["vmid"])}
    return values


def _probe_bounds(operation, server, session, headers, known: dict, bounds: dict) -> int:
    """One generated valid request of `operation`, its path naming `known` objects, sent
    once per boundary value of each parameter; returns the number of requests."""
    in_query = operation.method.upper() in ("GET", "DELETE")
    sent = 0

    @given(case=operation.as_strategy(GenerationMode.POSITIVE))
    @settings(
        max_examples=1,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        phases=[Phase.generate],
        derandomize=True,
    )
    def answers_at_bounds(case):
        nonlocal sent
        generated = case.path_parameters or {}
        case.path_parameters = {name: known.get(name, value) for name, value in generated.items()}
        for name, values in bounds.items():
            for value in values:
                fields = dict((case.query if in_query else case.body) or {})
                fields[name] = value
                if in_query:
                    case.query = fields
                else:
                    case.body = fields
                response = case.call(
                    base_url=server.base_url, headers=headers, session=session, verify=False
                )
                sent += 1
                error = _crash(response)
                assert error is None, (
                    f"{case.method} {case.formatted_path} {name}={value[:24]}: {error}"
                )

    answers_at_bounds()
    return sent


def test_unbounded_integer_parameters_answer_at_storage_bounds(fuzzed_server, pve_session):
    """Every handled operation, once per boundary value of each integer parameter the
    contract leaves unbounded, the rest of the request generated valid and its path
    naming seeded objects: never a crash."""
    server, own = fuzzed_server
    contract = resolve_contract(own.contract, own.data_dir)
    schema = schemathesis.openapi.from_dict(handled_document(server, contract))
    headers = _login(server)
    existing = _existing_path_values(server, headers)
    probed, findings = 0, {}
    for operation in (result.ok() for result in schema.get_all_operations()):
        if operation.method.upper() not in BOUND_METHODS:
            continue
        if re.search(r"/access/(ticket|password)$", operation.path):
            continue
        endpoint = contract.endpoint(operation.path.removeprefix(BASE), operation.method.upper())
        bounds = _integer_bounds(endpoint)
        if not bounds:
            continue
        known = existing[next((k for k in existing if k and k in operation.path), "")]
        try:
            probed += _probe_bounds(operation, server, pve_session, headers, known, bounds)
        except (Exception, FailureGroup) as failure:
            findings[operation.label] = _explain(failure)[:1000]
    assert probed > 150, probed
    assert not findings, "\n\n".join(f"{label}\n{text}" for label, text in findings.items())


def test_a_refusal_quoting_non_latin1_input_is_answered():
    """Found by the fuzzing: the reason phrase went into a latin-1 header and crashed."""
    from proxmox_simulator.api import render
    from proxmox_simulator.api.render import REASON_HEADER
    from proxmox_simulator.domain.errors import PveError

    refusal = PveError("group 'grp\u0100\U0001f600' does not exist", status=500)
    response = render.error(refusal, "json")
    assert response.status_code == 500
    assert response.headers[REASON_HEADER] == "group 'grp??' does not exist"
    assert response.body == b'{"data":null}'


@pytest.mark.parametrize("kind", ["number", "integer"])
def test_bounds_the_contract_writes_as_strings_are_checked(kind):
    """Found by the fuzzing: `bwlimit` (`"minimum": "0"`) made every create/clone a 500."""
    from proxmox_simulator.api.validation import coerce
    from proxmox_simulator.contracts.model import Parameter

    bounded = Parameter(name="bwlimit", type=kind, minimum="0", maximum="100")
    assert coerce(bounded, "5") == (5, None)
    assert coerce(bounded, "-1")[1] == "value must have a minimum value of 0"
    assert coerce(bounded, "101")[1] == "value must have a maximum value of 100"


def test_a_pool_member_list_that_is_not_vm_ids_is_a_parameter_error(fuzzed_server):
    """Found by the fuzzing: `PUT /pools/{poolid}` with `vms=abc` was a 500 (ValueError)."""
    import httpx

    server, _ = fuzzed_server
    with httpx.Client(
        base_url=server.base_url + BASE, headers=_login(server), verify=False, timeout=30
    ) as pve:
        assert pve.post("/pools", data={"poolid": "fuzz-members"}).status_code == 200
        response = pve.put("/pools/fuzz-members", data={"vms": "100,abc"})
    assert response.status_code == 400, response.text
    assert response.json()["errors"] == {"vms": "value does not look like a valid VM ID list"}


@pytest.mark.parametrize("value", ["\u00b2", "vm:\u00b2", "\u0661\u0660\u0660"])
def test_non_ascii_digits_are_not_service_or_guest_ids(fuzzed_server, value):
    """Found by the fuzzing: `GET /cluster/ha/resources/²` was a 500 ("²".isdigit() is True)."""
    import httpx

    server, _ = fuzzed_server
    with httpx.Client(
        base_url=server.base_url + BASE, headers=_login(server), verify=False, timeout=30
    ) as pve:
        response = pve.get(f"/cluster/ha/resources/{value}")
    assert response.status_code == 400, response.text
    assert "unable to parse service id" in response.json()["errors"]["sid"]
