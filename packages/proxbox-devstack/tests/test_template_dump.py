"""The migrated template's dump: restored when its key matches, migrated when it does not
or when the dump is unusable; and the progress lines `proxbox up -d` draws again.

The template here is a small database standing in for NetBox's (a real migration
takes minutes); dumping and restoring run the real pg_dump/pg_restore against the
embedded server. Migrating is recorded, not run.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg
import pytest

from proxbox_devstack import testdb
from proxbox_devstack.progress import Reporter


@pytest.fixture
def server(embedded, tmp_path, monkeypatch):
    """The embedded server's settings, a private dump cache and a recording migrator."""
    _data_dir, started = embedded
    url = urlsplit(started.database_url)
    settings = {"HOST": url.hostname, "PORT": url.port, "USER": url.username, "PASSWORD": ""}
    monkeypatch.setenv(testdb.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(testdb, "shipped_dumps_dir", lambda: tmp_path / "shipped")
    migrated: list[str] = []

    def migrate(conn, name, source, progress=None):
        migrated.append(name)
        conn.execute(f'CREATE DATABASE "{name}"')
        with psycopg.connect(started.database_url.rsplit("/", 1)[0] + f"/{name}") as db:
            db.execute("CREATE TABLE migrated (origin text)")
            db.execute("INSERT INTO migrated VALUES (%s)", [name])

    monkeypatch.setattr(testdb, "_build", migrate)
    monkeypatch.setattr(testdb, "netbox_release", lambda: "4_7_3")
    yield settings, started.database_url, migrated
    with testdb.maintenance_connection(settings) as conn:
        for prefix in (testdb.BASE_PREFIX, testdb.FULL_PREFIX):
            testdb._drop_stale(conn, prefix, keep="", retain=0)


def use_keys(monkeypatch, base: str, full: str) -> None:
    monkeypatch.setattr(testdb, "template_keys", lambda: (base, full))


def drop_templates(settings) -> None:
    with testdb.maintenance_connection(settings) as conn:
        for prefix in (testdb.BASE_PREFIX, testdb.FULL_PREFIX):
            testdb._drop_stale(conn, prefix, keep="", retain=0)


def origin(url: str, database: str) -> str:
    with psycopg.connect(url.rsplit("/", 1)[0] + f"/{database}") as db:
        return db.execute("SELECT origin FROM migrated").fetchone()[0]


def databases(settings) -> set[str]:
    with testdb.maintenance_connection(settings) as conn:
        return {row[0] for row in conn.execute("SELECT datname FROM pg_database")}


def test_another_netbox_releases_templates_and_dump_are_kept(server, monkeypatch):
    """`nox -s netbox` tests another NetBox release against the same server and cache:
    building its templates and dump must not drop the locked release's, nor the reverse."""
    settings, _url, migrated = server
    use_keys(monkeypatch, "b1", "f1")
    locked_dump = testdb.build_dump(settings, log=lambda _line: None)
    monkeypatch.setattr(testdb, "netbox_release", lambda: "4_7_0")
    use_keys(monkeypatch, "b0", "f0")
    other_dump = testdb.build_dump(settings, log=lambda _line: None)

    assert migrated == [
        "proxbox_tpl_base_4_7_3_b1",
        "proxbox_tpl_full_4_7_3_f1",
        "proxbox_tpl_base_4_7_0_b0",
        "proxbox_tpl_full_4_7_0_f0",
    ]
    assert set(migrated) <= databases(settings)
    assert locked_dump.is_file() and other_dump.is_file() and locked_dump != other_dump

    # The same release's plugins changed: its old one goes once two newer ones exist.
    for key in ("f7", "f8", "f9"):
        use_keys(monkeypatch, "b0", key)
        testdb.ensure_template(settings, log=lambda _line: None)
    assert "proxbox_tpl_full_4_7_0_f0" not in databases(settings)
    assert "proxbox_tpl_full_4_7_3_f1" in databases(settings)


def test_a_matching_dump_is_restored_instead_of_migrating(server, monkeypatch):
    settings, url, migrated = server
    use_keys(monkeypatch, "b1", "f1")
    dump = testdb.build_dump(settings, log=lambda _line: None)
    assert dump.is_file() and dump.name.startswith("netbox4_7_3-f1-pg")
    assert migrated == ["proxbox_tpl_base_4_7_3_b1", "proxbox_tpl_full_4_7_3_f1"]
    drop_templates(settings)

    lines, events = [], []
    template = testdb.ensure_template(settings, log=lines.append, progress=events.append)

    assert template == "proxbox_tpl_full_4_7_3_f1"
    assert migrated == [
        "proxbox_tpl_base_4_7_3_b1",
        "proxbox_tpl_full_4_7_3_f1",
    ]  # nothing migrated again
    assert origin(url, template) == "proxbox_tpl_full_4_7_3_f1"
    assert lines == [f"Restored template {template} from {dump}"]
    assert {"label": "restoring the NetBox template", "end": True} in events


def test_a_dump_of_another_key_is_not_restored(server, monkeypatch):
    settings, _url, migrated = server
    use_keys(monkeypatch, "b1", "f1")
    testdb.build_dump(settings, log=lambda _line: None)
    drop_templates(settings)
    migrated.clear()

    use_keys(monkeypatch, "b1", "f2")  # e.g. a plugin migration changed
    assert testdb.ensure_template(settings, log=lambda _line: None) == "proxbox_tpl_full_4_7_3_f2"
    assert migrated == ["proxbox_tpl_base_4_7_3_b1", "proxbox_tpl_full_4_7_3_f2"]


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_an_unusable_dump_falls_back_to_migrating_with_one_line(server, monkeypatch, damage):
    settings, url, migrated = server
    use_keys(monkeypatch, "b1", "f3")
    dump = testdb.build_dump(settings, log=lambda _line: None)
    drop_templates(settings)
    migrated.clear()
    data = dump.read_bytes()
    dump.write_bytes(b"not a dump" * 100 if damage == "garbage" else data[: len(data) // 2])

    lines: list[str] = []
    template = testdb.ensure_template(settings, log=lines.append)

    assert migrated == ["proxbox_tpl_base_4_7_3_b1", "proxbox_tpl_full_4_7_3_f3"]
    assert origin(url, template) == "proxbox_tpl_full_4_7_3_f3"
    unusable = [line for line in lines if "unusable" in line]
    assert len(unusable) == 1
    assert unusable[0].startswith(f"template dump {dump} is unusable (")
    assert unusable[0].endswith("; migrating instead")
    assert not any(name.endswith("_building") for name in databases(settings))


def test_a_new_dump_replaces_the_stale_one(server, monkeypatch):
    settings, _url, _migrated = server
    use_keys(monkeypatch, "b1", "f4")
    old = testdb.build_dump(settings, log=lambda _line: None)
    use_keys(monkeypatch, "b1", "f5")
    new = testdb.build_dump(settings, log=lambda _line: None)
    assert new.is_file() and not old.exists()


def test_the_first_migration_keeps_its_dump_and_later_ones_reuse_it(server, monkeypatch):
    """`proxbox up` calls keep_dump after ensure_template: a release's first migration
    writes the dump the next empty data dir restores; later calls write nothing."""
    settings, _url, migrated = server
    use_keys(monkeypatch, "b1", "f6")
    template = testdb.ensure_template(settings, log=lambda _line: None)
    dumps: list[str] = []
    real_write_dump = testdb._write_dump
    monkeypatch.setattr(
        testdb, "_write_dump", lambda *a, **kw: dumps.append("built") or real_write_dump(*a, **kw)
    )

    kept = testdb.keep_dump(settings, template, log=lambda _line: None)
    assert kept is not None and kept.is_file() and dumps == ["built"]
    assert testdb.keep_dump(settings, template, log=lambda _line: None) == kept
    assert dumps == ["built"]  # the cache already holds this key's dump
    assert migrated == ["proxbox_tpl_base_4_7_3_b1", "proxbox_tpl_full_4_7_3_f6"]


def test_a_dump_that_cannot_be_written_costs_one_line_not_the_start(server, monkeypatch):
    settings, _url, _migrated = server
    use_keys(monkeypatch, "b1", "f7")
    template = testdb.ensure_template(settings, log=lambda _line: None)
    monkeypatch.setattr(testdb, "_client", lambda name, major: "/nonexistent/pg_dump")
    lines: list[str] = []
    assert testdb.keep_dump(settings, template, log=lines.append) is None
    assert len(lines) == 1 and lines[0].startswith("template dump not written (")
    assert lines[0].endswith("the next cold start migrates again")


def ship(dump, major: int | None = None):
    """`dump` moved among the shipped dumps (out of the cache), renamed for `major`."""
    shipped = testdb.ship_dump(dump)
    dump.unlink()
    if major is None:
        return shipped
    release, key, _variant = shipped.name.split("-", 2)
    icu = shipped.name.removesuffix(".dump").rsplit("-", 1)[1]
    return shipped.rename(shipped.with_name(f"{release}-{key}-pg{major}-{icu}.dump"))


def server_major(settings) -> int:
    with testdb.maintenance_connection(settings) as conn:
        return conn.info.server_version // 10000


def test_a_first_start_restores_the_shipped_dump_and_keeps_no_copy(server, monkeypatch):
    """An empty cache (a new machine): the dump the package ships is restored, and
    keep_dump writes no second copy of it."""
    settings, url, migrated = server
    use_keys(monkeypatch, "b1", "f8")
    shipped = ship(testdb.build_dump(settings, log=lambda _line: None))
    drop_templates(settings)
    migrated.clear()
    assert not list(testdb.cache_dir().glob("*.dump"))

    lines: list[str] = []
    template = testdb.ensure_template(settings, log=lines.append)

    assert migrated == []
    assert origin(url, template) == "proxbox_tpl_full_4_7_3_f8"
    assert lines == [f"Restored template {template} from {shipped}"]
    assert testdb.keep_dump(settings, template, log=lambda _line: None) == shipped
    assert not list(testdb.cache_dir().glob("*.dump"))


def test_shipped_dumps_are_ignored_when_the_environment_says_so(server, monkeypatch):
    settings, _url, migrated = server
    use_keys(monkeypatch, "b1", "f13")
    ship(testdb.build_dump(settings, log=lambda _line: None))
    drop_templates(settings)
    migrated.clear()
    monkeypatch.setenv(testdb.NO_SHIPPED_DUMPS_ENV, "1")
    testdb.ensure_template(settings, log=lambda _line: None)
    assert migrated == ["proxbox_tpl_base_4_7_3_b1", "proxbox_tpl_full_4_7_3_f13"]


def test_a_shipped_dump_from_an_older_major_is_restored_and_a_newer_ones_is_not(
    server, monkeypatch
):
    settings, url, migrated = server
    major = server_major(settings)
    use_keys(monkeypatch, "b1", "f9")
    ship(testdb.build_dump(settings, log=lambda _line: None), major=major + 1)
    drop_templates(settings)
    migrated.clear()
    testdb.ensure_template(settings, log=lambda _line: None)
    assert migrated == ["proxbox_tpl_base_4_7_3_b1", "proxbox_tpl_full_4_7_3_f9"]

    use_keys(monkeypatch, "b1", "f10")
    older = ship(testdb.build_dump(settings, log=lambda _line: None), major=major - 1)
    drop_templates(settings)
    migrated.clear()
    lines: list[str] = []
    template = testdb.ensure_template(settings, log=lines.append)
    assert migrated == []
    assert origin(url, template) == "proxbox_tpl_full_4_7_3_f10"
    assert lines == [f"Restored template {template} from {older}"]


def test_shipping_replaces_the_variants_old_dump(server, monkeypatch):
    settings, _url, _migrated = server
    use_keys(monkeypatch, "b1", "f11")
    old = testdb.ship_dump(testdb.build_dump(settings, log=lambda _line: None))
    use_keys(monkeypatch, "b1", "f12")
    new = testdb.ship_dump(testdb.build_dump(settings, log=lambda _line: None))
    assert new.is_file() and not old.exists()
    assert [path.name for path in testdb.shipped_dumps_dir().iterdir()] == [new.name]


class Captured:
    def __init__(self, tty: bool):
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_plain_progress_lines_replay_as_the_same_steps():
    written: list[str] = []
    plain = Reporter(written.append, stream=Captured(False))
    plain.event({"label": "migrating NetBox", "done": 0, "total": 200})
    for done in range(1, 201):
        plain.event({"label": "migrating NetBox", "done": done, "total": 200})
    plain.event({"label": "migrating NetBox", "end": True})

    # One line per tenth, not per migration: a log stays readable.
    assert written[:2] == ["migrating NetBox ...", "migrating NetBox ... 0/200"]
    assert written[-2] == "migrating NetBox ... 200/200"
    assert written[-1].startswith("migrating NetBox: done in ")
    assert len(written) == 13

    again: list[str] = []
    replayed = Reporter(again.append, stream=Captured(False))
    assert all(replayed.replay(line) for line in written)
    assert not replayed.replay("starting netbox")
    assert again[:-1] == written[:-1]


def test_a_terminal_gets_bars_instead_of_lines():
    written: list[str] = []
    bars = Reporter(written.append, stream=Captured(True))
    with bars.step("starting netbox"):
        bars.event({"label": "migrating NetBox", "done": 3, "total": 10})
        bars.event({"label": "migrating NetBox", "end": True})
    task = bars._progress.tasks[0]
    assert (task.description, task.completed, task.total) == ("starting netbox", 1, 1)
    assert bars._progress.tasks[1].completed == bars._progress.tasks[1].total == 10
    bars.close()
    assert written == []


def test_templates_of_other_keys_stay_while_they_are_among_the_newest(server, monkeypatch):
    """Branches side by side on one server each clone their own full template: a build
    keeps the two newest others, and drops what is older."""
    settings, _url, migrated = server
    for key in ("f1", "f2", "f3", "f4"):
        use_keys(monkeypatch, "b1", key)
        testdb.ensure_template(settings, log=lambda _line: None, restore=False)
    present = {name for name in databases(settings) if name.startswith("proxbox_tpl_full_")}
    assert present == {
        "proxbox_tpl_full_4_7_3_f4",
        "proxbox_tpl_full_4_7_3_f3",
        "proxbox_tpl_full_4_7_3_f2",
    }
