from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("frontend", "0002_message_tree"),
    ]

    operations = [
        migrations.AlterField(
            model_name="message",
            name="status",
            field=models.CharField(
                choices=[
                    ("generating", "Generating"),
                    ("complete", "Complete"),
                    ("stopped", "Stopped"),
                    ("error", "Error"),
                    ("timeout", "Timeout"),
                    ("interrupted", "Interrupted"),
                ],
                default="complete",
                max_length=16,
            ),
        ),
    ]
