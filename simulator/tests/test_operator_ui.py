"""The operator Web UI (/ui/) in headless Chromium: contract, clock, faults, inventory, tasks.

Debian's chromium (/usr/bin/chromium) driven by Playwright, no browser download;
skipped where it is missing, a failure under CI.
"""

from __future__ import annotations

import httpx
import pytest
from proxbox_processes import wait_until
from simtest_support import ROOT_PASSWORD, Session, create_database, drop_database, run

from proxbox_devstack.browser import launch, requires_chromium
from proxmox_simulator.cli import seed_database
from proxmox_simulator.config import Settings

pytestmark = requires_chromium()


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory):
    from proxmox_simulator.server import SimulatorServer

    url = create_database("ui")
    run(seed_database(Settings(database_url=url), "small", 4, ROOT_PASSWORD))
    settings = Settings(
        database_url=url,
        data_dir=tmp_path_factory.mktemp("ui"),
        clock="manual",
        task_workers=2,
        lease_seconds=10,
        pool_max_size=4,
        lab_enabled=True,
    )
    with SimulatorServer(settings) as server:
        yield server
    drop_database(url)


@pytest.fixture(scope="module")
def page(ui_server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(base_url=ui_server.base_url)
        yield page
        browser.close()


def test_operator_ui_controls_faults_and_shows_inventory_and_tasks(page, ui_server):
    with httpx.Client(base_url=ui_server.base_url + "/api2/json", timeout=30) as client:
        pve = Session(client)
        guests = pve.get("/nodes/pve1/qemu").json()["data"]
        vmid = next(g["vmid"] for g in guests if not g.get("template"))
        running = any(g["vmid"] == vmid and g["status"] == "running" for g in guests)
        action = "stop" if running else "start"
        upid = pve.post(f"/nodes/pve1/qemu/{vmid}/status/{action}").json()["data"]

        page.goto("/ui/")
        assert "PVE major 9" in page.inner_text("#contract")
        assert page.get_attribute("#contract a", "href") == "/ui/contract"
        assert page.inner_text("#fault-status") == "no scenario enabled"
        nodes = page.locator("#nodes tbody tr")
        assert [nodes.nth(i).locator("td").first.inner_text() for i in range(3)] == [
            "pve1",
            "pve2",
            "pve3",
        ]
        assert page.locator("#guests tbody tr").count() == 12
        assert "local-lvm" in page.inner_text("#storage")
        # A task waits in the queue until a worker claims it; under load that outlasts
        # the first page load, so the page is loaded again until the claim shows.
        task_row = page.locator("#tasks tbody tr", has_text=upid)

        def claimed() -> bool:
            if "queued" not in task_row.inner_text():
                return True
            page.reload()
            return False

        wait_until(claimed, 30, "a worker to claim the task", interval=0.2)
        assert "running" in task_row.inner_text()

        # The manual clock holds the task; advancing it from the page lets it finish.
        page.fill("#clock + form input[name=seconds]", "30")
        page.click("[data-testid=advance]")
        pve.wait(upid)
        page.goto("/ui/")
        page.click(f"#tasks a:text-is('{upid}')")
        assert page.inner_text("#task-status") == "OK"
        assert page.inner_text("#task-log").splitlines()[-1] == "TASK OK"

        # Enable a node-bound scenario, watch the inventory follow, switch its rule off.
        page.goto("/ui/")
        page.fill("input[aria-label='seed for node-offline']", "9")
        page.click("[data-testid=enable-node-offline]")
        assert "node-offline" in page.inner_text("#fault-status")
        assert "seed 9" in page.inner_text("#fault-status")
        assert page.locator("#nodes tr", has_text="pve2").locator("td").nth(1).inner_text() == (
            "offline"
        )
        assert pve.get("/nodes/pve2/status").status_code == 595
        page.click("[data-testid=rule-0]")
        assert page.locator("#rules tbody tr").first.locator("td").nth(4).inner_text() == "off"
        assert pve.get("/nodes/pve2/status").status_code == 200
        page.click("[data-testid=rule-0]")
        assert pve.get("/nodes/pve2/status").status_code == 595
        page.goto("/ui/")
        assert "node_offline: 2" in page.inner_text("#injections")
        page.click("[data-testid=disable]")
        assert page.inner_text("#fault-status") == "no scenario enabled"
        assert pve.get("/nodes/pve2/status").status_code == 200

        # A refused form names the field and changes nothing.
        response = page.request.post("/ui/actions/faults/enable", form={"name": "x", "seed": "1"})
        assert response.status == 400
        assert "name" in response.text()
        page.goto("/ui/")
        assert page.inner_text("#fault-status") == "no scenario enabled"
