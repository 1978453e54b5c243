"""Schemathesis against both plugins' endpoints in NetBox's own OpenAPI document, on a
live NetBox (gunicorn, both plugins, a database cloned from the migrated template).

Every generated request, valid or not, must get no 5xx. A response that breaks its
documented status codes or schema fails the test unless NetBox core's own twin
endpoint (`/api/virtualization/clusters/`, list or detail) answers the same request
— same method, query and body — with the same kind of violation in the same run:
those are NetBox's (its `brief`/`fields` projections, undocumented 4xx). So is a
violation or a 500 of the same kind as one that core's clusters endpoints show on
their own in probes of the same run (a NUL byte in a text field, a UTC offset
PostgreSQL refuses, a null `allOf` + `nullable` relation in an ordinary read).
Excused cases are written to `PROXBOX_FUZZ_REPORT` when set, for docs/reliability.md.

The default e2e session runs 4 derandomized examples per operation (the same cases
each run); `nox -s fuzz` runs PROXBOX_FUZZ_EXAMPLES random ones.
"""

from __future__ import annotations

import json
import os
import re

import pytest
import schemathesis
import sync_fixtures as fixtures
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)


@pytest.fixture(scope="module")
def netbox_server(sync_workdir):
    """A NetBox of its own: the generated writes must not reach the other suites' objects.
    Stopped with the module, so its Redis pair is free for the suites after it."""
    server = fixtures.NetBoxServer(sync_workdir)
    try:
        yield server.start()
    finally:
        server.stop()


EXAMPLES = int(os.environ.get("PROXBOX_FUZZ_EXAMPLES", "4"))
# The default e2e run replays the same cases each time; `nox -s fuzz` explores anew.
DERANDOMIZE = "PROXBOX_FUZZ_EXAMPLES" not in os.environ
PLUGIN_PATHS = r"^/api/plugins/(proxbox|script-projects)/"
CORE_LIST = "/api/virtualization/clusters/"
CORE_DETAIL = "/api/virtualization/clusters/{id}/"
# A 5xx that core shares is NetBox's defect, not the plugin's; it is listed all the same.
CHECKS = (not_a_server_error, status_code_conformance, response_schema_conformance)
MISSING_ID = 2**31 - 1
# Query parameters that shape the answer instead of filtering it: passed on as they are.
NOT_FILTERS = {"brief", "fields", "omit", "exclude", "limit", "offset", "ordering", "q"}
# Excused violations, by check and plugin operation: what NetBox core showed as well.
shared_with_core: dict[str, dict[str, str]] = {}


def _authorization(token: str) -> dict[str, str]:
    scheme = "Bearer" if token.startswith("nbt_") else "Token"
    return {"Authorization": f"{scheme} {token}"}


@pytest.fixture(scope="module")
def netbox_schema(netbox_server):
    with netbox_server.api() as api:
        document = api.get("/schema/", params={"format": "json"})
        assert document.status_code == 200, document.text[:500]
    raw = document.json()
    loaded = schemathesis.openapi.from_dict(raw)
    loaded.bulk_create_errors_read_as_any_of = _read_bulk_create_errors_as_any_of(raw)
    with netbox_server.api() as api:
        cluster_type = api.post(
            "/virtualization/cluster-types/",
            json={"name": f"fuzz-{os.getpid()}", "slug": f"fuzz-{os.getpid()}"},
        )
        assert cluster_type.status_code == 201, cluster_type.text
        core_cluster = api.post(
            "/virtualization/clusters/",
            json={"name": f"fuzz-twin-{os.getpid()}", "type": cluster_type.json()["id"]},
        )
        assert core_cluster.status_code == 201, core_cluster.text
    loaded.core_cluster_id = core_cluster.json()["id"]
    loaded.core_defects = _core_defects(loaded, netbox_server, cluster_type.json()["id"])
    return loaded


def _read_bulk_create_errors_as_any_of(document: dict) -> int:
    """NetBox 4.7 documents the 400 of a list POST as `oneOf: [any object, BulkOperationError]`;
    every bulk error body is an object too, so it matches both and breaks `oneOf` by its very
    shape. Read as `anyOf`, which is what NetBox means (either shape). Core's own endpoints
    carry the same declaration. Returns how many responses were read so."""
    corrected = 0
    for operations in document.get("paths", {}).values():
        post = operations.get("post") or {}
        content = post.get("responses", {}).get("400", {}).get("content", {})
        for media in content.values():
            schema = media.get("schema", {})
            branches = schema.get("oneOf") or []
            if any("BulkOperationError" in str(branch.get("$ref", "")) for branch in branches):
                schema["anyOf"] = schema.pop("oneOf")
                corrected += 1
    return corrected


def _failure_lines(failure: BaseException) -> set[str]:
    """The first line of each violation message ("null is not of type \"object\"")."""
    if isinstance(failure, BaseExceptionGroup):
        return set().union(*(_failure_lines(inner) for inner in failure.exceptions))
    return {str(getattr(failure, "message", "") or failure).strip().splitlines()[0]}


def _server_error_kind(response) -> str:
    """NetBox's 500 body names the exception and its message: the kind is both,
    without the values the message quotes."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:100]
    return f"{body.get('exception')}: {str(body.get('error', '')).split(':')[0]}"


def _core_defects(netbox_schema, netbox_server, cluster_type: int) -> dict[str, set[str]]:
    """What NetBox core's clusters endpoints do wrong on their own, probed in this run:
    500s for a NUL byte in a text field, a UTC offset PostgreSQL refuses and `null` as a
    text lookup's value, and the
    response-schema violations of an ordinary read (null in an `allOf` + `nullable`
    relation)."""
    headers = _authorization(netbox_server.admin_token)
    errors, violations = set(), set()
    with netbox_server.api() as api:
        probes = [
            api.post("/virtualization/clusters/", json={"name": "nul\x00", "type": cluster_type}),
            api.get("/virtualization/clusters/", params={"created__gte": "0276-05-03T00:56-17:22"}),
            # django-filter reads "null" as None, which a text lookup cannot take.
            api.get("/virtualization/clusters/", params={"name__ic": "null"}),
        ]
    errors = {_server_error_kind(r) for r in probes if r.status_code >= 500}
    read = netbox_schema[CORE_DETAIL]["GET"].Case(
        path_parameters={"id": netbox_schema.core_cluster_id}
    )
    try:
        read.validate_response(
            read.call(base_url=netbox_server.url, headers=headers),
            checks=[response_schema_conformance],
        )
    except (AssertionError, FailureGroup) as failure:
        violations = _failure_lines(failure)
    return {"errors": errors, "violations": violations}


def _a_core_defect(netbox_schema, response, check, failure) -> bool:
    defects = netbox_schema.core_defects
    if check is not_a_server_error:
        return _server_error_kind(response) in defects["errors"]
    if check is response_schema_conformance:
        return bool(_failure_lines(failure)) and _failure_lines(failure) <= defects["violations"]
    return False


@pytest.fixture(scope="module", autouse=True)
def report_violations_shared_with_core():
    yield
    target = os.environ.get("PROXBOX_FUZZ_REPORT")
    if target:
        with open(target, "w") as handle:
            json.dump(shared_with_core, handle, indent=2, sort_keys=True)


LOOKUP = re.compile(r"__(n|ic|nic|iew|niew|isw|nisw|ie|nie|empty|regex|iregex|lt|lte|gt|gte)$")


def _filter_kind(parameter: dict) -> tuple:
    """What a query parameter accepts: its lookup suffix and value type, not its title."""
    schema = parameter.get("schema", {})
    value = schema.get("items", schema)  # one value or many: the filter parses each alike
    lookup = LOOKUP.search(parameter["name"])
    # Choice filters (`x-spec-enum-id`) refuse unknown values; free-text ones do not.
    choice = "x-spec-enum-id" in value or "enum" in value
    return (lookup.group(1) if lookup else "", value.get("type"), value.get("format"), choice)


def _twin_query(case, twin_operation) -> dict:
    """The same query for core: its own filter of the same kind where the plugin's is foreign."""
    query = dict(case.query or {})
    core = {
        p["name"]: p
        for p in twin_operation.definition.raw.get("parameters", [])
        if p["name"] not in NOT_FILTERS
    }
    plugin = {p["name"]: p for p in case.operation.definition.raw.get("parameters", [])}
    twin = {}
    for name, value in query.items():
        if name in core or name in NOT_FILTERS:
            twin[name] = value
            continue
        kind = _filter_kind(plugin.get(name, {"name": name}))
        same_kind = next(
            (other for other, p in core.items() if other not in twin and _filter_kind(p) == kind),
            None,
        )
        if same_kind is not None:
            twin[same_kind] = value
    return twin


def _core_twin_violates(netbox_schema, netbox_server, case, response, check) -> bool:
    """Whether NetBox core's clusters endpoint breaks `check` for the same request
    (on a cluster that exists, or not when the plugin's object did not)."""
    detail = "{" in case.operation.path
    path = CORE_DETAIL if detail else CORE_LIST
    methods = {name.upper() for name in netbox_schema[path]}
    if case.method.upper() not in methods:
        return False
    operation = netbox_schema[path][case.method.upper()]
    twin_id = MISSING_ID if response.status_code == 404 else netbox_schema.core_cluster_id
    twin = operation.Case(
        method=case.method,
        path_parameters={"id": twin_id} if detail else {},
        query=_twin_query(case, operation),
        body=case.body,
        media_type=case.media_type,
    )
    response = twin.call(
        base_url=netbox_server.url, headers=_authorization(netbox_server.admin_token)
    )
    try:
        twin.validate_response(response, checks=[check])
    except (AssertionError, FailureGroup):
        return True
    return False


def _describe(case, response) -> str:
    query = "&".join(sorted(case.query or {}))
    return f"{case.method.upper()} {case.operation.path} -> {response.status_code} ({query[:200]})"


def _fuzz_operation(operation, netbox_schema, netbox_server) -> None:
    headers = _authorization(netbox_server.admin_token)
    strategy = st.one_of(operation.as_strategy(mode) for mode in GenerationMode)

    @given(case=strategy)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        phases=[Phase.generate, Phase.target, Phase.shrink],
        derandomize=DERANDOMIZE,
    )
    def answers_as_documented(case):
        response = case.call(base_url=netbox_server.url, headers=headers)
        for check in CHECKS:
            try:
                case.validate_response(response, checks=[check])
            except (AssertionError, FailureGroup) as failure:
                twin = _core_twin_violates(netbox_schema, netbox_server, case, response, check)
                if not (twin or _a_core_defect(netbox_schema, response, check, failure)):
                    raise
                shared = shared_with_core.setdefault(check.__name__, {})
                shared[case.operation.label] = _describe(case, response)

    answers_as_documented()


def test_plugin_endpoints_answer_as_documented(netbox_schema, netbox_server):
    """Every operation of both plugins, each with its own example budget; all findings."""
    findings = {}
    operations = [
        result.ok()
        for result in netbox_schema.include(path_regex=PLUGIN_PATHS).get_all_operations()
    ]
    assert len(operations) > 40, [operation.label for operation in operations]
    assert netbox_schema.bulk_create_errors_read_as_any_of > 10
    for operation in operations:
        try:
            _fuzz_operation(operation, netbox_schema, netbox_server)
        except (Exception, FailureGroup) as failure:  # every operation's finding is reported
            findings[operation.label] = f"{type(failure).__name__}: {failure}"[:3000]
    assert not findings, "\n\n".join(f"{label}\n{text}" for label, text in findings.items())


def test_a_refused_bulk_create_answers_as_documented(netbox_schema, netbox_server):
    """What the fuzzer found once: a list POST refused object by object (the bulk error
    envelope) must validate against the documented 400, as NetBox means it."""
    operation = netbox_schema["/api/plugins/proxbox/clusters/"]["POST"]
    case = operation.Case(
        body=[{"name": "x", "endpoint": {"name": "no-such-endpoint"}}, {"name": "y"}],
        media_type="application/json",
    )
    response = case.call(
        base_url=netbox_server.url, headers=_authorization(netbox_server.admin_token)
    )
    assert response.status_code == 400, response.text
    assert [entry["index"] for entry in response.json()["errors"]] == [0, 1]
    case.validate_response(response, checks=[response_schema_conformance])
