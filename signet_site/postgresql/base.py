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
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

import psycopg
from django.conf import settings
from django.db.backends.postgresql import base
from django.db.backends.postgresql.psycopg_any import register_tzloader
from psycopg import errors
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

    def binding_run(
        self, sql: str, params: Sequence[Any], *, returns_rows: bool
    ) -> tuple[list[tuple[Any, ...]], int]:
        """Run one of the hook path's statements (``services/statements.py``): its rows and
        its row count.

        Its parameters are sent apart from the SQL, so that once the statement has run
        ``SIGNET_PREPARE_THRESHOLD`` times on this connection it is prepared. Django's
        cursors quote parameters into the SQL, which never prepares, and Django leaves the
        connection's ``prepare_threshold`` unset (for poolers that keep no prepared
        statements): it is set here for the length of one statement, so Django's queries
        are never counted towards preparing, nor kept in psycopg's list of candidates.

        A prepared statement whose table changed since (a migration run by another host)
        is refused by PostgreSQL on this connection from then on. Outside a transaction the
        connection is then replaced and the statement run again; inside one, which has
        failed, the connection is replaced once the request ends and the error is an
        ``OperationalError`` (503: the hook client replays the event).
        """
        try:
            return self._binding_run(sql, params, returns_rows=returns_rows)
        except (errors.FeatureNotSupported, errors.InvalidSqlStatementName) as exc:
            if self.in_atomic_block:
                self.close_at = 0.0  # Django closes it at the end of the request
                raise psycopg.OperationalError(
                    f"a prepared statement no longer fits its table: {exc}"
                ) from exc
            self.close()
            self.connect()
            return self._binding_run(sql, params, returns_rows=returns_rows)

    def _binding_run(
        self, sql: str, params: Sequence[Any], *, returns_rows: bool
    ) -> tuple[list[tuple[Any, ...]], int]:
        connection = self.connection
        assert connection is not None
        cursor: psycopg.Cursor[Any] = psycopg.Cursor(connection)
        # Made as ``create_cursor`` makes Django's: the connection's time zone for values read.
        loader = connection.adapters.get_loader(base.TIMESTAMPTZ_OID, Format.TEXT)
        if self.timezone != getattr(loader, "timezone", None):
            register_tzloader(self.timezone, cursor)
        threshold = settings.SIGNET_PREPARE_THRESHOLD or None
        kept, connection.prepare_threshold = connection.prepare_threshold, threshold
        try:
            cursor.execute(sql, params)
            return (cursor.fetchall() if returns_rows else []), cursor.rowcount
        finally:
            connection.prepare_threshold = kept
            # As Django's cursor does: the error that propagates is the statement's, if any.
            with suppress(psycopg.Error):
                cursor.close()
