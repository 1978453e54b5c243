"""A node's host hardware: PCI and USB devices, mediated device types, CPU models.

Majors 6 and 7 name some of these on older paths; both read the same devices
(``domain/node_hardware.py``).
"""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import node_hardware as svc


@route("/nodes/{node}/hardware/pci", "GET")
async def pci(ctx: RequestContext):
    return await svc.pci_devices(
        ctx.rt, ctx.node, ctx.params.get("pci-class-blacklist"), ctx.params.get("verbose")
    )


@route("/nodes/{node}/hardware/pci/{pciid}/mdev", "GET")  # 6.x, 7.x
async def mdev_by_id(ctx: RequestContext):
    return await svc.mdev_types(ctx.rt, ctx.node, ctx.params["pciid"])


@route("/nodes/{node}/hardware/pci/{pci-id-or-mapping}/mdev", "GET")
async def mdev(ctx: RequestContext):
    return await svc.mdev_types(ctx.rt, ctx.node, ctx.params["pci-id-or-mapping"], mapping=True)


@route("/nodes/{node}/hardware/usb", "GET")
@route("/nodes/{node}/scan/usb", "GET")  # 6.x
async def usb(ctx: RequestContext):
    return await svc.usb_devices(ctx.rt, ctx.node)


@route("/nodes/{node}/capabilities/qemu/cpu", "GET")
@route("/nodes/{node}/cpu", "GET")  # 6.x
async def cpu_models(ctx: RequestContext):
    return await svc.cpu_models(ctx.rt, ctx.state, ctx.principal, ctx.node)
