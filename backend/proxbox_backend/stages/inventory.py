"""Stage `inventory`: the Proxmox inventory as this run syncs it.

Its read was started before the claim; here the run's policy applies to it (a node
target learns its guests, excluded guests and templates are left out), and an
incremental run compares its inputs with the baseline's.
"""

from __future__ import annotations

import dataclasses

from proxbox_backend.domain.guest_names import distinct_names
from proxbox_backend.pipeline import Gate, Stage
from proxbox_backend.stages import guests as guests_stage
from proxbox_backend.stages.context import StageRun


async def take_inventory(run: StageRun, gate: Gate) -> dict:
    # `incremental` imports the stages: imported here, once they are.
    from proxbox_backend.incremental import context_digest, node_digest

    inventory = await run.proxmox_read
    run.report.warnings.extend(inventory.warnings)
    run.report.read_failures.extend(inventory.read_failures)
    policy = run.policy
    if policy.target is not None and policy.target.node is not None:
        policy = dataclasses.replace(policy, target=policy.target.with_inventory(inventory.guests))
        run.policy = policy
    templates = run.settings.templates
    if policy.sync_templates is not None:
        templates = (
            guests_stage.SYNC_TEMPLATES if policy.sync_templates else guests_stage.SKIP_TEMPLATES
        )
    # Excluded guests are left as they are in NetBox: like unreadable ones, never "gone".
    excluded = {(g.kind, g.vmid) for g in inventory.guests if policy.excludes(g)}
    run.inventory = inventory
    run.unreadable = inventory.unreadable | excluded
    # Names are made distinct among every guest that has or may have a VM (excluded ones
    # keep theirs), so a guest is named alike in full, incremental and targeted runs.
    syncable = guests_stage.syncable(inventory.guests, templates)
    renamed = distinct_names(syncable)
    run.guests = [
        dataclasses.replace(g, name=renamed[(g.kind, g.vmid)]) if (g.kind, g.vmid) in renamed else g
        for g in syncable
        if (g.kind, g.vmid) not in excluded
    ]
    incremental = run.incremental
    if incremental is not None:
        disappeared = guests_stage.disappeared_context(policy, run.settings)
        incremental.check(
            context_digest(
                run.endpoint, run.cluster_id, disappeared, templates, inventory.tag_colors
            ),
            run.cluster_id,
        )
        run.known_snapshots = incremental.snapshots_known(inventory.config_digests)
        run.nodes_digest = node_digest(run.nodes, inventory.node_networks, inventory.node_facts)
        run.known_devices = incremental.unchanged_devices(run.nodes_digest)
    return {"inventory": inventory}


STAGE = Stage("inventory", take_inventory, gives=("inventory",))
