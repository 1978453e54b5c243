"""The stages' declared NetBox side effects, checked against NetBox's own signal handlers.

NetBox changes rows the API call did not name: its signal receivers (a virtual disk
re-sums its VM's disk total, a deleted address is cleared from the device or VM it was
primary of, a cluster's site is pushed to its VMs) and its counter caches (a VM counts
its interfaces and disks, a device its interfaces). The scheduler orders writes by the
effects the stages declare, so a stage that writes an object type without declaring
what NetBox does with it could race another. This test reads the installed NetBox's
source and fails for any such effect a declaration omits.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
from pathlib import Path

import pytest

from proxbox_backend.pipeline import CREATE, DELETE, UPDATE, Stage
from proxbox_backend.stages import GRAPH, disks, interfaces, ips, node_addresses

APPS = ("virtualization", "dcim", "ipam", "extras")
SIGNAL_OPS = {
    "post_save": {CREATE, UPDATE},
    "pre_save": {CREATE, UPDATE},
    "post_delete": {DELETE},
    "pre_delete": {DELETE},
}
COUNTER_OPS = {CREATE, DELETE}  # and moving a child to another parent, which no plan does


@dataclasses.dataclass(frozen=True)
class SignalEffect:
    sender: str  # the object type whose write triggers it
    ops: frozenset[str]
    touches: str
    whole_row: bool
    source: str


def app_dir(app: str) -> Path:
    spec = importlib.util.find_spec(app)
    assert spec is not None, f"NetBox's {app} app is not installed: the check needs its source"
    return Path(spec.submodule_search_locations[0])


def model_types() -> dict[str, str]:
    """Model class name → object type, for the apps' models."""
    found: dict[str, str] = {}
    for app in APPS:
        for path in sorted((app_dir(app) / "models").glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    found.setdefault(node.name, f"{app}.{node.name.lower()}")
    return found


def receiver_effects(types: dict[str, str]) -> set[SignalEffect]:
    """Every `@receiver(signal, sender=Model)` that writes other models through their
    managers: `.save()` of a row it read saves it whole, a queryset update sets columns."""
    effects = set()
    for app in APPS:
        path = app_dir(app) / "signals.py"
        if not path.exists():
            continue
        for function in ast.parse(path.read_text()).body:
            if not isinstance(function, ast.FunctionDef):
                continue
            for decorator in function.decorator_list:
                if not (
                    isinstance(decorator, ast.Call)
                    and getattr(decorator.func, "id", "") == "receiver"
                ):
                    continue
                signals = decorator.args[0]
                names = [e.id for e in getattr(signals, "elts", [signals])]
                sender = next((k.value.id for k in decorator.keywords if k.arg == "sender"), None)
                if sender not in types:
                    continue
                ops = frozenset().union(*(SIGNAL_OPS.get(name, set()) for name in names))
                managers = {
                    node.value.id
                    for node in ast.walk(function)
                    if isinstance(node, ast.Attribute)
                    and node.attr == "objects"
                    and isinstance(node.value, ast.Name)
                }
                whole = ".save()" in ast.unparse(function)
                for model in managers - {sender}:
                    if model in types:
                        effects.add(
                            SignalEffect(
                                types[sender], ops, types[model], whole, f"{app}.{function.name}"
                            )
                        )
    return effects


def counter_effects() -> set[SignalEffect]:
    """Every `CounterCacheField(to_model=child, ...)` on a parent model: creating or
    deleting a child sets the parent's counter in place."""
    effects = set()
    for app in APPS:
        for path in sorted((app_dir(app) / "models").glob("*.py")):
            for parent in ast.walk(ast.parse(path.read_text())):
                if not isinstance(parent, ast.ClassDef):
                    continue
                for node in ast.walk(parent):
                    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == (
                        "CounterCacheField"
                    ):
                        child = next(k.value.value for k in node.keywords if k.arg == "to_model")
                        child_app, child_model = child.split(".")
                        effects.add(
                            SignalEffect(
                                f"{child_app}.{child_model.lower()}",
                                frozenset(COUNTER_OPS),
                                f"{app}.{parent.name.lower()}",
                                False,
                                f"{app}.{parent.name}.{node.keywords[0].value.value} counter",
                            )
                        )
    return effects


@pytest.fixture(scope="module")
def netbox_effects() -> set[SignalEffect]:
    return receiver_effects(model_types()) | counter_effects()


def omissions(stage: Stage, effects: set[SignalEffect]) -> list[str]:
    """The effects NetBox has for `stage`'s writes that its declaration does not account
    for: neither declared (with at least that reach) nor declared unreached."""
    missing = []
    for object_type, ops in stage.writes.items():
        for effect in effects:
            if effect.sender != object_type:
                continue
            for op in sorted(ops & effect.ops):
                declared = any(
                    e.of == object_type
                    and op in e.on
                    and e.touches == effect.touches
                    and (e.whole_row or not effect.whole_row)
                    for e in stage.effects
                )
                unreached = any(
                    u.of == object_type and op in u.on and u.touches == effect.touches
                    for u in stage.unreached
                )
                if not (declared or unreached):
                    missing.append(f"{stage.name}: {op} {object_type} → {effect.source}")
    return missing


def test_the_derivation_finds_netbox_s_effects(netbox_effects):
    """The parse is not allowed to go blind: the effects this file's docstring names."""
    found = {(e.sender, e.touches, e.whole_row) for e in netbox_effects}
    assert ("virtualization.virtualdisk", "virtualization.virtualmachine", False) in found
    assert ("virtualization.vminterface", "virtualization.virtualmachine", False) in found
    assert ("ipam.ipaddress", "virtualization.virtualmachine", True) in found
    assert ("ipam.ipaddress", "dcim.device", True) in found
    assert ("dcim.interface", "dcim.device", False) in found
    assert ("virtualization.cluster", "virtualization.virtualmachine", False) in found


@pytest.mark.parametrize("stage", GRAPH, ids=lambda s: s.name)
def test_every_stage_declares_what_netbox_writes_when_it_writes(stage, netbox_effects):
    assert omissions(stage, netbox_effects) == []


@pytest.mark.parametrize(
    "stage",
    [disks.STAGE, interfaces.STAGE, ips.STAGE, node_addresses.STAGE],
    ids=lambda s: s.name,
)
def test_a_declaration_without_one_of_its_effects_is_caught(stage, netbox_effects):
    for effect in stage.effects:
        without = dataclasses.replace(stage, effects=tuple(e for e in stage.effects if e != effect))
        if effect.touches == "dcim.macaddress":
            continue  # saved through the interface's instance, not a manager: not derived
        assert omissions(without, netbox_effects), f"{effect} is not needed"
    for unreached in stage.unreached:
        without = dataclasses.replace(stage, unreached=())
        assert omissions(without, netbox_effects), f"{unreached} is not needed"
