"""Bulk-loading checkpoints for the benchmarks: raw inserts in large transactions, through
the same table (and so the same indexes and search triggers) the service writes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# The order of the values each row gives ``checkpoints_insert``.
CHECKPOINT_COLUMNS = (
    "id", "owner_id", "session_id", "session_key", "project_normalized", "harness",
    "trigger", "digest", "current_task", "decisions", "open_questions", "blockers",
    "next_steps", "modified_files", "recent_prompts", "memory_queries", "recent_remembers",
    "last_assistant_message", "git_branch", "git_head", "prompt_count", "new_prompts",
    "agent_id", "tags", "created_at",
)  # fmt: skip


def checkpoints_insert(rows: Iterable[tuple[Any, ...]], *, per_transaction: int) -> None:
    """Insert ``rows`` (values in ``CHECKPOINT_COLUMNS`` order) into the checkpoint table,
    ``per_transaction`` rows to a transaction. Runs inside a set-up Django."""
    from django.db import connection, transaction

    from checkpoints.models import Checkpoint

    placeholders = ", ".join(["%s"] * len(CHECKPOINT_COLUMNS))
    # Our own table and column names; the values go as parameters.
    insert = (
        f"INSERT INTO {Checkpoint._meta.db_table} ({', '.join(CHECKPOINT_COLUMNS)}) "  # noqa: S608
        f"VALUES ({placeholders})"
    )
    batch: list[tuple[Any, ...]] = []
    with connection.cursor() as cursor:
        for row in rows:
            batch.append(row)
            if len(batch) >= per_transaction:
                with transaction.atomic():
                    cursor.executemany(insert, batch)
                batch = []
        if batch:
            with transaction.atomic():
                cursor.executemany(insert, batch)
