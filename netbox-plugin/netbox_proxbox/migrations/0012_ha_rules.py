# PVE 9 HA rules (node affinity, resource affinity) and the HA resources they list.

import django.db.models.deletion
import netbox.models.deletion
import taggit.managers
import utilities.json
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('extras', '0144_customfield_status'),
        ('netbox_proxbox', '0011_endpoint_removed_guests_days'),
        ('virtualization', '0060_consolidate_unique_constraints'),
    ]

    operations = [
        migrations.CreateModel(
            name='ProxmoxHARule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False)),
                ('created', models.DateTimeField(auto_now_add=True, null=True)),
                ('last_updated', models.DateTimeField(auto_now=True, null=True)),
                ('custom_field_data', models.JSONField(blank=True, default=dict, encoder=utilities.json.CustomFieldJSONEncoder)),
                ('name', models.CharField(max_length=100)),
                ('rule_type', models.CharField(max_length=20)),
                ('affinity', models.CharField(default='positive', max_length=20)),
                ('nodes', models.CharField(blank=True, max_length=500)),
                ('strict', models.BooleanField(default=False)),
                ('enabled', models.BooleanField(default=True)),
                ('errors', models.CharField(blank=True, max_length=1000)),
                ('comment', models.CharField(blank=True, max_length=500)),
                ('cluster', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='proxmox_ha_rules', to='virtualization.cluster')),
                ('resources', models.ManyToManyField(blank=True, related_name='rules', to='netbox_proxbox.proxmoxharesource')),
                ('tags', taggit.managers.TaggableManager(through='extras.TaggedItem', to='extras.Tag')),
            ],
            options={
                'verbose_name': 'Proxmox HA rule',
                'verbose_name_plural': 'Proxmox HA rules',
                'ordering': ('cluster', 'name', 'pk'),
                'constraints': [models.UniqueConstraint(fields=('cluster', 'name'), name='netbox_proxbox_harule_unique')],
            },
            bases=(netbox.models.deletion.DeleteMixin, models.Model),
        ),
    ]
