"""The e2e modules share one NetBox per test process, which keeps IP addresses unique:
two modules renumbering their simulators into one network make whichever syncs second
fail on duplicate addresses, depending on how xdist spreads the modules. Each network
literal given to `Simulator.renumber` belongs to one module."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).parent
RENUMBER = re.compile(r"""\.renumber\(\s*f?["'](\d+\.\d+\.\d+)["']""")


def test_each_simulator_network_belongs_to_one_module():
    users: dict[str, set[str]] = defaultdict(set)
    for module in sorted(HERE.glob("*.py")):
        for network in RENUMBER.findall(module.read_text()):
            users[network].add(module.name)
    assert len(users) > 10  # the scan sees the fixtures it guards
    shared = {network: sorted(names) for network, names in users.items() if len(names) > 1}
    assert shared == {}
