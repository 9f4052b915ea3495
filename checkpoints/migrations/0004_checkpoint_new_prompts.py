from typing import Any

from django.conf import settings
from django.db import migrations, models

# Existing checkpoints: prompts since their parent (the session's previous checkpoint).
BACKFILL = """
UPDATE checkpoints_checkpoint SET new_prompts = CASE
    WHEN prompt_count > COALESCE((SELECT p.prompt_count FROM checkpoints_checkpoint AS p
                                  WHERE p.id = checkpoints_checkpoint.parent_id), 0)
    THEN prompt_count - COALESCE((SELECT p.prompt_count FROM checkpoints_checkpoint AS p
                                  WHERE p.id = checkpoints_checkpoint.parent_id), 0)
    ELSE 0 END
"""

NEW_PROMPTS = models.PositiveIntegerField(default=0)


def add_column(apps: Any, schema_editor: Any) -> None:
    """Add the column in place. Django's SQLite editor would rebuild the table, which drops
    the search triggers (0003) and renumbers the rowids the search index is keyed on."""
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(
            'ALTER TABLE "checkpoints_checkpoint" ADD COLUMN "new_prompts" integer unsigned '
            'NOT NULL DEFAULT 0 CHECK ("new_prompts" >= 0)'
        )
    else:
        field = NEW_PROMPTS.clone()
        field.set_attributes_from_name("new_prompts")
        schema_editor.add_field(apps.get_model("checkpoints", "Checkpoint"), field)
    schema_editor.execute(BACKFILL)


def drop_column(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute('ALTER TABLE "checkpoints_checkpoint" DROP COLUMN "new_prompts"')


class Migration(migrations.Migration):
    dependencies = [
        ("checkpoints", "0003_checkpoint_search"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(add_column, drop_column)],
            state_operations=[
                migrations.AddField(model_name="checkpoint", name="new_prompts", field=NEW_PROMPTS)
            ],
        ),
        migrations.AddIndex(
            model_name="checkpoint",
            index=models.Index(
                fields=["owner", "created_at", "trigger", "new_prompts"],
                name="checkpoint_owner_activity",
            ),
        ),
    ]
