from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("netbox_proxbox", "0016_node_device_types"),
    ]

    operations = [
        migrations.AddField(
            model_name="proxmoxendpoint",
            name="prefixes_mode",
            # Opt-in: existing endpoints get no prefixes until an operator switches it on.
            field=models.CharField(db_default="off", default="off", max_length=20),
        ),
    ]
