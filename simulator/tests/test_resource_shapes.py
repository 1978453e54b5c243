"""How the resource store reads the contract (pure functions, no database)."""

from __future__ import annotations

import dataclasses

import pytest

from proxmox_simulator.contracts import sources
from proxmox_simulator.contracts.model import Contract, Endpoint
from proxmox_simulator.domain import resource_shapes as shapes


@pytest.fixture(scope="module")
def contract() -> Contract:
    return sources.parse_artifact(sources.read_fakepve(), sources.FAKEPVE_SCHEMA_VERSION).contract


@pytest.mark.parametrize(
    ("method", "path", "role", "collection", "key"),
    [
        ("GET", "/cluster/ha/groups", shapes.LIST, "/cluster/ha/groups/{group}", "group"),
        ("POST", "/cluster/ha/groups", shapes.CREATE, "/cluster/ha/groups/{group}", "group"),
        ("GET", "/cluster/ha/groups/{group}", shapes.READ, "/cluster/ha/groups/{group}", "group"),
        ("PUT", "/cluster/ha/groups/{group}", shapes.UPDATE, "/cluster/ha/groups/{group}", "group"),
        (
            "DELETE",
            "/cluster/ha/groups/{group}",
            shapes.DELETE,
            "/cluster/ha/groups/{group}",
            "group",
        ),
        # An item that is also a collection: POST adds a rule below the group.
        (
            "POST",
            "/cluster/firewall/groups/{group}",
            shapes.CREATE,
            "/cluster/firewall/groups/{group}/{pos}",
            "pos",
        ),
        # POST on an item path with no children creates at that key.
        (
            "POST",
            "/cluster/metrics/server/{id}",
            shapes.CREATE,
            "/cluster/metrics/server/{id}",
            "id",
        ),
        # 8.x's pools: the item key is a parameter of a write on the collection.
        ("PUT", "/pools", shapes.UPDATE, "/pools/{poolid}", "poolid"),
        ("DELETE", "/pools", shapes.DELETE, "/pools/{poolid}", "poolid"),
        ("GET", "/cluster/options", shapes.CONFIG_READ, "/cluster/options", None),
        ("PUT", "/cluster/options", shapes.CONFIG_WRITE, "/cluster/options", None),
        ("GET", "/cluster/log", shapes.LIST, "/cluster/log", None),
        ("POST", "/cluster/ha/status/arm-ha", shapes.ACTION, "/cluster/ha/status/arm-ha", None),
        ("DELETE", "/cluster/sdn/lock", shapes.CONFIG_CLEAR, "/cluster/sdn/lock", None),
        # A collection GET that answers an object is read as one document.
        ("GET", "/nodes/{node}/ceph/osd", shapes.CONFIG_READ, "/nodes/{node}/ceph/osd", None),
    ],
)
def test_roles_follow_the_path_shape(contract, method, path, role, collection, key):
    shape = shapes.shape_of(contract, contract.endpoint(path, method))
    assert (shape.role, shape.collection, shape.key_param) == (role, collection, key)


def test_bulk_writes_on_a_bespoke_collection_are_left_to_it(contract):
    from proxmox_simulator.api.handlers.dispatch import handling

    # GET /nodes/{node}/network and GET /pools are bespoke: their bulk writes
    # would touch the same items, so the store does not take them.
    assert handling(contract, contract.endpoint("/nodes/{node}/network", "PUT")) != "resource-store"
    assert handling(contract, contract.endpoint("/pools", "DELETE")) != "resource-store"
    # The same shape under a path no handler takes is the store's.
    future = dataclasses.replace(contract.endpoint("/pools", "DELETE"), path="/future-things")
    assert handling(Contract(contract.version, (*contract.endpoints, future)), future) == (
        "resource-store"
    )


def test_scope_is_the_parent_path_parameters(contract):
    shape = shapes.shape_of(
        contract, contract.endpoint("/cluster/sdn/vnets/{vnet}/subnets/{subnet}", "PUT")
    )
    assert shape.scope_params == ("vnet",)
    assert shapes.shape_of(contract, Endpoint("/x/{a}", "PATCH")) is None


@pytest.mark.parametrize(
    ("method", "path", "task"),
    [
        ("POST", "/nodes/{node}/ceph/osd", True),  # bare string
        ("POST", "/cluster/bulk-action/guest/start", True),  # "UPID of the worker"
        ("POST", "/access/domains/{realm}/sync", True),  # "Worker Task-UPID"
        ("POST", "/access/openid/auth-url", False),  # "Redirection URL."
        ("POST", "/nodes/{node}/wakeonlan", False),  # format mac-addr
        ("GET", "/nodes/{node}/apt/changelog", False),  # reads never start tasks
        ("POST", "/cluster/ha/groups", False),  # null
    ],
)
def test_which_methods_return_a_task(contract, method, path, task):
    assert shapes.returns_task(contract.endpoint(path, method)) is task


def test_values_are_rendered_as_the_schema_declares():
    schema = {
        "type": "object",
        "properties": {
            "count": {"type": "integer"},
            "ratio": {"type": "number", "optional": 1},
            "on": {"type": "boolean"},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "node": {"type": "string"},
            "nested": {"type": "array", "items": {"type": "string"}},
            "absent": {"type": "string", "optional": 1},
            "size": {"type": "integer", "default": 4},
        },
    }
    rendered = shapes.shape_value(
        schema, {"count": "7", "on": "yes", "extra": "kept"}, {"node": "pve1"}
    )
    assert rendered == {
        "count": 7,
        "on": 1,
        "mode": "a",
        "node": "pve1",
        "nested": [],
        "size": 4,
        "extra": "kept",
    }
    assert shapes.schema_errors(schema, rendered) == []
    closed = {**schema, "additionalProperties": 0}
    assert "extra" not in shapes.shape_value(closed, {"extra": 1}, {})
    assert shapes.shape_value({"type": "null"}, {"a": 1}, {}) is None
    assert shapes.shape_value({}, {"free": "form"}, {}) == {"free": "form"}
    # An array parameter sent once in a form body reads back as a one-item list.
    strings = {"type": "array", "items": {"type": "string"}}
    assert shapes.shape_value(strings, "a", {}) == ["a"]
    assert shapes.shape_value(strings, None, {}) == []


def test_schema_errors_name_what_is_wrong():
    schema = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "kind": {"type": "string", "enum": ["x"]}},
        },
    }
    assert shapes.schema_errors(schema, [{"id": 1, "kind": "x"}]) == []
    assert shapes.schema_errors(schema, [{"kind": "y"}, "no"]) == [
        "data[0].id: required property missing",
        "data[0].kind: 'y' not in enum",
        "data[1]: str is not object",
    ]
    assert shapes.schema_errors({"type": "integer"}, "12") == []  # PVE's numeric strings
    assert shapes.schema_errors({"type": "integer"}, "twelve") == ["data: str is not integer"]
    assert shapes.schema_errors({"type": "string"}, None) == ["data: null"]
