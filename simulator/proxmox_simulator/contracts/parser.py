"""Turn official source artifacts into the normalized model — without executing JS.

The API viewer's ``apidoc.js`` starts with ``const apiSchema = [...]`` (6.x used
``var pveapi = [...]``) followed by viewer code.  We locate the assignment,
then let ``json.JSONDecoder.raw_decode`` find where the array ends: it tracks
strings and nesting exactly, so brackets inside descriptions cannot fool it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from proxmox_simulator.contracts.model import Contract, Endpoint

_ASSIGNMENT = re.compile(r"\b(?:const|var|let)\s+(?:apiSchema|pveapi)\s*=\s*")
HTTP_METHODS = ("GET", "POST", "PUT", "DELETE")


class ContractParseError(ValueError):
    pass


@dataclass
class ParseResult:
    contract: Contract
    warnings: list[str] = field(default_factory=list)


def extract_schema_array(text: str) -> list:
    match = _ASSIGNMENT.search(text)
    if match is None:
        raise ContractParseError("no 'const apiSchema =' or 'var pveapi =' assignment found")
    start = text.find("[", match.end())
    if start < 0 or text[match.end() : start].strip():
        raise ContractParseError("the schema assignment is not followed by a JSON array")
    try:
        value, _end = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise ContractParseError(f"schema array is not valid JSON: {exc}") from exc
    if not isinstance(value, list):
        raise ContractParseError("schema assignment is not an array")
    return value


def parse_viewer_tree(tree: list, version: str) -> ParseResult:
    """Flatten the viewer's nested ``{path, info, children}`` tree."""
    endpoints: list[Endpoint] = []
    warnings: list[str] = []
    seen: set[tuple[str, str]] = set()

    def walk(nodes: list) -> None:
        for node in nodes:
            path = node.get("path")
            for method, info in sorted((node.get("info") or {}).items()):
                if method not in HTTP_METHODS:
                    warnings.append(f"{path}: unknown method {method!r} skipped")
                    continue
                if (path, method) in seen:
                    warnings.append(f"{path} {method}: duplicate declaration, first kept")
                    continue
                seen.add((path, method))
                endpoints.append(Endpoint.from_source(path, method, info))
            walk(node.get("children") or [])

    walk(tree)
    return ParseResult(Contract(version=version, endpoints=tuple(endpoints)), warnings)


def parse_path_map(paths: dict, version: str) -> ParseResult:
    """fakepve's data file: ``{"paths": {path: {METHOD: info}}}``."""
    endpoints = []
    warnings = []
    for path in sorted(paths):
        for method, info in sorted(paths[path].items()):
            if method not in HTTP_METHODS:
                warnings.append(f"{path}: unknown method {method!r} skipped")
                continue
            endpoints.append(Endpoint.from_source(path, method, info))
    return ParseResult(Contract(version=version, endpoints=tuple(endpoints)), warnings)


def parse_apidoc_js(text: str, version: str) -> ParseResult:
    return parse_viewer_tree(extract_schema_array(text), version)


def parse_json_document(document, version: str) -> ParseResult:
    if isinstance(document, list):
        return parse_viewer_tree(document, version)
    if isinstance(document, dict) and isinstance(document.get("paths"), dict):
        return parse_path_map(document["paths"], version)
    if isinstance(document, dict) and document.get("format", "").startswith(
        "proxmox-simulator/contract"
    ):
        return ParseResult(Contract.from_dict(document))
    raise ContractParseError("unrecognised JSON schema document")
