"""The sync pipeline: each stage module declares its stage (`pipeline.Stage`: what it
takes and gives, reads and writes, and what NetBox's signals write when it does), and
`GRAPH` registers them in planned order; `pipeline.Scheduler` decides what overlaps.

Each stage module has a pure `plan(...)` (desired state from Proxmox + current state
from NetBox → a Plan) and an `apply(...)` that executes the plan with bulk writes.
The claim (`cluster`) precedes the graph: nothing is written before it.
"""

from proxbox_backend.stages import (
    disks,
    guests,
    interfaces,
    inventory,
    ips,
    node_addresses,
    node_interfaces,
    nodes,
    prefixes,
    records,
    sdn,
    vlans,
)

GRAPH = (
    inventory.STAGE,
    nodes.STAGE,
    node_interfaces.STAGE,
    node_addresses.STAGE,
    guests.SELECTION,
    guests.LABELS,
    guests.STAGE,
    disks.STAGE,
    vlans.STAGE,
    sdn.STAGE,
    interfaces.STAGE,
    sdn.LINKS,
    ips.STAGE,
    prefixes.STAGE,
    records.STAGE,
)

# The stages a run reports progress of, in the order they start.
STAGES = ("cluster", *(stage.events for stage in GRAPH if stage.events is not None))
