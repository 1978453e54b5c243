"""Latency of the sync-cluster claim beside a plain NetBox REST GET, measured in one run.

Starts a thread-served NetBox against a private database cloned from the
migrated template (name prefixed nbpx_bench_), creates its own users, token and
endpoints, and prints p50/p95 in milliseconds for:

- new claims (each creates a native cluster, tracking row and sidecar: HTTP 201)
- repeat claims (same request again: HTTP 200, nothing changes)
- a plain GET of one NetBox cluster (/api/virtualization/clusters/{id}/)

each sequentially and with 8 concurrent clients on distinct endpoints.

    uv run python benchmarks/claim.py [--per-client 15]

Needs PROXBOX_DATABASE_URL and PROXBOX_REDIS_URL like the test suites. Prints
figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

CLIENTS = 8


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def report(label: str, samples: list[float]) -> None:
    ms = [s * 1000 for s in samples]
    print(
        f"{label:<44} n={len(ms):>4}  p50={percentile(ms, 0.50):7.1f} ms  "
        f"p95={percentile(ms, 0.95):7.1f} ms  mean={statistics.fmean(ms):7.1f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-client", type=int, default=15, help="requests per client and phase")
    args = parser.parse_args()

    from proxbox_devstack.testdb import netbox_scratch_database

    with netbox_scratch_database(
        "nbpx_bench_", log=lambda message: print(message, file=sys.stderr)
    ):
        run(args.per_client)
    return 0


def run(per_client: int) -> None:
    import httpx
    from virtualization.models import Cluster, ClusterType

    from netbox_proxbox.models import ProxmoxEndpoint
    from netbox_proxbox.tests.base import CLAIM_UPDATE_PERMS, bearer, make_user
    from netbox_proxbox.tests.live import serve_netbox

    tag = uuid.uuid4().hex[:6]
    cluster_type = ClusterType.objects.create(name=f"Bench {tag}", slug=f"bench-{tag}")
    _, token = make_user(f"bench-{tag}", CLAIM_UPDATE_PERMS)
    headers = {"Authorization": bearer(token)}
    sample_cluster = Cluster.objects.create(name=f"get-target-{tag}", type=cluster_type)

    def endpoints(prefix: str, count: int) -> list[int]:
        made = []
        for i in range(count):
            endpoint = ProxmoxEndpoint(
                name=f"{prefix}-{i}-{tag}", host="pve.example", token_id="proxbox@pve!bench"
            )
            endpoint.save()
            made.append(endpoint.pk)
        return made

    sequential = endpoints("seq", per_client * 2)
    concurrent = [endpoints(f"c{n}", per_client) for n in range(CLIENTS)]

    with serve_netbox() as base:

        def claim(client: httpx.Client, pk: int, expected: int) -> float:
            body = {
                "name": f"cluster-{pk}-{tag}",
                "mode": "cluster",
                "cluster_type": cluster_type.pk,
            }
            started = time.perf_counter()
            response = client.post(
                f"{base}/api/plugins/proxbox/endpoints/proxmox/{pk}/sync-cluster/",
                json=body,
                headers=headers,
            )
            elapsed = time.perf_counter() - started
            if response.status_code != expected:
                raise RuntimeError(f"claim {pk}: HTTP {response.status_code} {response.text[:300]}")
            return elapsed

        def get(client: httpx.Client, _pk: int, expected: int = 200) -> float:
            started = time.perf_counter()
            response = client.get(
                f"{base}/api/virtualization/clusters/{sample_cluster.pk}/", headers=headers
            )
            elapsed = time.perf_counter() - started
            if response.status_code != expected:
                raise RuntimeError(f"GET: HTTP {response.status_code}")
            return elapsed

        def sequential_phase(operation, pks, expected):
            with httpx.Client(timeout=120) as client:
                operation(client, pks[0], expected)  # warm the connection and caches
                return [operation(client, pk, expected) for pk in pks[1:]]

        def concurrent_phase(operation, groups, expected):
            def worker(pks):
                with httpx.Client(timeout=120) as client:
                    return [operation(client, pk, expected) for pk in pks]

            with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
                return [s for samples in pool.map(worker, groups) for s in samples]

        with httpx.Client(timeout=120) as warm:
            get(warm, 0)
        print(f"sync-cluster claim latency ({CLIENTS} concurrent clients on distinct endpoints)")
        report("NetBox GET cluster, sequential", sequential_phase(get, sequential, 200))
        report("claim new (201), sequential", sequential_phase(claim, sequential, 201))
        report("claim repeat (200), sequential", sequential_phase(claim, sequential, 200))
        report(f"NetBox GET cluster, {CLIENTS} concurrent", concurrent_phase(get, concurrent, 200))
        report(f"claim new (201), {CLIENTS} concurrent", concurrent_phase(claim, concurrent, 201))
        report(
            f"claim repeat (200), {CLIENTS} concurrent", concurrent_phase(claim, concurrent, 200)
        )


if __name__ == "__main__":
    raise SystemExit(main())
