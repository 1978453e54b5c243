"""The sync pipeline: cluster → nodes → node interfaces → node addresses → guests, then at
once (they need the VMs, not one another): vlans → interfaces → ips; disks; records
(storages, backups, jobs, snapshots, replication, HA).

Each stage module has a pure `plan(...)` (desired state from Proxmox + current state
from NetBox → a Plan) and an `apply(...)` that executes the plan with bulk writes.
"""

STAGES = (
    "cluster",
    "nodes",
    "node interfaces",
    "node addresses",
    "guests",
    "vlans",
    "interfaces",
    "ips",
    "disks",
    "records",
)
