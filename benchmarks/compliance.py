"""Data-protection compliance over 10,000 VMs, beside the plain VM list, in one run.

Clones the migrated template into a private database (name prefixed nbpx_bench_),
bulk-creates two endpoints' clusters with 10,000 VMs, backup jobs (all but excluded
VMIDs, a VMID list, a pool, a node restriction), two backups per VM, snapshots,
replication jobs and HA resources, and prints the median of several rounds, in
milliseconds, for:

- the plain VM list's first page and count (the baseline)
- the compliance list's first page and count (what the list view and REST run)
- the out-of-policy counts in all, per rule and per endpoint (the dashboard widget)
- every VM's compliance evaluated (all 10,000 rows; as the exports run it, JIT off)
- the REST list's first page (GET /api/plugins/proxbox/compliance/)

and each figure's ratio to the baseline.

    uv run python benchmarks/compliance.py [--vms 10000] [--rounds 5]

Needs PROXBOX_DATABASE_URL and PROXBOX_REDIS_URL like the test suites. Prints
figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--explain", action="store_true", help="print the query plans too")
    args = parser.parse_args()

    from proxbox_devstack.testdb import netbox_scratch_database

    with netbox_scratch_database(
        "nbpx_bench_", log=lambda message: print(message, file=sys.stderr)
    ):
        run(args.vms, args.rounds, args.explain)
    return 0


def seed(count: int):
    from dcim.models import Device, DeviceRole, DeviceType, Manufacturer, Site
    from django.utils import timezone
    from virtualization.models import Cluster, ClusterType, VirtualMachine

    from netbox_proxbox.models import (
        ProxmoxBackup,
        ProxmoxBackupJob,
        ProxmoxEndpoint,
        ProxmoxHAResource,
        ProxmoxReplicationJob,
        ProxmoxSnapshot,
        ProxmoxStorage,
    )

    now = timezone.now()
    kind = ClusterType.objects.create(name="Proxmox", slug="proxmox")
    site = Site.objects.create(name="bench", slug="bench")
    maker = Manufacturer.objects.create(name="Proxmox", slug="proxmox")
    device_type = DeviceType.objects.create(manufacturer=maker, model="node", slug="node")
    role = DeviceRole.objects.create(name="node", slug="node")
    clusters = []
    for e in range(2):
        cluster = Cluster.objects.create(name=f"pve-{e}", type=kind)
        endpoint = ProxmoxEndpoint(name=f"pve-{e}", host="pve.example", token_id="a@pve!b")
        endpoint.save()
        ProxmoxEndpoint.objects.filter(pk=endpoint.pk).update(netbox_cluster=cluster)
        nodes = [
            Device.objects.create(
                name=f"pve{e}-{n}", site=site, device_type=device_type, role=role, cluster=cluster
            )
            for n in range(3)
        ]
        storage = ProxmoxStorage.objects.create(
            cluster=cluster, name="pbs", storage_type="pbs", content="backup"
        )
        clusters.append((cluster, nodes, storage))
    per_cluster = count // 2
    vms, backups, snapshots, replication, ha = [], [], [], [], []
    for c, (cluster, nodes, _storage) in enumerate(clusters):
        for i in range(per_cluster):
            vmid = 100 + i
            vms.append(
                VirtualMachine(
                    name=f"vm-{c}-{i:05d}",
                    cluster=cluster,
                    device=nodes[i % 3],
                    status="active",
                    custom_field_data={"proxbox_source": f"cluster-{cluster.pk}/qemu/{vmid}#x"},
                )
            )
    VirtualMachine.objects.bulk_create(vms, batch_size=2000)
    vms = list(VirtualMachine.objects.select_related("cluster").order_by("pk"))
    storages = {cluster.pk: storage for cluster, _nodes, storage in clusters}
    for n, vm in enumerate(vms):
        vmid = int(vm.custom_field_data["proxbox_source"].split("/")[2].split("#")[0])
        for age in (n % 40, 24 + n % 40):
            backups.append(
                ProxmoxBackup(
                    cluster=vm.cluster,
                    storage=storages[vm.cluster_id],
                    volume=f"pbs:backup/vm/{vmid}/{age}",
                    vmid=vmid,
                    virtual_machine=vm,
                    backup_time=now - dt.timedelta(hours=age),
                    verification=("ok", "none", "failed")[n % 3],
                )
            )
        if n % 4 == 0:
            snapshots.append(
                ProxmoxSnapshot(
                    cluster=vm.cluster,
                    virtual_machine=vm,
                    name="before-upgrade",
                    snapshot_time=now - dt.timedelta(days=n % 60),
                )
            )
        if n % 10 == 0:
            replication.append(
                ProxmoxReplicationJob(
                    cluster=vm.cluster,
                    job_id=f"{vmid}-0",
                    vmid=vmid,
                    virtual_machine=vm,
                    target="other",
                    state="error" if n % 20 == 0 else "ok",
                    fail_count=1 if n % 20 == 0 else 0,
                )
            )
            ha.append(
                ProxmoxHAResource(
                    cluster=vm.cluster, sid=f"vm:{vmid}", vmid=vmid, virtual_machine=vm
                )
            )
    ProxmoxBackup.objects.bulk_create(backups, batch_size=5000)
    ProxmoxSnapshot.objects.bulk_create(snapshots, batch_size=5000)
    ProxmoxReplicationJob.objects.bulk_create(replication, batch_size=5000)
    ProxmoxHAResource.objects.bulk_create(ha, batch_size=5000)
    for cluster, nodes, _storage in clusters:
        ProxmoxBackupJob.objects.create(
            cluster=cluster, job_id="all", select_all=True, exclude=list(range(100, 400, 7))
        )
        ProxmoxBackupJob.objects.create(cluster=cluster, job_id="list", vmids=[101, 108, 115])
        ProxmoxBackupJob.objects.create(
            cluster=cluster, job_id="pool", pool="prod", pool_vmids=list(range(200, 300))
        )
        ProxmoxBackupJob.objects.create(
            cluster=cluster, job_id="node", select_all=True, node=nodes[0].name
        )
    with django_connection().cursor() as cursor:
        cursor.execute("ANALYZE")
    return len(vms), len(backups)


def django_connection():
    from django.db import connection

    return connection


def median_ms(operation, rounds: int) -> float:
    operation()  # warm
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        operation()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def run(count: int, rounds: int, explain: bool = False) -> None:
    from django.test import Client
    from users.models import User
    from virtualization.models import VirtualMachine

    from netbox_proxbox.compliance import (
        compliance_counts,
        endpoint_counts,
        with_compliance,
        without_jit,
    )

    started = time.perf_counter()
    vms, backups = seed(count)
    print(f"seeded {vms} VMs, {backups} backups in {time.perf_counter() - started:.1f} s")
    base = VirtualMachine.objects.filter(cluster__proxmox_endpoint__isnull=False)

    def plain_page():
        list(base.order_by("name", "pk")[:50])
        base.count()

    def compliance_page():
        queryset = with_compliance(VirtualMachine.objects.all()).order_by("name", "pk")
        list(queryset[:50])
        queryset.count()

    def counts():
        compliance_counts(VirtualMachine.objects.all())
        endpoint_counts(VirtualMachine.objects.all())

    def every_vm():  # as the list's CSV and YAML exports run it
        with without_jit():
            rows = list(
                with_compliance(VirtualMachine.objects.all()).values_list("pk", "compliant")
            )
        assert len(rows) == vms

    user = User.objects.create_superuser("bench", "bench@example.net", "x")
    client = Client()
    client.force_login(user)

    def rest_page():
        answer = client.get("/api/plugins/proxbox/compliance/", {"limit": 50})
        assert answer.status_code == 200, answer.status_code

    if explain:
        every = with_compliance(VirtualMachine.objects.all()).values_list("pk", "compliant")
        print(every.explain(analyze=True))
    baseline = median_ms(plain_page, rounds)
    print(f"compliance over {vms} VMs, median of {rounds} rounds (ms; ratio to the baseline)")
    print(f"  plain VM list, first page + count (baseline): {baseline:8.1f}")
    for label, operation in (
        ("compliance list, first page + count", compliance_page),
        ("out-of-policy counts, per rule and endpoint", counts),
        ("every VM's compliance (all rows)", every_vm),
        ("REST list, first page (limit 50)", rest_page),
    ):
        figure = median_ms(operation, rounds)
        print(f"  {label + ':':<46} {figure:8.1f}  ({figure / baseline:.1f}x)")
    totals = compliance_counts(VirtualMachine.objects.all())
    print(f"  out of policy: {totals['out_of_policy']} of {totals['total']}; {totals}")


if __name__ == "__main__":
    raise SystemExit(main())
