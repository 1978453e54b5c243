"""The documentation site builds offline and strictly, with every README and page."""

from __future__ import annotations

import pytest
import yaml

from proxbox_devstack import docs_site, release


@pytest.fixture(scope="module")
def site():
    result = docs_site.build()
    assert result.returncode == 0, result.stdout + result.stderr
    return docs_site.site_dir()


def test_the_site_has_every_package_readme_and_the_pages_the_operators_need(site):
    for package in release.workspace_packages():
        relative = package.directory.relative_to(release.WORKSPACE_ROOT)
        assert (site / relative / "index.html").is_file(), relative  # README.md → index
        assert (site / relative / "CHANGELOG" / "index.html").is_file(), relative
    for page in ("architecture", "operator-guide", "benchmarks", "reliability"):
        assert (site / "docs" / page / "index.html").is_file(), page
    assert (site / "compose" / "index.html").is_file()
    architecture = (site / "docs" / "architecture" / "index.html").read_text()
    assert "images/architecture.svg" in architecture
    assert (site / "docs" / "images" / "architecture.svg").is_file()


def test_the_navigation_names_only_pages_that_exist():
    config = yaml.safe_load((release.WORKSPACE_ROOT / docs_site.CONFIG).read_text())
    pages: list[str] = []

    def walk(items):
        for item in items:
            for value in item.values():
                walk(value) if isinstance(value, list) else pages.append(value)

    walk(config["nav"])
    sources = {str(path) for path in docs_site.sources()}
    assert set(pages) <= sources, set(pages) - sources


def test_the_site_needs_no_network():
    config = (release.WORKSPACE_ROOT / docs_site.CONFIG).read_text()
    assert "font: false" in config  # Material otherwise links web fonts
