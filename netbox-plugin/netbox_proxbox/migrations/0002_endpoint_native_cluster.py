"""Add ProxmoxEndpoint.netbox_cluster and backfill it from unambiguous tracking links.

Additive and re-runnable:
- The column is created only when it is absent. Reversal keeps the physical column
  and its values (the state forgets the field, the database does not), so a later
  reapplication finds the retained owners and never replaces them.
- The backfill assigns an endpoint/core pair only when, among linked tracking
  records, the endpoint links exactly one native cluster and that cluster is linked
  by no other endpoint, and only when neither side already has an owner. Ambiguous
  history stays unclaimed for an operator to review.
"""

from collections import defaultdict

import django.db.models.deletion
from django.db import migrations, models

from ._release_0_1_0_schema import Expected, check_schema, derive_model

TABLE = "netbox_proxbox_proxmoxendpoint"
COLUMN = "netbox_cluster_id"


def ensure_ownership_column(apps, schema_editor):
    connection = schema_editor.connection
    Endpoint = apps.get_model("netbox_proxbox", "ProxmoxEndpoint")
    with connection.cursor() as cursor:
        columns = {c.name for c in connection.introspection.get_table_description(cursor, TABLE)}
        if COLUMN not in columns:
            schema_editor.add_field(Endpoint, Endpoint._meta.get_field("netbox_cluster"))
            return
        # Retained by an earlier reversal (or by an unpublished development migration):
        # verify it with the release validator's rules, never silently repair it.
        expected = Expected()
        derive_model(expected, Endpoint, connection, fields=("netbox_cluster",))
        problems = check_schema(cursor, expected, reject_unexpected=False)
    if problems:
        raise RuntimeError(
            f"{TABLE}.{COLUMN} exists but does not match the ownership schema; review it before "
            "migrating (nothing was changed):\n" + "\n".join(f"- {p}" for p in problems)
        )


def backfill_owners(apps, schema_editor):
    Endpoint = apps.get_model("netbox_proxbox", "ProxmoxEndpoint")
    Tracking = apps.get_model("netbox_proxbox", "ProxmoxCluster")
    db = schema_editor.connection.alias
    clusters_of = defaultdict(set)
    endpoints_of = defaultdict(set)
    pairs = (
        Tracking.objects.using(db).filter(netbox_cluster__isnull=False)
        .values_list("endpoint_id", "netbox_cluster_id")
        .distinct()
    )
    for endpoint_id, cluster_id in pairs:
        clusters_of[endpoint_id].add(cluster_id)
        endpoints_of[cluster_id].add(endpoint_id)
    owned = set(
        Endpoint.objects.using(db).filter(netbox_cluster__isnull=False).values_list("netbox_cluster_id", flat=True)
    )
    for endpoint_id in sorted(clusters_of):
        clusters = clusters_of[endpoint_id]
        if len(clusters) != 1:
            continue
        (cluster_id,) = clusters
        if endpoints_of[cluster_id] != {endpoint_id} or cluster_id in owned:
            continue
        if Endpoint.objects.using(db).filter(pk=endpoint_id, netbox_cluster__isnull=True).update(
            netbox_cluster_id=cluster_id
        ):
            owned.add(cluster_id)


class Migration(migrations.Migration):

    dependencies = [
        ("netbox_proxbox", "0001_initial"),
        ("virtualization", "0060_consolidate_unique_constraints"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="proxmoxendpoint",
                    name="netbox_cluster",
                    field=models.OneToOneField(
                        blank=True,
                        editable=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="proxmox_endpoint",
                        to="virtualization.cluster",
                    ),
                ),
            ],
            database_operations=[],
        ),
        # Reversal is deliberately a no-op: the column and its owners are retained.
        migrations.RunPython(ensure_ownership_column, migrations.RunPython.noop),
        migrations.RunPython(backfill_owners, migrations.RunPython.noop),
    ]
