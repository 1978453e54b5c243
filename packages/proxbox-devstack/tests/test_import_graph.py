"""No import circles inside the devstack, counting imports inside functions too
(components lists the demo's components; the demo builds on the shared context)."""

from __future__ import annotations

from pathlib import Path

import proxbox_devstack
from proxbox_devstack.import_graph import circles, module_graph

PACKAGE = Path(proxbox_devstack.__file__).resolve().parent


def test_devstack_has_no_import_circles():
    graph = module_graph(PACKAGE)
    assert "proxbox_devstack.demo" in graph["proxbox_devstack.components"]
    assert "proxbox_devstack.context" in graph["proxbox_devstack.demo"]
    assert circles(graph) == []
