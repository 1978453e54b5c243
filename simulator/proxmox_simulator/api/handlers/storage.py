"""storage.cfg (/storage) and per-node storage: status, allocation, uploads, downloads."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import file_restore, guest_import, oci_registry
from proxmox_simulator.domain import rrd_service as rrd
from proxmox_simulator.domain import storage_scan as scan
from proxmox_simulator.domain import storage_service as svc
from proxmox_simulator.domain import storage_transfer as transfer


def _declared(ctx: RequestContext) -> set[str]:
    return {p.name for p in ctx.endpoint.parameters}


@route("/storage", "POST")
async def create_storage(ctx: RequestContext):
    return await svc.create_storage(ctx.rt, ctx.params, _declared(ctx))


@route("/storage/{storage}", "GET")
async def get_storage(ctx: RequestContext):
    return await svc.get_storage(ctx.rt, ctx.state, ctx.principal, ctx.params["storage"])


@route("/storage/{storage}", "PUT")
async def update_storage(ctx: RequestContext):
    return await svc.update_storage(ctx.rt, ctx.params["storage"], ctx.params, _declared(ctx))


@route("/storage/{storage}", "DELETE")
async def delete_storage(ctx: RequestContext):
    await svc.delete_storage(ctx.rt, ctx.params["storage"])


@route("/nodes/{node}/storage/{storage}/status", "GET")
async def storage_status(ctx: RequestContext):
    return await svc.status(ctx.rt, ctx.node, ctx.params["storage"])


@route("/nodes/{node}/storage/{storage}/identity", "GET")
async def storage_identity(ctx: RequestContext):
    return await svc.identity(ctx.rt, ctx.node, ctx.params["storage"])


@route("/nodes/{node}/storage/{storage}/rrddata", "GET")
async def storage_rrddata(ctx: RequestContext):
    return await rrd.storage_rrddata(
        ctx.rt, ctx.node, ctx.params["storage"], ctx.params["timeframe"], ctx.params.get("cf")
    )


@route("/nodes/{node}/storage/{storage}/rrd", "GET")
async def storage_rrd(ctx: RequestContext):
    return await rrd.storage_rrd(
        ctx.rt, ctx.node, ctx.params["storage"], ctx.params["ds"], ctx.params["timeframe"]
    )


@route("/nodes/{node}/storage/{storage}/content", "POST")
async def allocate(ctx: RequestContext):
    return await svc.allocate(ctx.rt, ctx.node, ctx.params["storage"], ctx.params)


@route("/nodes/{node}/storage/{storage}/download-url", "POST")
async def download_url(ctx: RequestContext):
    return await transfer.download_url(
        ctx.rt, ctx.principal, ctx.node, ctx.params["storage"], ctx.params
    )


@route("/nodes/{node}/storage/{storage}/upload", "POST")
async def upload(ctx: RequestContext):
    return await transfer.upload(
        ctx.rt, ctx.principal, ctx.node, ctx.params["storage"], ctx.params, ctx.uploads or {}
    )


@route("/nodes/{node}/aplinfo", "GET")
async def appliance_index(ctx: RequestContext):
    return await transfer.appliance_index(ctx.rt, ctx.node)


@route("/nodes/{node}/aplinfo", "POST")
async def appliance_download(ctx: RequestContext):
    return await transfer.appliance_download(ctx.rt, ctx.node, ctx.params["template"])


# -- scans of remote storage servers ------------------------------------------------


@route("/nodes/{node}/scan/nfs", "GET")
async def scan_nfs(ctx: RequestContext):
    return await scan.scan_nfs(ctx.rt, ctx.node, ctx.params["server"])


@route("/nodes/{node}/scan/cifs", "GET")
async def scan_cifs(ctx: RequestContext):
    p = ctx.params
    return await scan.scan_cifs(
        ctx.rt, ctx.node, p["server"], p.get("username"), p.get("password"), p.get("domain")
    )


@route("/nodes/{node}/scan/glusterfs", "GET")
async def scan_glusterfs(ctx: RequestContext):
    return await scan.scan_glusterfs(ctx.rt, ctx.node, ctx.params["server"])


@route("/nodes/{node}/scan/iscsi", "GET")
async def scan_iscsi(ctx: RequestContext):
    return await scan.scan_iscsi(ctx.rt, ctx.node, ctx.params["portal"])


@route("/nodes/{node}/scan/pbs", "GET")
async def scan_pbs(ctx: RequestContext):
    return await scan.scan_pbs(ctx.rt, ctx.node, ctx.params)


@route("/nodes/{node}/storage/{storage}/file-restore/list", "GET")
async def file_restore_list(ctx: RequestContext):
    return await file_restore.list_files(ctx.rt, ctx.state, ctx.principal, ctx.node, ctx.params)


@route("/nodes/{node}/storage/{storage}/file-restore/download", "GET")
async def file_restore_download(ctx: RequestContext):
    return await file_restore.download(ctx.rt, ctx.state, ctx.principal, ctx.node, ctx.params)


@route("/nodes/{node}/storage/{storage}/import-metadata", "GET")
async def import_metadata(ctx: RequestContext):
    return await guest_import.import_metadata(
        ctx.rt, ctx.state, ctx.principal, ctx.node, ctx.params["storage"], ctx.params["volume"]
    )


@route("/nodes/{node}/storage/{storage}/oci-registry-pull", "POST")
async def oci_registry_pull(ctx: RequestContext):
    return await oci_registry.pull(
        ctx.rt, ctx.principal, ctx.node, ctx.params["storage"], ctx.params
    )


@route("/nodes/{node}/query-oci-repo-tags", "GET")
async def query_oci_repo_tags(ctx: RequestContext):
    return await oci_registry.repo_tags(ctx.rt, ctx.node, ctx.params["reference"])
