"""QEMU CPU models and flags, machine types and migration capabilities (qemu-server's
CPUConfig, CPUFlags and Machine).

Custom CPU models live in /etc/pve/virtual-guest/cpu-models.conf: a section config
whose sections are named without the ``custom-`` prefix a VM's ``cpu`` uses for them.
Its digest is the content's, as PVE's is the file's SHA-1.  A VM's ``cpu`` option is
verified like PVE's ``pve-vm-cpu-conf`` format: a built-in model of the major's QEMU
or an existing custom model, VM-specific flags only, no ``reported-model``.

CPU flags: each node's host CPU (by the vendor of its model) supports a set of QEMU
flags, as pvestatd publishes them per acceleration type; the flag lists annotate
which nodes support what.
"""

from __future__ import annotations

import hashlib
import json
import re

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import AccessState, Principal
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.domain.node_hardware import model_vendor
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import section_configs as repo

FILE = "cpu-models"
_SECTION_TYPE = "cpu-model"
_PREFIX = "custom-"
_MAPPING_PRIVS = ["Mapping.Audit", "Mapping.Use", "Mapping.Modify"]
_CONFIGID = re.compile(r"^[a-z][a-z0-9_-]+$", re.I)
_DEFAULT_REPORTED = "kvm64"

# qemu-server's VM-specific flags (settable in a VM's own ``cpu``), with descriptions.
_VM_FLAGS = {
    "md-clear": "Tells the guest whether the host mitigates MDS.",
    "pcid": "Cheaper Meltdown mitigation on older Intel cores (Westmere to Ivy Bridge).",
    "spec-ctrl": "Spectre mitigation controls for Intel CPUs.",
    "ssbd": "Speculative Store Bypass protection on Intel models.",
    "ibpb": "Spectre mitigation (branch predictor barrier) for AMD CPUs.",
    "virt-ssbd": "Speculative Store Bypass protection base for AMD models.",
    "amd-ssbd": "Faster Spectre mitigation on AMD CPUs; pair it with virt-ssbd.",
    "amd-no-ssb": "Tells the guest that an AMD host is not affected by Speculative Store Bypass.",
    "pdpe1gb": "1 GiB pages for the guest, where the host supports them.",
    "hv-tlbflush": "Faster TLB flushes for overcommitted Windows guests; old CPUs may crash.",
    "hv-evmcs": "Enlightened VMCS for nested virtualization (Intel only).",
    "aes": "AES-NI instructions for hardware-accelerated encryption.",
}
_NESTED = (
    "nested-virt",
    "Nested virtualization: svm on AMD hosts, vmx on Intel hosts. Live migration needs the "
    "same flag on both ends; pick a CPU model of the host's vendor, not x86-64-vX.",
)
_RAW_NESTED = (
    "The raw nested-virtualization flag; the portable 'nested-virt' picks svm or vmx "
    "by the host CPU."
)


# What a host CPU offers QEMU (QEMU's flag names), by vendor, under KVM; TCG emulates
# the plain instruction set only: no virtualization, Hyper-V or speculation controls.
def _names(text: str) -> list[str]:
    return text.split()


_COMMON = _names(
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx "
    "fxsr sse sse2 syscall nx pdpe1gb rdtscp lm pni pclmulqdq ssse3 fma cx16 pcid sse4.1 "
    "sse4.2 x2apic movbe popcnt aes xsave avx f16c rdrand lahf-lm abm bmi1 avx2 smep bmi2 "
    "erms rdseed adx smap clflushopt clwb sha-ni xsaveopt xsavec xgetbv1 xsaves md-clear "
    "spec-ctrl ssbd ibpb hv-tlbflush"
)
_AMD_ONLY = _names("cmp-legacy sse4a misalignsse 3dnowprefetch osvw topoext perfctr-core")
_HOST = {
    "AuthenticAMD": [*_COMMON, *_AMD_ONLY, *_names("svm virt-ssbd amd-ssbd amd-no-ssb")],
    "GenuineIntel": [
        *_COMMON,
        *_names("vmx ds-cpl est tm2 tsc-adjust hle rtm avx512f avx512dq avx512bw avx512vl"),
        *_names("arch-capabilities hv-evmcs"),
    ],
}
_NOT_EMULATED = _names(
    "fma avx f16c avx2 rdseed clwb xsavec xgetbv1 xsaves md-clear spec-ctrl ssbd ibpb "
    "hv-tlbflush osvw topoext perfctr-core"
)
_TCG = frozenset(_COMMON + _AMD_ONLY) - frozenset(_NOT_EMULATED)


def _host_vendor(cpu_model: str) -> str:
    return "AuthenticAMD" if "AMD" in cpu_model else "GenuineIntel"


def _node_flags(node_row, accel: str) -> set[str]:
    flags = set(_HOST[_host_vendor(node_row["cpu_model"])])
    return flags & _TCG if accel == "tcg" else flags


def _vm_flag_names(adapter) -> list[str]:
    names = sorted(_VM_FLAGS)
    return [*names, _NESTED[0]] if adapter.major >= 9 else names


# -- CPU flags ----------------------------------------------------------------------------


async def cpu_flags(rt, node: str | None, accel: str, arch: str | None, vm_specific: bool):
    """``query_available_cpu_flags``: nested-virt first, then flags some node supports
    (by name), then the rest; ``supported-on`` lists the nodes."""
    async with rt.pool.acquire() as conn:
        if node is not None:
            await require_node(conn, node)
        nodes = await inventory.nodes(conn)
    if (arch or "x86_64") == "aarch64":
        return []
    if vm_specific:
        names = [n for n in _vm_flag_names(rt.adapter) if n != _NESTED[0]]
    else:
        names = sorted({*_VM_FLAGS, *_HOST["AuthenticAMD"], *_HOST["GenuineIntel"]})
    flags = {
        name: {"name": name, "supported-on": set(), "description": _VM_FLAGS.get(name)}
        for name in names
    }
    if not vm_specific:
        for raw in ("svm", "vmx"):
            flags[raw]["description"] = _RAW_NESTED
    nested = {"name": _NESTED[0], "supported-on": set(), "description": _NESTED[1]}
    for row in nodes:
        for flag in _node_flags(row, accel):
            if flag in flags:
                flags[flag]["supported-on"].add(row["node"])
            if flag in ("svm", "vmx"):
                nested["supported-on"].add(row["node"])
    listed = sorted(flags.values(), key=lambda f: (not f["supported-on"], f["name"]))
    out = []
    for entry in (nested, *listed) if rt.adapter.major >= 9 else listed:
        item = {"name": entry["name"], "supported-on": sorted(entry["supported-on"])}
        if entry["description"]:
            item["description"] = entry["description"]
        out.append(item)
    return out


# -- machine types and migration -----------------------------------------------------------

# QEMU's machine versions (x86_64) from the oldest a current QEMU still offers.
_QEMU_RELEASES = (
    *(f"2.{n}" for n in range(4, 13)),
    *("3.0", "3.1", "4.0", "4.1", "4.2", "5.0", "5.1", "5.2", "6.0", "6.1", "6.2"),
    *("7.0", "7.1", "7.2", "8.0", "8.1", "8.2", "9.0", "9.1", "9.2", "10.0"),
)
# qemu-server's PVE revisions of upstream machine versions.
_PVE_REVISIONS = {
    "4.1": {
        "+pve1": "First PVE revision; same hardware as 4.1.",
        "+pve2": "More SCSI drives per guest.",
    },
    "9.2": {"+pve1": "S3/S4 power states off unless enabled."},
}


def _version_key(version: str) -> tuple:
    base, _, pve = version.partition("+pve")
    return (*(int(p) for p in base.split(".")), int(pve or 0))


async def machines(rt, node: str, arch: str | None, returns: dict | None) -> list[dict]:
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
    if (arch or "x86_64") == "aarch64":
        return []
    installed = _version_key(rt.adapter.qemu_version)[:2]
    with_changes = "changes" in ((returns or {}).get("items") or {}).get("properties", {})
    entries = []
    for version in _QEMU_RELEASES:
        if _version_key(version)[:2] > installed:
            continue
        revisions = {"": None, **_PVE_REVISIONS.get(version, {})}
        for suffix, changes in revisions.items():
            for kind, prefix in (("i440fx", "pc-i440fx"), ("q35", "pc-q35")):
                entry = {
                    "id": f"{prefix}-{version}{suffix}",
                    "type": kind,
                    "version": f"{version}{suffix}",
                }
                if changes and with_changes:
                    entry["changes"] = changes
                entries.append(entry)
    # Newest first, as PVE sorts them.
    return sorted(entries, key=lambda e: _version_key(e["version"]), reverse=True)


async def migration(rt, node: str) -> dict:
    """What this node's QEMU can carry in a live migration: 9.x's QEMU has D-Bus VMstate."""
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
    return {"has-dbus-vmstate": rt.adapter.major >= 9}


# -- custom CPU models ----------------------------------------------------------------------


def _bare(name: str) -> str:
    return name[len(_PREFIX) :] if name.startswith(_PREFIX) else name


def _digest(rows) -> str:
    text = json.dumps([[r["id"], r["options"]] for r in rows], sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()


def _entry(row) -> dict:
    return {"cputype": f"{_PREFIX}{row['id']}", **row["options"]}


async def custom_models(conn) -> list[dict]:
    """(name, vendor) entries for ``capabilities/qemu/cpu``: the reported model's vendor."""
    return [
        {
            "name": f"{_PREFIX}{row['id']}",
            "custom": 1,
            "vendor": model_vendor(row["options"].get("reported-model", _DEFAULT_REPORTED)),
        }
        for row in await repo.sections(conn, FILE)
    ]


def can_see(state: AccessState, principal: Principal, name: str) -> bool:
    return state.has(principal, f"/mapping/cpu/{name}", _MAPPING_PRIVS, any_of=True)


async def list_models(rt, state: AccessState, principal: Principal) -> list[dict]:
    async with rt.pool.acquire() as conn:
        rows = await repo.sections(conn, FILE)
    digest = _digest(rows)
    return [
        {**_entry(row), "digest": digest} for row in rows if can_see(state, principal, row["id"])
    ]


async def get_model(rt, cputype: str) -> dict:
    name = _bare(cputype)
    async with rt.pool.acquire() as conn:
        rows = await repo.sections(conn, FILE)
    row = next((r for r in rows if r["id"] == name), None)
    if row is None:
        raise PveError(f"Custom cputype '{name}' not found")
    return {**_entry(row), "digest": _digest(rows)}


def _checked_name(cputype: str) -> str:
    name = _bare(cputype)
    if not _CONFIGID.match(name):
        raise ParameterError({"cputype": f"invalid configuration ID '{name}'"})
    return name


def _options(params: dict, settable: set[str]) -> dict:
    out = {}
    for key in settable:
        if params.get(key) is not None:
            value = params[key]
            out[key] = int(value) if isinstance(value, bool) else value
    return out


async def create_model(rt, params: dict, declared: set[str]) -> None:
    name = _checked_name(params["cputype"])
    options = _options(params, declared - {"cputype", "node"})
    async with rt.pool.acquire() as conn, conn.transaction():
        await repo.lock_file(conn, FILE)
        if not await repo.insert(conn, FILE, name, _SECTION_TYPE, options):
            raise PveError(f"custom CPU model '{name}' already exists")


async def update_model(rt, cputype: str, params: dict, declared: set[str]) -> None:
    deletes = sections.split_list(params.get("delete"))
    if "cputype" in deletes:
        raise PveError("cannot delete 'cputype'")
    name = _checked_name(cputype)
    settable = declared - {"cputype", "node", "digest", "delete"}
    async with rt.pool.acquire() as conn, conn.transaction():
        await repo.lock_file(conn, FILE)
        rows = await repo.sections(conn, FILE)
        sections.check_digest(params.get("digest"), _digest(rows))
        row = next((r for r in rows if r["id"] == name), None)
        if row is None:
            raise PveError(f"custom CPU model '{name}' does not exist")
        options = {k: v for k, v in row["options"].items() if k not in deletes}
        options.update(_options(params, settable))
        sections.require_saved(await repo.update(conn, FILE, name, row["version"], options))


async def delete_model(rt, cputype: str) -> None:
    name = _bare(cputype)
    async with rt.pool.acquire() as conn, conn.transaction():
        await repo.lock_file(conn, FILE)
        if not await repo.delete(conn, FILE, name):
            raise PveError(f"custom CPU model '{name}' does not exist")


# -- a VM's cpu option ------------------------------------------------------------------------

_FLAG = re.compile(r"^[+-]([a-zA-Z0-9\-_.]+)$")


async def check_vm_cpu(conn, adapter, config: dict) -> None:
    """``pve-vm-cpu-conf``: PVE's format check of a VM's ``cpu`` (a 400 on ``cpu``)."""
    value = config.get("cpu")
    if value is None:
        return
    cpu = rules.parse_property_string(str(value), "cputype")
    cputype = cpu.get("cputype")

    def refuse(message: str):
        raise ParameterError({"cpu": message})

    if not cputype:
        refuse("CPU is missing cputype")
    if cputype.startswith(_PREFIX):
        if await repo.section(conn, FILE, _bare(cputype)) is None:
            refuse(f"Custom cputype '{_bare(cputype)}' not found")
    elif cputype not in adapter.cpu_models:
        refuse(f"Built-in cputype '{cputype}' is not defined (missing 'custom-' prefix?)")
    allowed = _vm_flag_names(adapter)
    flags = [f for f in str(cpu.get("flags") or "").split(";") if f]
    for flag in flags:
        match = _FLAG.match(flag)
        if not match or match.group(1) not in allowed:
            refuse(f"VM-specific CPU flags must be a subset of: {', '.join(allowed)}")
    if "reported-model" in cpu:
        refuse("Property 'reported-model' not allowed in VM-specific CPU config.")
