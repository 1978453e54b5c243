import django.db.models.deletion
import netbox_proxbox.models.node_types
import taggit.managers
import utilities.json
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('dcim', '0001_initial'),
        ('extras', '0001_initial'),
        ('netbox_proxbox', '0015_assignment_rules'),
    ]

    operations = [
        migrations.AddField(
            model_name='proxmoxendpoint',
            name='node_device_type',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='proxmox_endpoints', to='dcim.devicetype'),
        ),
        migrations.CreateModel(
            name='ProxmoxNodeTypeOverride',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False)),
                ('created', models.DateTimeField(auto_now_add=True, null=True)),
                ('last_updated', models.DateTimeField(auto_now=True, null=True)),
                ('custom_field_data', models.JSONField(blank=True, default=dict, encoder=utilities.json.CustomFieldJSONEncoder)),
                ('node', models.CharField(max_length=63, validators=[netbox_proxbox.models.node_types.NODE_NAME_VALIDATOR])),
                ('description', models.CharField(blank=True, max_length=200)),
                ('device_type', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='proxmox_node_type_overrides', to='dcim.devicetype')),
                ('endpoint', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='node_type_overrides', to='netbox_proxbox.proxmoxendpoint')),
                ('tags', taggit.managers.TaggableManager(through='extras.TaggedItem', to='extras.Tag')),
            ],
            options={
                'ordering': ('endpoint', 'node'),
                'constraints': [models.UniqueConstraint(fields=('endpoint', 'node'), name='netbox_proxbox_proxmoxnodetypeoverride_unique_node', violation_error_message='This endpoint already has an override for the node.')],
            },
        ),
    ]
