"""Runtime contract hot-swap, the OpenAPI document, the laboratory switch and /metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time

import asyncpg
import httpx
import pytest
from openapi_spec_validator import validate as validate_openapi
from simtest_support import (
    OFFICIAL_VERSIONS,
    Session,
    assert_conforms,
    metric_value,
    official_apidoc,
    run,
)

from proxbox_devstack.browser import launch, requires_chromium
from proxmox_simulator.cli import main
from proxmox_simulator.contracts import sources
from proxmox_simulator.contracts.registry import ContractRegistry
from proxmox_simulator.server import SimulatorServer

NINE, EIGHT = "9.2.12", "8.4.5"


@pytest.fixture(scope="module")
def lab_settings(settings, seeded, tmp_path_factory):
    """The session database, a data dir holding the 8.4.5 snapshot, the laboratory on."""
    data_dir = tmp_path_factory.mktemp("lab")
    artifact = sources.read_file(official_apidoc(EIGHT))
    ContractRegistry(data_dir).store(artifact, sources.parse_artifact(artifact, EIGHT))
    return dataclasses.replace(settings, data_dir=data_dir, lab_enabled=True)


@pytest.fixture(scope="module")
def lab(lab_settings):
    with SimulatorServer(lab_settings, tls=True) as server:
        yield server


def _client(server) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, verify=False, timeout=30)


def _apply(client, **data):
    return client.post("/ui/api/contract/apply", data=data)


def test_laboratory_surfaces_are_off_unless_enabled(server):
    with _client(server) as c:
        assert c.get("/ui/contract").status_code == 404
        assert _apply(c, major=8).status_code == 404
        assert c.get("/ui/api/contract").status_code == 404
        assert c.get("/admin/compatibility").status_code == 404
        assert c.get("/admin/compatibility.json").status_code == 404
        # The process's own descriptions are not laboratory surfaces.
        assert c.get("/openapi.json").status_code == 200
        assert c.get("/metrics").status_code == 200


async def _lock_nodes(database_url: str):
    """Hold the nodes table so a request reading it waits inside its handler."""
    conn = await asyncpg.connect(database_url)
    tx = conn.transaction()
    await tx.start()
    await conn.execute("LOCK TABLE nodes IN ACCESS EXCLUSIVE MODE")
    return conn, tx


async def _waiting_on_locks(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
    finally:
        await conn.close()


def test_hot_swap_under_concurrent_requests(lab, lab_settings):
    """Requests keep being answered through swaps; one in flight finishes on the old table."""
    with (
        _client(lab) as admin,
        httpx.Client(base_url=lab.base_url + "/api2/json", verify=False, timeout=30) as client,
    ):
        api = Session(client)
        assert api.get("/version").json()["data"]["version"] == NINE
        node = api.get("/nodes").json()["data"][0]["node"]

        stop = threading.Event()
        answers: list[tuple[int, str | None]] = []

        def hammer():
            with httpx.Client(
                base_url=lab.base_url + "/api2/json",
                verify=False,
                timeout=30,
                cookies={"PVEAuthCookie": api.ticket},
            ) as c:
                while not stop.is_set():
                    r = c.get("/version")
                    version = r.json()["data"]["version"] if r.status_code == 200 else None
                    answers.append((r.status_code, version))

        loop = asyncio.new_event_loop()
        lock_conn, tx = loop.run_until_complete(_lock_nodes(lab_settings.database_url))
        in_flight: dict = {}

        def slow_request():
            in_flight["response"] = api.get(f"/nodes/{node}/version")

        slow = threading.Thread(target=slow_request)
        workers = [threading.Thread(target=hammer) for _ in range(3)]
        try:
            slow.start()
            deadline = time.monotonic() + 10
            while run(_waiting_on_locks(lab_settings.database_url)) < 1:
                assert time.monotonic() < deadline, "the request never reached the database"
                time.sleep(0.02)
            for w in workers:
                w.start()
            time.sleep(0.2)
            swapped = _apply(admin, major=8)
            assert swapped.status_code == 200, swapped.text
            assert swapped.json()["data"]["version"] == EIGHT
            assert api.get("/version").json()["data"]["version"] == EIGHT
        finally:
            loop.run_until_complete(tx.rollback())
            loop.run_until_complete(lock_conn.close())
            loop.close()
        slow.join(timeout=30)
        # Started on 9.2.12, finished after the swap: answered from the table it began with.
        assert in_flight["response"].status_code == 200
        assert in_flight["response"].json()["data"]["version"] == NINE
        for major in (9, 8, 9, 8):
            assert _apply(admin, major=major).status_code == 200
            time.sleep(0.1)
        stop.set()
        for w in workers:
            w.join(timeout=30)
        assert answers and {status for status, _ in answers} == {200}
        assert {version for _, version in answers} == {NINE, EIGHT}

        # The swap refreshed the OpenAPI document and the compatibility state too.
        document = admin.get("/openapi.json").json()
        assert document["info"]["version"] == EIGHT
        validate_openapi(document)
        assert "/api2/json/nodes/{node}/qemu" in document["paths"]
        report = admin.get("/admin/compatibility.json").json()
        assert (report["version"], report["declared"]["methods"]) == (EIGHT, 605)
        state = admin.get("/ui/api/contract").json()["data"]
        assert (state["version"], state["origin"]) == (EIGHT, "applied")
        assert _apply(admin, major=9).json()["data"]["version"] == NINE


def test_apply_refuses_bad_input_and_changes_nothing(lab):
    with _client(lab) as c:
        before = c.get("/ui/api/contract").json()["data"]
        for data, field, fragment in (
            ({"major": 5}, "major", "one of 6, 7, 8, 9"),
            ({"major": "x"}, "major", "integer"),
            ({"major": 7}, "major", "contract import"),  # 7.x not imported in this data dir
            ({"profile": "lenient"}, "profile", "enumeration"),
            ({}, "major", "missing"),
        ):
            r = _apply(c, **data)
            assert r.status_code == 400, (data, r.text)
            assert fragment in r.json()["errors"][field], r.json()
        assert c.get("/ui/api/contract").json()["data"] == before


def test_contract_page_swaps_through_its_form(lab):
    with _client(lab) as c:
        page = c.get("/ui/contract")
        assert page.status_code == 200 and f"PVE {NINE}" in page.text
        assert 'action="/ui/api/contract/apply"' in page.text
        posted = c.post(
            "/ui/api/contract/apply",
            data={"major": "8", "profile": "strict-docs", "redirect": "1"},
            headers={"Accept": "text/html"},
        )
        assert posted.status_code == 303 and posted.headers["location"] == "/ui/contract"
        assert f"PVE {EIGHT}" in c.get("/ui/contract").text
        assert _apply(c, major=9).status_code == 200


@pytest.fixture(scope="module")
def every_major_settings(settings, seeded, tmp_path_factory):
    """The session database, a data dir holding the official 6.4, 7.4 and 8.4 snapshots."""
    data_dir = tmp_path_factory.mktemp("majors")
    registry = ContractRegistry(data_dir)
    for version in OFFICIAL_VERSIONS:
        artifact = sources.read_file(official_apidoc(version))
        registry.store(artifact, sources.parse_artifact(artifact, version))
    return dataclasses.replace(settings, data_dir=data_dir, lab_enabled=True)


# The kernel series each major shipped: what its nodes report running.
KERNEL_SERIES = {6: "5.4.", 7: "5.15.", 8: "6.8.", 9: "6.14."}


def test_node_versions_follow_a_hot_swap(every_major_settings):
    """Every answer that names the release (``/version``, the node's version and status,
    its package list, the operator UI's inventory) follows the applied major."""
    with (
        SimulatorServer(every_major_settings, tls=True) as sim,
        _client(sim) as admin,
        httpx.Client(base_url=sim.base_url + "/api2/json", verify=False, timeout=30) as client,
    ):
        api = Session(client)
        node = api.get("/nodes").json()["data"][0]["node"]
        for major, version in zip(
            (6, 7, 8, 9, 6), (*OFFICIAL_VERSIONS, NINE, "6.4-15"), strict=True
        ):
            applied = _apply(admin, major=major)
            assert applied.status_code == 200, applied.text
            assert applied.json()["data"]["version"] == version
            kernel = KERNEL_SERIES[major]

            assert api.get("/version").json()["data"]["version"] == version
            node_version = api.get(f"/nodes/{node}/version").json()["data"]
            assert node_version["version"] == version
            assert node_version["release"] == version.replace("-", ".").rsplit(".", 1)[0]

            status = assert_conforms(
                "/nodes/{node}/status",
                "GET",
                api.get(f"/nodes/{node}/status").json()["data"],
                majors=(major,),
            )
            assert status["pveversion"].startswith(f"pve-manager/{version}/"), status
            assert status["kversion"].startswith(f"Linux {kernel}"), status
            if major >= 8:
                # pve-manager 8 added uname's fields and the boot mode.
                assert status["current-kernel"]["release"].startswith(kernel)
                assert status["current-kernel"]["version"].startswith("#1 SMP")
                assert status["boot-info"]["mode"] in ("efi", "legacy-bios")
            else:
                assert "current-kernel" not in status and "boot-info" not in status

            packages = {
                p["Package"]: p for p in api.get(f"/nodes/{node}/apt/versions").json()["data"]
            }
            assert packages["pve-manager"]["Version"] == version
            assert packages["proxmox-ve"]["ManagerVersion"] == version
            assert packages["proxmox-ve"]["RunningKernel"].startswith(kernel)

            assert status["pveversion"] in admin.get("/ui/").text


def test_cli_apply_is_process_local_and_restart_restores_the_snapshot(lab_settings, capsys):
    cert = str(lab_settings.data_dir / "tls" / "pve-ssl.pem")
    with SimulatorServer(lab_settings, tls=True) as first:
        url = first.base_url.replace("127.0.0.1", "localhost")
        assert main(["contract", "apply", "--url", url, "--major", "8", "--ca-cert", cert]) == 0
        assert json.loads(capsys.readouterr().out)["version"] == EIGHT
        with _client(first) as c:
            assert c.get("/api2/json/version").status_code == 401  # still PVE: needs a login
            assert c.get("/ui/api/contract").json()["data"]["version"] == EIGHT
        assert main(["contract", "apply", "--url", url, "--major", "6", "--insecure"]) == 1
        assert "HTTP 400" in capsys.readouterr().err
    with SimulatorServer(lab_settings, tls=True) as second, _client(second) as c:
        state = c.get("/ui/api/contract").json()["data"]
        assert (state["version"], state["origin"], state["generation"]) == (NINE, "configured", 0)


def test_metrics_count_requests_latency_tasks_reclaims_and_faults(server, root, settings):
    from proxmox_simulator.observability.metrics import record_fault

    with _client(server) as c:
        before = c.get("/metrics").text
        assert root.get("/nodes").status_code == 200
        assert root.get("/nodes/nope/qemu/1/config").status_code >= 400
        record_fault("latency")

        async def reclaimable():
            conn = await asyncpg.connect(settings.database_url)
            try:
                # A task whose worker died mid-run: its lease ran out a minute ago.
                await conn.execute(
                    "INSERT INTO tasks (upid, node, pid, pstart, starttime, type, userid, state,"
                    " lease_owner, lease_expires_at, attempts) VALUES ($1, 'pve1', 1, 1, 1,"
                    " 'pvesimmetrics', 'root@pam', 'running', 'dead-worker',"
                    " clock_timestamp() - interval '1 minute', 1)",
                    "UPID:pve1:00000001:00000001:00000001:pvesimmetrics::root@pam:",
                )
            finally:
                await conn.close()

        run(reclaimable())
        deadline = time.monotonic() + 20
        while True:
            after = c.get("/metrics").text
            reclaimed = metric_value(after, "pvesim_task_lease_reclaims_total")
            if reclaimed > metric_value(before, "pvesim_task_lease_reclaims_total"):
                break
            assert time.monotonic() < deadline, "the expired lease was not reclaimed"
            time.sleep(0.1)
    labels = {"route": "/nodes", "method": "GET", "status": "200"}
    assert metric_value(after, "pvesim_http_requests_total", **labels) == (
        metric_value(before, "pvesim_http_requests_total", **labels) + 1
    )
    config = {"route": "/nodes/{node}/qemu/{vmid}/config", "method": "GET"}
    assert metric_value(after, "pvesim_http_request_duration_seconds_count", **config) >= 1
    bucket = {**config, "le": "+Inf"}
    assert metric_value(after, "pvesim_http_request_duration_seconds_bucket", **bucket) >= 1
    assert metric_value(after, "pvesim_fault_injections_total", kind="latency") == (
        metric_value(before, "pvesim_fault_injections_total", kind="latency") + 1
    )
    assert "pvesim_tasks_queued " in after and "pvesim_tasks_running " in after
    assert metric_value(
        after, "pvesim_contract_info", version=NINE, major="9", profile="strict-docs"
    )


@requires_chromium()
def test_contract_page_in_a_browser(lab):
    """The operator's swap through the page's form, in headless Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            page = browser.new_page(ignore_https_errors=True)
            page.goto(lab.base_url + "/ui/contract")
            assert page.text_content("h1") == f"Selected contract: PVE {NINE} (strict-docs)"
            page.select_option("select[name=major]", "8")
            page.select_option("select[name=profile]", "hybrid")
            page.click("#swap button[type=submit]")
            page.wait_for_url(lab.base_url + "/ui/contract")
            assert page.text_content("h1") == f"Selected contract: PVE {EIGHT} (hybrid)"
            assert page.text_content("#contract-origin") == "applied"
            page.click("text=Compatibility report")
            assert page.text_content("h1") == f"PVE {EIGHT} — profile hybrid"
        finally:
            browser.close()
    with _client(lab) as c:
        assert _apply(c, major=9, profile="strict-docs").status_code == 200
