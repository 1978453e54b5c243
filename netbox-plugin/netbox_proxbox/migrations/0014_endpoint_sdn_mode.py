from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("netbox_proxbox", "0013_endpoint_watch_interval"),
    ]

    operations = [
        migrations.AddField(
            model_name="proxmoxendpoint",
            name="sdn_mode",
            field=models.CharField(db_default="always", default="always", max_length=20),
        ),
    ]
