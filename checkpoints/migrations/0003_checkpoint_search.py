"""Full-text search over checkpoints (``checkpoints/search.py`` queries it).

SQLite: an FTS5 table ``checkpoint_search`` whose rowid is the checkpoint row's rowid, filled
here and kept in sync by triggers, so every write path (the ORM, bulk deletes, cascades)
keeps it current. PostgreSQL: a GIN index on the ``to_tsvector`` expression the query uses.
Other databases get nothing; the search scans there.

The SQL is frozen here on purpose: ``checkpoints/search.py`` repeats the PostgreSQL
expression, and a test checks that the query still uses this index.
"""

from typing import Any

from django.db import migrations

# The list fields are JSON text (ASCII-escaped on SQLite): json_each decodes the items.
SQLITE_LISTS = """(SELECT group_concat(value, char(10)) FROM (
    SELECT value FROM json_each({row}.decisions)
    UNION ALL SELECT value FROM json_each({row}.open_questions)
    UNION ALL SELECT value FROM json_each({row}.blockers)
    UNION ALL SELECT value FROM json_each({row}.next_steps)
    UNION ALL SELECT value FROM json_each({row}.modified_files)
    UNION ALL SELECT value FROM json_each({row}.recent_prompts)
    UNION ALL SELECT value FROM json_each({row}.tags)
))"""

SQLITE_INSERT = f"""INSERT INTO checkpoint_search
    (rowid, owner_id, checkpoint_id, digest, task, lists)
    VALUES (NEW.rowid, NEW.owner_id, NEW.id, NEW.digest, NEW.current_task,
            {SQLITE_LISTS.format(row="NEW")})"""

SQLITE_FORWARD = [
    # unicode61 with diacritics removed: "cafe" finds "café"; words split at punctuation,
    # so a file name matches inside its path.
    """CREATE VIRTUAL TABLE checkpoint_search USING fts5(
        owner_id UNINDEXED, checkpoint_id UNINDEXED, digest, task, lists,
        tokenize = 'unicode61 remove_diacritics 2'
    )""",
    f"""INSERT INTO checkpoint_search (rowid, owner_id, checkpoint_id, digest, task, lists)
        SELECT rowid, owner_id, id, digest, current_task, {SQLITE_LISTS.format(row="c")}
        FROM checkpoints_checkpoint AS c""",
    f"""CREATE TRIGGER checkpoint_search_insert AFTER INSERT ON checkpoints_checkpoint
        BEGIN {SQLITE_INSERT}; END""",
    # Only the searched columns: the prune's "parent = NULL" updates must not re-index.
    f"""CREATE TRIGGER checkpoint_search_update AFTER UPDATE OF
        id, owner_id, digest, current_task, decisions, open_questions, blockers, next_steps,
        modified_files, recent_prompts, tags
        ON checkpoints_checkpoint
        BEGIN
            DELETE FROM checkpoint_search WHERE rowid = OLD.rowid;
            {SQLITE_INSERT};
        END""",
    """CREATE TRIGGER checkpoint_search_delete AFTER DELETE ON checkpoints_checkpoint
        BEGIN DELETE FROM checkpoint_search WHERE rowid = OLD.rowid; END""",
]
SQLITE_REVERSE = [
    "DROP TRIGGER IF EXISTS checkpoint_search_delete",
    "DROP TRIGGER IF EXISTS checkpoint_search_update",
    "DROP TRIGGER IF EXISTS checkpoint_search_insert",
    "DROP TABLE IF EXISTS checkpoint_search",
]

# The 'simple' configuration: no stemming and no stop words, since the text is code, paths
# and prompts in any language. '/', '<' and '>' become spaces first: PostgreSQL's parser
# would keep a path as one word and drop anything that looks like an HTML tag.
POSTGRESQL_FORWARD = [
    """CREATE INDEX checkpoint_search ON checkpoints_checkpoint USING gin ((
        to_tsvector('simple'::regconfig, translate(digest || ' ' || current_task, '/<>', '   '))
        || jsonb_to_tsvector(
            'simple'::regconfig,
            translate(
                (decisions || open_questions || blockers || next_steps || modified_files
                 || recent_prompts || tags)::text,
                '/<>', '   '
            )::jsonb,
            '["string"]'::jsonb
        )
    ))""",
]
POSTGRESQL_REVERSE = ["DROP INDEX IF EXISTS checkpoint_search"]


def _run(statements: dict[str, list[str]], schema_editor: Any) -> None:
    for statement in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, params=None)


def search_create(apps: Any, schema_editor: Any) -> None:
    _run({"sqlite": SQLITE_FORWARD, "postgresql": POSTGRESQL_FORWARD}, schema_editor)


def search_drop(apps: Any, schema_editor: Any) -> None:
    _run({"sqlite": SQLITE_REVERSE, "postgresql": POSTGRESQL_REVERSE}, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("checkpoints", "0002_retention")]

    operations = [migrations.RunPython(search_create, search_drop)]
