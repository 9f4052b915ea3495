"""Full-text search over checkpoints: SQLite's FTS5 table and its triggers, PostgreSQL's
generated ``tsvector`` column and GIN index (see ``checkpoints/search.py``)."""

from typing import Any

from django.db import migrations

from checkpoints.search import search_index_create, search_index_drop


def create(apps: Any, schema_editor: Any) -> None:
    search_index_create(schema_editor=schema_editor)


def drop(apps: Any, schema_editor: Any) -> None:
    search_index_drop(schema_editor=schema_editor)


class Migration(migrations.Migration):
    dependencies = [("checkpoints", "0002_retention")]

    operations = [migrations.RunPython(create, drop)]
