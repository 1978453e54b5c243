"""No import circles inside the plugin, counting imports inside functions too.

A function-local import hides a circle from Python's import machinery but not from
whoever has to reason about the module order; this check reads every import statement.
"""

from __future__ import annotations

from pathlib import Path

from django.test import SimpleTestCase

from proxbox_devstack.import_graph import circles, module_graph

PACKAGE = Path(__file__).resolve().parents[1]


class ImportGraphTest(SimpleTestCase):
    def test_checker_sees_a_circle_through_a_function_local_import(self):
        graph = {"p.a": {"p.b"}, "p.b": {"p.a"}, "p.c": {"p.a"}}
        self.assertEqual(circles(graph), [["p.a", "p.b"]])

    def test_plugin_has_no_import_circles(self):
        graph = module_graph(PACKAGE)
        self.assertIn("netbox_proxbox.ownership.locks", graph)
        self.assertIn("netbox_proxbox.ownership.locks", graph["netbox_proxbox.models.clusters"])
        self.assertEqual(circles(graph), [])
