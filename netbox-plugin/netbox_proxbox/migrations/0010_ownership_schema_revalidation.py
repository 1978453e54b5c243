"""Validate the ownership schema again with the second validator (release 0.2.0).

Changes nothing. The first validator (0005, released and never edited) accepted an
ownership foreign key redeclared ON DELETE CASCADE or NOT DEFERRABLE, and rejected plain
indexes the spec allows; this one checks every declared foreign key's actions and
deferrability and leaves plain indexes alone. Its own transaction: a failure rolls back
only this migration and leaves it unrecorded. Reversal is a no-op; reapplication
validates again.
"""

from django.db import migrations

from ._release_0_2_0_schema import validate


class Migration(migrations.Migration):
    atomic = True

    dependencies = [
        ("netbox_proxbox", "0009_endpoint_records_mode"),
    ]

    # Must stay the last operation (it drains the DDL deferred before it).
    operations = [
        migrations.RunPython(validate, migrations.RunPython.noop, elidable=False),
    ]
