import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('netbox_proxbox', '0012_ha_rules'),
    ]

    operations = [
        migrations.AddField(
            model_name='proxmoxendpoint',
            name='watch_interval',
            field=models.PositiveSmallIntegerField(blank=True, null=True, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(3600)]),
        ),
    ]
