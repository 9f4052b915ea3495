"""Handing the space a prune freed back to the file system (SQLite), and the database's size."""

from __future__ import annotations

import time

from django.conf import settings
from django.db import connection

from checkpoints.services.locks import write_serialized

# How long one step of retention work may hold the write lock (a delete batch, a vacuum step).
LOCK_TARGET_SECONDS = 0.005
# SQLite space is handed back a few pages (of 4 KiB) per write transaction, starting here.
VACUUM_FIRST_STEP_PAGES = 64


def database_space_reclaim(*, deadline: float | None = None) -> int | None:
    """After a prune, on SQLite: refresh the planner's statistics and hand the freed pages
    back to the file system, a few at a time (each step holds the write lock about as long
    as a delete batch), until none are free or ``deadline`` (``time.monotonic()``) passes;
    the next run goes on. Returns the bytes returned.

    On PostgreSQL nothing is done: autovacuum makes freed space reusable on its own. Space
    goes back on SQLite only when the file uses incremental auto-vacuum, which
    ``sqlite_prepare`` sets up (``manage.py serve`` runs it).
    """
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        return None
    with connection.cursor() as cursor:
        with write_serialized():
            # Statistics from a bounded sample: a full ANALYZE of a large table would hold
            # the write lock for seconds.
            cursor.execute("PRAGMA analysis_limit = 1000")
            cursor.execute("PRAGMA optimize")
            cursor.execute("PRAGMA analysis_limit = 0")
        cursor.execute("PRAGMA auto_vacuum")
        if cursor.fetchone()[0] != SQLITE_AUTO_VACUUM_INCREMENTAL:
            return None
        cursor.execute("PRAGMA page_size")
        page_size = cursor.fetchone()[0]
        cursor.execute("PRAGMA page_count")
        pages_before = cursor.fetchone()[0]
        step = VACUUM_FIRST_STEP_PAGES
        while deadline is None or time.monotonic() < deadline:
            cursor.execute("PRAGMA freelist_count")
            free = cursor.fetchone()[0]
            if not free:
                break
            began = time.monotonic()
            with write_serialized():
                # One statement frees one page per step: executescript steps it to the end
                # (a cursor's execute would stop after the first page).
                cursor.connection.executescript(f"PRAGMA incremental_vacuum({min(free, step)})")
            took = time.monotonic() - began
            # Moving a page costs more the larger the file: size the next step to hold the
            # write lock about as long as a delete batch.
            step = max(16, min(4096, int(step * LOCK_TARGET_SECONDS / max(took, 1e-4))))
            time.sleep(took * settings.SIGNET_PRUNE_PAUSE_RATIO)
            cursor.execute("PRAGMA freelist_count")
            if cursor.fetchone()[0] >= free:  # nothing more to hand back
                break
        cursor.execute("PRAGMA page_count")
        pages_after = cursor.fetchone()[0]
        # Copy the shrunk file from the write-ahead log into place, if no reader holds it.
        cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
    return int((pages_before - pages_after) * page_size)


SQLITE_AUTO_VACUUM_INCREMENTAL = 2


def sqlite_prepare() -> str:
    """Make the SQLite file return freed space on request (incremental auto-vacuum).

    A new file gets it from its first connection (settings); a file made before that needs
    one full ``VACUUM`` to switch, done here once. Returns what was done, for the log.
    """
    if connection.vendor != "sqlite":
        return ""
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA auto_vacuum")
        if cursor.fetchone()[0] == SQLITE_AUTO_VACUUM_INCREMENTAL:
            return ""
        cursor.execute(f"PRAGMA auto_vacuum = {SQLITE_AUTO_VACUUM_INCREMENTAL}")
        with write_serialized():
            cursor.execute("VACUUM")
    return "switched the SQLite file to incremental auto-vacuum (one VACUUM)"
