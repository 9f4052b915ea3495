"""Django's PostgreSQL backend, health-checking only the connections that sat idle, with a
cursor that binds parameters on the server for the hook path's prepared statements.

With ``CONN_HEALTH_CHECKS`` Django sends ``SELECT 1`` before the first query of every
request that reuses a connection: on the hook path that is one round trip in three,
measured at 140-180 us of wall time and 80-100 us of the worker's CPU each (a whole
UserPromptSubmit on PostgreSQL + Redis takes 1.5-2 ms of CPU). Here a connection last used,
by a request or task that met no error, less than ``RECENTLY_ANSWERED_SECONDS`` ago is
reused unchecked. If it broke since, the request's query fails (503 to the API, which the
hook client keeps and replays), Django closes the connection at the end of that request,
and the next one connects afresh. A connection idle for longer, which is what a database
restart or a dropped link leaves behind, is checked as before.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from django.db.backends.postgresql import base
from django.db.backends.postgresql.psycopg_any import register_tzloader
from psycopg.pq import Format

RECENTLY_ANSWERED_SECONDS = 1.0


class DatabaseWrapper(base.DatabaseWrapper):
    # monotonic time of the last use of this connection in a request (or task) that ended
    # without an error
    answered_at: float = float("-inf")
    # monotonic time of its last use since the last request boundary, None when unused
    used_at: float | None = None
    health_check_done: bool  # Django's: the check of this request is settled

    def close_if_unusable_or_obsolete(self) -> None:
        # Django calls this at request boundaries: as each request starts and ends, while
        # django-q2 calls it only before each task. Either way, what was used since the last
        # call without an error answered at the time it was used, not now.
        used_at, self.used_at = self.used_at, None
        failed = self.errors_occurred
        super().close_if_unusable_or_obsolete()
        if used_at is not None and not failed and self.connection is not None:
            self.answered_at = used_at

    def close_if_health_check_failed(self) -> None:
        # Runs before each cursor is made: the connection is about to be used.
        now = time.monotonic()
        recent = now - self.answered_at < RECENTLY_ANSWERED_SECONDS
        if self.connection is not None and not self.health_check_done and recent:
            self.health_check_done = True
        else:
            super().close_if_health_check_failed()
        self.used_at = now

    def binding_cursor(self) -> psycopg.Cursor[Any]:
        """A cursor on this connection that sends parameters apart from the SQL, so that a
        statement it runs ``prepare_threshold`` times is prepared (``services/statements.py``).
        Django's cursors quote parameters into the SQL, which never prepares. Made as
        ``create_cursor`` makes Django's: the connection's time zone for the values read."""
        assert self.connection is not None
        cursor: psycopg.Cursor[Any] = psycopg.Cursor(self.connection)
        loader = self.connection.adapters.get_loader(base.TIMESTAMPTZ_OID, Format.TEXT)
        if self.timezone != getattr(loader, "timezone", None):
            register_tzloader(self.timezone, cursor)
        return cursor
