"""Chromium against an e2e NetBox (`sync_fixtures.NetBoxServer`): a page signed in through
NetBox's own login form, as an operator meets the UI, with a screenshot kept when the
block fails (`proxbox_devstack.browser`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sync_fixtures import ADMIN_PASSWORD, NetBoxServer

from proxbox_devstack.browser import launch, requires_chromium, save_screenshots

__all__ = ["requires_chromium", "signed_in_page"]


@contextmanager
def signed_in_page(
    netbox: NetBoxServer, username: str = "admin", password: str = ADMIN_PASSWORD, name: str = ""
) -> Iterator:
    """A Playwright page of `netbox` signed in as `username`; `name` labels its screenshot."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_context(base_url=netbox.url).new_page()
            page.set_default_timeout(30_000)
            page.goto("/login/", wait_until="domcontentloaded")
            page.fill("#id_username", username)
            page.fill("#id_password", password)
            page.locator("form button[type=submit]").first.click()
            page.wait_for_url(lambda url: "/login/" not in url, wait_until="domcontentloaded")
            try:
                yield page
            except BaseException:
                for path in save_screenshots(name or f"e2e-{username}", [page]):
                    print(f"screenshot kept: {path}")
                raise
        finally:
            browser.close()
