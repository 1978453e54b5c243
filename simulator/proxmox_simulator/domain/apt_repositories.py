"""A node's APT repository files, as PVE's ``proxmox-apt`` reads and edits them.

The node's files under /etc/apt live in its ``apt-repositories`` setting: a list
of ``{"path", "file-type", "repositories"}``, each repository the deb822 fields
(Types, URIs, Suites, Components, Options, Comment, Enabled).  A fresh node has
what the major's installer writes: Debian's repositories plus the enterprise
ones, in one-line ``.list`` files before 9.x and in deb822 ``.sources`` files
since.  Each file's digest is the SHA-256 of its rendered text; the common
digest (what POST/PUT check) hashes those, so any change to any file moves it.
"""

from __future__ import annotations

import copy
import hashlib
from urllib.parse import urlsplit

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.repositories import node_system as repo

SETTING = "apt-repositories"
_KEYRING = "/usr/share/keyrings/proxmox-archive-keyring.gpg"
_DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
_ENTERPRISE = "https://enterprise.proxmox.com/debian"
_DOWNLOAD = "http://download.proxmox.com/debian"
# Debian releases in order: older than the node's is "old", newer is "newer".
_DEBIAN_RELEASES = ("stretch", "buster", "bullseye", "bookworm", "trixie", "forky", "duke")
_DEVELOPMENT_SUITES = ("testing", "unstable", "sid", "experimental")
_CEPH_NAMES = {"octopus": "Octopus", "quincy": "Quincy", "reef": "Reef", "squid": "Squid"}


def _deb822(adapter) -> bool:
    return adapter.major >= 9


def _repository(uris, suites, components, *, deb822: bool, keyring=_KEYRING, enabled=True):
    entry = {
        "Types": ["deb"],
        "URIs": list(uris),
        "Suites": list(suites),
        "Components": list(components),
        "Enabled": enabled,
        "FileType": "sources" if deb822 else "list",
    }
    if deb822:
        entry["Options"] = [{"Key": "Signed-By", "Values": [keyring]}]
    return entry


def _standard(adapter) -> list[tuple[str, str, str, str, str]]:
    """(handle, name, base URI, component, file) of the major's standard repositories."""
    ceph = adapter.ceph_release
    ext = ".sources" if _deb822(adapter) else ".list"
    test = "pve-test" if adapter.major >= 9 else "pvetest"
    main_file = (
        "/etc/apt/sources.list.d/proxmox.sources" if _deb822(adapter) else "/etc/apt/sources.list"
    )
    out = [
        (
            "enterprise",
            "Enterprise",
            f"{_ENTERPRISE}/pve",
            "pve-enterprise",
            f"/etc/apt/sources.list.d/pve-enterprise{ext}",
        ),
        (
            "no-subscription",
            "No-Subscription",
            f"{_DOWNLOAD}/pve",
            "pve-no-subscription",
            main_file,
        ),
        ("test", "Test", f"{_DOWNLOAD}/pve", test, main_file),
    ]
    ceph_file = f"/etc/apt/sources.list.d/ceph{ext}"
    name = _CEPH_NAMES[ceph]
    if adapter.major >= 8:
        out += [
            (
                f"ceph-{ceph}-enterprise",
                f"Ceph {name} Enterprise",
                f"{_ENTERPRISE}/ceph-{ceph}",
                "enterprise",
                ceph_file,
            ),
            (
                f"ceph-{ceph}-no-subscription",
                f"Ceph {name} No-Subscription",
                f"{_DOWNLOAD}/ceph-{ceph}",
                "no-subscription",
                ceph_file,
            ),
        ]
    out.append(
        (f"ceph-{ceph}-test", f"Ceph {name} Test", f"{_DOWNLOAD}/ceph-{ceph}", "test", ceph_file)
    )
    return out


def initial_files(adapter) -> list[dict]:
    """What the major's installer leaves in /etc/apt."""
    suite, deb822 = adapter.debian_suite, _deb822(adapter)
    debian = [
        _repository(
            ["http://deb.debian.org/debian"],
            [suite, f"{suite}-updates"] if deb822 else [suite],
            ["main", "contrib", "non-free-firmware"] if adapter.major >= 8 else ["main", "contrib"],
            deb822=deb822,
            keyring=_DEBIAN_KEYRING,
        ),
        _repository(
            ["http://security.debian.org/debian-security"],
            [f"{suite}-security" if adapter.major >= 7 else f"{suite}/updates"],
            ["main", "contrib", "non-free-firmware"] if adapter.major >= 8 else ["main", "contrib"],
            deb822=deb822,
            keyring=_DEBIAN_KEYRING,
        ),
    ]
    if not deb822:
        debian.insert(
            1,
            _repository(
                ["http://deb.debian.org/debian"],
                [f"{suite}-updates"],
                debian[0]["Components"],
                deb822=False,
            ),
        )
    standard = {s[0]: s for s in _standard(adapter)}
    files = [
        {
            "path": "/etc/apt/sources.list.d/debian.sources" if deb822 else "/etc/apt/sources.list",
            "file-type": "sources" if deb822 else "list",
            "repositories": debian,
        }
    ]
    keep = ["enterprise"]
    if adapter.major >= 8:
        keep.append(f"ceph-{adapter.ceph_release}-enterprise")
    for handle in keep:
        _, _, uri, component, path = standard[handle]
        files.append(
            {
                "path": path,
                "file-type": "sources" if deb822 else "list",
                "repositories": [_repository([uri], [suite], [component], deb822=deb822)],
            }
        )
    return files


def render(file: dict) -> str:
    """The file's text (what its digest hashes)."""
    lines: list[str] = []
    for entry in file["repositories"]:
        if entry.get("Comment"):
            lines += [f"#{line}" for line in entry["Comment"].splitlines()]
        if file["file-type"] == "list":
            options = " ".join(
                f"{o['Key']}={','.join(o['Values'])}" for o in entry.get("Options", [])
            )
            for kind in entry["Types"]:
                for uri in entry["URIs"]:
                    for suite in entry["Suites"]:
                        words = [
                            kind,
                            f"[{options}]" if options else "",
                            uri,
                            suite,
                            *entry.get("Components", []),
                        ]
                        text = " ".join(w for w in words if w)
                        lines.append(text if entry["Enabled"] else f"# {text}")
            lines.append("")
        else:
            lines += [
                f"Types: {' '.join(entry['Types'])}",
                f"URIs: {' '.join(entry['URIs'])}",
                f"Suites: {' '.join(entry['Suites'])}",
            ]
            if entry.get("Components"):
                lines.append(f"Components: {' '.join(entry['Components'])}")
            for option in entry.get("Options", []):
                lines.append(f"{option['Key']}: {' '.join(option['Values'])}")
            if not entry["Enabled"]:
                lines.append("Enabled: false")
            lines.append("")
    return "\n".join(lines)


def _file_digest(file: dict) -> bytes:
    return hashlib.sha256(render(file).encode()).digest()


def _common_digest(files: list[dict]) -> str:
    hasher = hashlib.sha256()
    for file in sorted(files, key=lambda f: f["path"]):
        hasher.update(_file_digest(file))
    return hasher.hexdigest()


def _origin(entry: dict) -> str | None:
    for uri in entry["URIs"]:
        host = urlsplit(uri).hostname or ""
        if host == "debian.org" or host.endswith(".debian.org"):
            return "Debian"
        if host == "proxmox.com" or host.endswith(".proxmox.com"):
            return "Proxmox"
    return None


def _suite_warning(suite: str, current: str) -> tuple[str, str] | None:
    """(kind, message) for a suite other than the node's release, as proxmox-apt warns."""
    base = suite.split("/", 1)[0].split("-", 1)[0]
    if base in _DEVELOPMENT_SUITES:
        return "warning", f"suite '{suite}' should not be used in production!"
    if base not in _DEBIAN_RELEASES or base == current:
        return None
    if _DEBIAN_RELEASES.index(base) < _DEBIAN_RELEASES.index(current):
        return "warning", f"old suite '{suite}' configured!"
    return "ignore-pre-upgrade-warning", f"newer suite '{suite}' configured!"


def _infos(files: list[dict], adapter) -> list[dict]:
    infos = []
    for file in files:
        for index, entry in enumerate(file["repositories"]):
            where = {"path": file["path"], "index": str(index)}
            origin = _origin(entry)
            if origin:
                infos.append({**where, "kind": "origin", "message": origin})
            if not entry["Enabled"]:
                continue
            for suite in entry["Suites"]:
                warning = _suite_warning(suite, adapter.debian_suite)
                if warning:
                    infos.append(
                        {**where, "kind": warning[0], "property": "Suites", "message": warning[1]}
                    )
    return infos


def _references(entry: dict, uri: str, component: str, suite: str) -> bool:
    return (
        any(u.rstrip("/") == uri for u in entry["URIs"])
        and suite in entry["Suites"]
        and component in entry.get("Components", [])
    )


def _standard_repos(files: list[dict], adapter) -> list[dict]:
    out = []
    for handle, name, uri, component, _path in _standard(adapter):
        entry = {"handle": handle, "name": name}
        states = [
            r["Enabled"]
            for f in files
            for r in f["repositories"]
            if _references(r, uri, component, adapter.debian_suite)
        ]
        if states:
            entry["status"] = any(states)
        out.append(entry)
    return out


def _view(files: list[dict], adapter) -> dict:
    return {
        "files": [{**copy.deepcopy(f), "digest": list(_file_digest(f))} for f in files],
        "errors": [],
        "digest": _common_digest(files),
        "infos": _infos(files, adapter),
        "standard-repos": _standard_repos(files, adapter),
    }


async def repositories(rt, node: str) -> dict:
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        row = await repo.setting(conn, node, SETTING, initial_files(rt.adapter))
    return _view(row["value"], rt.adapter)


async def _edit(rt, node: str, digest: str | None, change) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        row = await repo.lock_setting(conn, node, SETTING, initial_files(rt.adapter))
        files = copy.deepcopy(row["value"])
        sections.check_digest(digest, _common_digest(files))
        if change(files) is False:
            return
        sections.require_saved(await repo.save_setting(conn, node, SETTING, row["version"], files))


async def change_repository(rt, node: str, path: str, index: int, enabled, digest) -> None:
    def change(files: list[dict]):
        file = next((f for f in files if f["path"] == path), None)
        if file is None:
            raise PveError(f"invalid path - {path}")
        if not 0 <= index < len(file["repositories"]):
            raise PveError(f"invalid index - {index}")
        if enabled is not None:
            file["repositories"][index]["Enabled"] = bool(enabled)

    await _edit(rt, node, digest, change)


async def add_repository(rt, node: str, handle: str, digest) -> None:
    standard = {s[0]: s for s in _standard(rt.adapter)}
    if handle not in standard:
        expected = ", ".join(f"`{h}`" for h in standard)
        raise PveError(f"unknown variant `{handle}`, expected one of {expected}")
    _, _, uri, component, path = standard[handle]
    suite, deb822 = rt.adapter.debian_suite, _deb822(rt.adapter)

    def change(files: list[dict]):
        # An already configured repository is only switched on.
        for file in files:
            for entry in file["repositories"]:
                if _references(entry, uri, component, suite):
                    if entry["Enabled"]:
                        return False
                    entry["Enabled"] = True
                    return None
        entry = _repository([uri], [suite], [component], deb822=deb822)
        file = next((f for f in files if f["path"] == path), None)
        if file is None:
            file = {"path": path, "file-type": "sources" if deb822 else "list", "repositories": []}
            files.append(file)
        entry["FileType"] = file["file-type"]
        file["repositories"].append(entry)

    await _edit(rt, node, digest, change)
