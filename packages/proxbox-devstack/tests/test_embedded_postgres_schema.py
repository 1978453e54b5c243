"""The plugin's release schema validator on the embedded PostgreSQL (18), which records
every NOT NULL as a catalog constraint: a fresh `proxbox up` migrates through it."""

from __future__ import annotations

import psycopg

from netbox_proxbox.migrations import _release_0_1_0_schema as validator


def test_validated_not_null_constraints_are_the_columns_nullability(embedded):
    _data_dir, started = embedded
    with psycopg.connect(started.database_url, autocommit=True) as conn:
        major = conn.info.server_version // 10000
        assert major >= 18, f"the embedded server is PostgreSQL {major}"
        conn.execute("DROP TABLE IF EXISTS release_probe")
        conn.execute(
            "CREATE TABLE release_probe (id int PRIMARY KEY, name text NOT NULL, note text)"
        )
        with conn.cursor() as cursor:
            _columns, objects = validator.read_catalog(cursor, "release_probe")
            assert [o.kind for o in objects] == ["primary key"]
            # A NOT VALID NOT NULL is not the column's declared nullability: it is reported.
            conn.execute("ALTER TABLE release_probe ADD CONSTRAINT note_nn NOT NULL note NOT VALID")
            _columns, objects = validator.read_catalog(cursor, "release_probe")
            assert [(o.kind, o.name) for o in objects][1:] == [("constraint (n)", "note_nn")]
        conn.execute("DROP TABLE release_probe")
