"""Which contract a process answers from: a major's declared snapshot and a profile.

* ``strict-docs`` — the declared documentation only; observations are ignored.
* ``observed`` — sanitized recorded behaviour wins: a declared method the observed
  server answered "not implemented" is dropped, an observed answer's shape replaces
  the declared ``returns``, and methods only the server listed are added.
* ``hybrid`` — the declared documentation wins where it says something; observations
  add the methods it lacks and the shapes it leaves empty.

The result is an ordinary ``Contract`` (the effective snapshot), so routing,
validation, handlers and the OpenAPI document never test the profile themselves.
"""

from __future__ import annotations

from pathlib import Path

from proxmox_simulator.contracts.model import Contract, Endpoint
from proxmox_simulator.contracts.observations import ObservationSet

STRICT_DOCS, OBSERVED, HYBRID = "strict-docs", "observed", "hybrid"
PROFILES = (STRICT_DOCS, OBSERVED, HYBRID)
SWAPPABLE_MAJORS = (6, 7, 8, 9)


class ContractUnavailable(ValueError):
    """No snapshot of the requested major is available to this process."""


def apidoc_dirs(data_dir: Path, apidoc_dir: Path | None = None) -> list[Path]:
    """Where official viewer schemas wait to be imported: the configured directory
    (``PROXMOX_SIMULATOR_APIDOC_DIR``) and the data directory's ``apidoc/``."""
    return [d for d in (apidoc_dir, Path(data_dir) / "apidoc") if d is not None]


def _waiting_schema(major: int, dirs: list[Path]) -> Path | None:
    """The newest ``pve-<major>.*-apidoc.js`` in ``dirs`` (first directory wins a tie)."""
    from proxmox_simulator.contracts.registry import _version_key
    from proxmox_simulator.contracts.sources import guess_version

    found: dict[str, Path] = {}
    for directory in dirs:
        for path in sorted(Path(directory).glob(f"pve-{major}.*-apidoc.js")):
            version = guess_version(path.name)
            if version is not None and version.split(".")[0] == str(major):
                found.setdefault(version, path)
    if not found:
        return None
    return found[max(found, key=_version_key)]


def provision(major: int, data_dir: Path, apidoc_dir: Path | None = None) -> dict | None:
    """Import the newest waiting schema of ``major`` into the registry (its manifest),
    unless the registry already holds that major; None when there is nothing to import."""
    from proxmox_simulator.contracts.registry import ContractRegistry
    from proxmox_simulator.contracts.sources import guess_version, parse_artifact, read_file

    registry = ContractRegistry(data_dir)
    if any(m["major"] == major for m in registry.versions()):
        return None
    path = _waiting_schema(major, apidoc_dirs(data_dir, apidoc_dir))
    if path is None:
        return None
    artifact = read_file(path)
    return registry.store(artifact, parse_artifact(artifact, guess_version(path.name)))


def declared_version(major: int, data_dir: Path, apidoc_dir: Path | None = None) -> str:
    """The version ``declared_for_major`` loads, read from the manifests only (a major's
    waiting schema is imported first, so a hot-swap needs no manual import)."""
    from proxmox_simulator.contracts.registry import ContractRegistry
    from proxmox_simulator.contracts.sources import FAKEPVE_SCHEMA_VERSION

    if major not in SWAPPABLE_MAJORS:
        raise ContractUnavailable(
            f"major {major} is not one of {', '.join(map(str, SWAPPABLE_MAJORS))}"
        )
    if major != 9:
        provision(major, data_dir, apidoc_dir)
    versions = [m["version"] for m in ContractRegistry(data_dir).versions() if m["major"] == major]
    if versions:
        return versions[-1]
    if major == 9:
        return FAKEPVE_SCHEMA_VERSION
    raise ContractUnavailable(
        f"no contract of major {major} is imported: run "
        f"`proxmox-simulator contract import pve-{major}.x-apidoc.js` first, or put the file "
        f"in PROXMOX_SIMULATOR_APIDOC_DIR or {Path(data_dir) / 'apidoc'}"
    )


def declared_for_major(major: int, data_dir: Path, apidoc_dir: Path | None = None) -> Contract:
    """The newest imported snapshot of ``major``; major 9 falls back to fakepve's."""
    from proxmox_simulator.contracts.registry import ContractRegistry, resolve_contract
    from proxmox_simulator.contracts.sources import FAKEPVE_SCHEMA_VERSION

    version = declared_version(major, data_dir, apidoc_dir)
    registry = ContractRegistry(data_dir)
    if major == 9 and version == FAKEPVE_SCHEMA_VERSION:
        try:
            return registry.load(version)
        except (KeyError, FileNotFoundError):
            return resolve_contract("fakepve", data_dir)
    return registry.load(version)


def effective_contract(
    declared: Contract, observed: ObservationSet | None, profile: str
) -> Contract:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: one of {', '.join(PROFILES)}")
    if profile == STRICT_DOCS or observed is None:
        return declared
    seen = observed.by_key()
    endpoints: list[Endpoint] = []
    for endpoint in declared.endpoints:
        obs = seen.pop(endpoint.key, None)
        if obs is None:
            endpoints.append(endpoint)
        elif not obs.present:
            if profile == HYBRID:
                endpoints.append(endpoint)
        elif obs.returns is not None and (profile == OBSERVED or not endpoint.returns):
            endpoints.append(_with_returns(endpoint, obs.returns))
        else:
            endpoints.append(endpoint)
    for obs in seen.values():
        if obs.present:
            endpoints.append(
                Endpoint(
                    path=obs.path,
                    method=obs.method,
                    returns=obs.returns or {},
                    # No document says who may call it: PVE's default, root only.
                    permissions=None,
                    extra={"observed": 1},
                )
            )
    return Contract(version=declared.version, endpoints=tuple(endpoints))


def _with_returns(endpoint: Endpoint, returns: dict) -> Endpoint:
    from dataclasses import replace

    return replace(endpoint, returns=returns)
