"""No import circles inside the plugin, counting imports inside functions too (a
function-local import hides a circle from Python, not from a reader)."""

from __future__ import annotations

from pathlib import Path

from django.test import SimpleTestCase

from proxbox_devstack.import_graph import circles, module_graph

PACKAGE = Path(__file__).resolve().parents[1]


class ImportGraphTest(SimpleTestCase):
    def test_plugin_has_no_import_circles(self):
        graph = module_graph(PACKAGE)
        self.assertIn("netbox_script_projects.storage.locks", graph["netbox_script_projects.jobs"])
        self.assertEqual(circles(graph), [])
