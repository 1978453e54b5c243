"""Validate the physical schema of release 0.1.0 after the ownership migration committed.

Its own transaction: a failure here rolls back only this migration and leaves it
unrecorded, while 0002..0004 stay committed (the migrations do not roll back as
one unit). The validation is the last operation and never repairs anything;
reversal is a no-op and reapplication validates again.
"""

from django.db import migrations

from ._release_0_1_0_schema import validate


class Migration(migrations.Migration):

    atomic = True

    dependencies = [
        ("netbox_proxbox", "0004_endpoint_token_id_format"),
        ("virtualization", "0060_consolidate_unique_constraints"),
    ]

    # Must stay the last operation (it drains the DDL deferred before it).
    operations = [
        migrations.RunPython(validate, migrations.RunPython.noop, elidable=False),
    ]
