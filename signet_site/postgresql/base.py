"""Django's PostgreSQL backend, health-checking only the connections that sat idle, and
running the hook path's statements on libpq, bound and prepared on the server.

With ``CONN_HEALTH_CHECKS`` Django sends ``SELECT 1`` before the first query of every
request that reuses a connection: on the hook path that is one round trip in three,
measured at 140-180 us of wall time and 80-100 us of the worker's CPU each (a whole
UserPromptSubmit on PostgreSQL + Redis takes 1.5-2 ms of CPU). Here a connection last used,
by a request or task that met no error, less than ``RECENTLY_ANSWERED_SECONDS`` ago is
reused unchecked. If it broke since, the request's query fails (503 to the API, which the
hook client keeps and replays), Django closes the connection at the end of that request,
and the next one connects afresh. A connection idle for longer, which is what a database
restart or a dropped link leaves behind, is checked as before.

The hook path's statements (``binding_run``) go to libpq through psycopg's own wrapper of
it (``connection.pgconn``), their parameters dumped and their rows loaded by psycopg's
adapters, as its cursor does. What the cursor adds on top (a generator driving each query,
its prepared statements' bookkeeping) was about half of a statement's cost in the worker:
the session's read took 227 us of CPU through the cursor, 107-130 us through libpq
(measured in one process, interleaved).
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Sequence
from contextlib import suppress
from datetime import tzinfo
from functools import lru_cache
from typing import Any

import psycopg
from django.conf import settings
from django.db.backends.postgresql import base
from django.db.backends.postgresql.psycopg_any import register_tzloader
from psycopg import errors, pq
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import Format

RECENTLY_ANSWERED_SECONDS = 1.0


class DatabaseWrapper(base.DatabaseWrapper):
    # monotonic time of the last use of this connection in a request (or task) that ended
    # without an error
    answered_at: float = float("-inf")
    # monotonic time of its last use since the last request boundary, None when unused
    used_at: float | None = None
    health_check_done: bool  # Django's: the check of this request is settled
    _bound: BoundStatements | None = None  # of the current connection: binding_run's

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
        ``SIGNET_PREPARE_THRESHOLD`` times on this connection it is prepared
        (``BoundStatements``). Django's cursors quote parameters into the SQL, which never
        prepares, and Django leaves the connection's ``prepare_threshold`` unset (for
        poolers that keep no prepared statements): Django's queries are never prepared. A
        statement that begins a transaction Django opened runs on psycopg's cursor, which
        begins it, with ``prepare_threshold`` set for the length of that statement.

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
        if (
            not connection.autocommit
            and connection.pgconn.transaction_status == pq.TransactionStatus.IDLE
        ):
            # Django opened a transaction that psycopg begins with its first statement: that
            # one goes through psycopg's cursor.
            return self._cursor_run(sql, params, returns_rows=returns_rows)
        bound = self._bound
        if bound is None or bound.connection is not connection:
            bound = self._bound = BoundStatements(connection, timezone=self.timezone)
        return bound.run(sql, params, threshold=settings.SIGNET_PREPARE_THRESHOLD)

    def _cursor_run(
        self, sql: str, params: Sequence[Any], *, returns_rows: bool
    ) -> tuple[list[tuple[Any, ...]], int]:
        connection = self.connection
        assert connection is not None
        cursor: psycopg.Cursor[Any] = psycopg.Cursor(connection)
        _timezone_use(cursor, self.timezone)
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


def _timezone_use(cursor: psycopg.Cursor[Any], timezone: tzinfo | None) -> None:
    """Made as ``create_cursor`` makes Django's: the connection's time zone for values read."""
    loader = cursor.adapters.get_loader(base.TIMESTAMPTZ_OID, Format.TEXT)
    if timezone != getattr(loader, "timezone", None):
        register_tzloader(timezone, cursor)


# How many statements a connection keeps prepared (each swap of a session's changed columns
# is a statement of its own); past it, new ones run unprepared.
PREPARED_MAX = 100
RUNS_KEPT = 1000  # statements counted towards being prepared, at most
_PLACEHOLDER = re.compile(r"%s|%%")


@lru_cache(maxsize=1024)
def _numbered(sql: str) -> bytes:
    """``sql`` with libpq's ``$1, $2 …`` for its ``%s`` placeholders, and ``%`` for ``%%``."""
    numbers = itertools.count(1)
    return _PLACEHOLDER.sub(
        lambda found: "%" if found.group() == "%%" else f"${next(numbers)}", sql
    ).encode()


class BoundStatements:
    """The hook path's statements on one psycopg connection, run through libpq.

    Parameters are sent in text with no type: PostgreSQL takes each one's type from where it
    stands (a column compared or assigned), so a statement is prepared once whatever the
    values. One that has run ``threshold`` times here is prepared (``PREPARE`` on the
    protocol, under a name of ours: psycopg's own are ``_pg3_*``); 0 never prepares.
    Prepared statements outlive a rollback, and go with the connection.
    """

    def __init__(self, connection: psycopg.Connection[Any], *, timezone: tzinfo | None) -> None:
        self.connection = connection
        self.pgconn = connection.pgconn
        # The adapters values are dumped and loaded with: the connection's (Django's
        # loaders among them), and the time zone its cursors read in.
        self.context: psycopg.Cursor[Any] = psycopg.Cursor(connection)
        _timezone_use(self.context, timezone)
        self.encoding = connection.info.encoding
        self.runs: dict[bytes, int] = {}
        self.prepared: dict[bytes, bytes] = {}

    def run(
        self, sql: str, params: Sequence[Any], *, threshold: int
    ) -> tuple[list[tuple[Any, ...]], int]:
        query = _numbered(sql)
        transformer = Transformer(self.context)
        values = transformer.dump_sequence(params, [PyFormat.TEXT] * len(params))
        name = self.prepared.get(query) or self._prepare(query, threshold=threshold)
        if name is None:
            result = self.pgconn.exec_params(query, values)
        else:
            # None is NULL, as in exec_params (psycopg's type hints leave it out here).
            result = self.pgconn.exec_prepared(name, values)  # type: ignore[arg-type]
        self._check(result)
        if result.status != pq.ExecStatus.TUPLES_OK:
            return [], result.command_tuples or 0
        transformer.set_pgresult(result)
        return transformer.load_rows(0, result.ntuples, tuple), result.ntuples

    def _prepare(self, query: bytes, *, threshold: int) -> bytes | None:
        """The name ``query`` is prepared under, once it has run ``threshold`` times."""
        if not threshold or len(self.prepared) >= PREPARED_MAX:
            return None
        if len(self.runs) >= RUNS_KEPT:  # statements seen once and never again
            self.runs.clear()
        runs = self.runs[query] = self.runs.get(query, 0) + 1
        if runs <= threshold:
            return None
        name = f"signet_{len(self.prepared) + 1}".encode()
        self._check(self.pgconn.prepare(name, query))
        self.prepared[query] = name
        del self.runs[query]
        return name

    def _check(self, result: pq.abc.PGresult) -> None:
        """Raise the psycopg error of a result that failed, as psycopg's cursor would."""
        if result.status in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
            return
        if self.pgconn.status == pq.ConnStatus.BAD:  # the server went away
            raise psycopg.OperationalError(
                self.pgconn.get_error_message(self.encoding) or "the connection was lost"
            )
        raise errors.error_from_result(result, encoding=self.encoding)
