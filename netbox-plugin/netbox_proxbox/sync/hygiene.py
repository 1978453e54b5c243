"""IPAM hygiene findings (the backend's `domain.hygiene`) as the preview page and a sync
Job's page list them: errors first, each with its severity's colour and its rule's name."""

from __future__ import annotations

import logging

from django.utils.translation import gettext_lazy as _

SEVERITIES = {"error": "red", "warning": "orange", "info": "blue"}
RULES = {
    "duplicate_address": _("Duplicate address"),
    "mac_collision": _("MAC collision"),
    "outside_prefix": _("Outside any prefix"),
    "vlan_clash": _("VLAN clash"),
}


def hygiene_context(report: dict | None) -> dict:
    """`checked`: the report carries the checks (a backend without them leaves it out);
    `findings`: one row each; `counts`: (severity, number) of the severities found."""
    findings = (report or {}).get("hygiene")
    if not isinstance(findings, list):
        return {"checked": False, "findings": [], "counts": []}
    order = list(SEVERITIES)
    rows = sorted(
        (
            {
                **finding,
                "color": SEVERITIES.get(finding.get("severity"), "gray"),
                "rule_title": RULES.get(finding.get("rule"), finding.get("rule")),
            }
            for finding in findings
            if isinstance(finding, dict)
        ),
        key=lambda row: order.index(row["severity"]) if row.get("severity") in order else 9,
    )
    counts = [(s, n) for s in order if (n := sum(r.get("severity") == s for r in rows))]
    return {"checked": True, "findings": rows, "counts": counts}


LOG_LEVELS = {"error": logging.ERROR, "warning": logging.WARNING, "info": logging.INFO}


def hygiene_log(report: dict, most: int) -> list[tuple[int, str]]:
    """The Job's log lines of the findings (at most `most`; its data keeps them all)."""
    findings = [f for f in report.get("hygiene") or [] if isinstance(f, dict)]
    lines = [
        (
            LOG_LEVELS.get(f.get("severity"), logging.WARNING),
            f"IPAM {f.get('rule')} {f.get('guest')}: {f.get('detail')}"
            + (f" ({f['where']})" if f.get("where") else ""),
        )
        for f in hygiene_context({"hygiene": findings})["findings"][:most]
    ]
    if len(findings) > most:
        lines.append((logging.WARNING, f"IPAM: {len(findings) - most} more findings"))
    return lines
