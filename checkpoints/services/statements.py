"""The hook path's pre-built SQL statements, run on the database driver's own cursor.

Each UserPromptSubmit runs up to three statements built once, with no ORM compilation: the
throttle's upsert where the counters are database rows (PostgreSQL without Redis), the
session's read and its write-back (``throttling.py``, ``sessions.py``); a checkpoint it
writes looks up its parent and the ids past the per-session cap so too (``store.py``), and
``statement_values`` loads what they read as the ORM would. So do the other events' reads
and writes of a session (its locked read, the write of its changed columns, a new one's
INSERT: ``sessions.py``), and a session's first event's look-ups (its project's git
top-level, the checkpoint it recovers from: ``projects.py``, ``recovery.py``): the ORM
compiled each at every call, a third to a whole millisecond of Python. Through Django's
cursor each cost as much again as the statement itself on SQLite (measured: a 23 us upsert
took 40 us): a cursor wrapper, SQLite's cursor subclass that rewrites ``%s`` into ``?`` at
every call, the execute wrappers. ``statement_run`` keeps what of that matters and skips
the rest:

- the connection is health-checked and opened as for any query, and a transaction that
  already failed refuses the statement (``TransactionManagementError``);
- a driver error becomes Django's (``OperationalError``, ``IntegrityError`` …), and marks the
  connection so Django checks it at the end of the request, and closes it if unusable;
- the statement's placeholders are turned into the driver's once, when it is built;
- whether it returns rows is said when it is built: psycopg makes a ``Column`` object per
  column each time ``cursor.description`` is asked (measured: 50 us for the session's read).

On PostgreSQL the parameters are bound by the server, not quoted into the SQL by psycopg as
Django's cursor does: a statement then is prepared on its connection once it has run
``SIGNET_PREPARE_THRESHOLD`` times there (``DATABASE_PREPARE_THRESHOLD``), and PostgreSQL no
longer parses and plans it at every run (measured: the session's read and write-back cost
PostgreSQL 480 us of CPU unprepared, 300 us prepared). Django's own queries keep
client-side binding, which never prepares (``signet_site/postgresql``: ``binding_run``).

Django's ``execute_wrappers`` (``connection.execute_wrapper``) do not see these statements.

When queries are being logged (``DEBUG``, or a test counting them), a statement runs through
Django's cursor instead, so it is logged and counted as every other query is.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field

_FORMAT = re.compile(r"(?<!%)%s")  # Django's placeholder, not an escaped "%%s"


@dataclass(frozen=True)
class Statement:
    """One SQL statement for one database: in Django's placeholders and in its driver's."""

    alias: str
    sql: str  # with %s placeholders, as Django's cursor takes it
    native: str  # as the driver takes it
    returns_rows: bool  # a SELECT, or a statement with RETURNING


@dataclass(frozen=True)
class StatementResult:
    rows: list[tuple[Any, ...]]  # all of them: SQLite ends (and commits) a statement once read
    rowcount: int


def statement_build(*, alias: str, sql: str, returns_rows: bool) -> Statement:
    """``sql`` (Django's ``%s`` placeholders, no other ``%`` but ``%%``) ready for ``alias``;
    ``returns_rows`` when it is a query or has a RETURNING clause."""
    native = sql
    if connections[alias].vendor == "sqlite":  # the qmark style, as Django's cursor converts
        native = _FORMAT.sub("?", sql).replace("%%", "%")
    return Statement(alias=alias, sql=sql, native=native, returns_rows=returns_rows)


def statement_run(
    *, statement: Statement, params: Sequence[Any], connection: BaseDatabaseWrapper | None = None
) -> StatementResult:
    """Run ``statement`` with ``params``; its rows (if it returns any) and its row count.
    ``connection``: the caller's of ``statement.alias`` if it has it at hand (this thread's,
    looked up otherwise)."""
    if connection is None:
        connection = connections[statement.alias]
    assert connection.alias == statement.alias, "a statement runs on its own database"
    if connection.queries_logged:
        with connection.cursor() as cursor:
            cursor.execute(statement.sql, params)
            rows = cursor.fetchall() if statement.returns_rows else []
            return StatementResult(rows=rows, rowcount=cursor.rowcount)
    # What Django's ``connection.cursor()`` does first.
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        binding_run = getattr(connection, "binding_run", None)
        if binding_run is not None:  # PostgreSQL, ours: binds on the server, and prepares
            rows, rowcount = binding_run(
                statement.native, params, returns_rows=statement.returns_rows
            )
            return StatementResult(rows=rows, rowcount=rowcount)
        if connection.vendor == "sqlite":  # its plain cursor: Django's rewrites each query
            cursor = connection.connection.cursor()
        else:
            cursor = connection.create_cursor()
        try:
            cursor.execute(statement.native, params)
            rows = cursor.fetchall() if statement.returns_rows else []
            return StatementResult(rows=rows, rowcount=cursor.rowcount)
        finally:
            # As Django's cursor does: the error that propagates is the statement's, if any.
            with suppress(connection.Database.Error):  # type: ignore[attr-defined]
                cursor.close()


# What the ORM applies to each column it reads, per connection (the backend's converters are
# its methods) and field list: ``statement_values``.
Converters = tuple[tuple[str, Any, tuple[Any, ...]], ...]
_converters_by_connection: weakref.WeakKeyDictionary[
    BaseDatabaseWrapper, dict[tuple[Field[Any, Any], ...], Converters]
] = weakref.WeakKeyDictionary()


def _converters(connection: BaseDatabaseWrapper, fields: tuple[Field[Any, Any], ...]) -> Converters:
    known = _converters_by_connection.setdefault(connection, {})
    found = known.get(fields)
    if found is None:
        found = known[fields] = tuple(
            (
                field.attname,
                field.cached_col,
                tuple(
                    connection.ops.get_db_converters(field.cached_col)
                    + field.cached_col.get_db_converters(connection)
                ),
            )
            for field in fields
        )
    return found


def statement_values(
    *, connection: BaseDatabaseWrapper, fields: tuple[Field[Any, Any], ...], row: Sequence[Any]
) -> dict[str, Any]:
    """A row a statement read (the columns of ``fields``, in order) as the ORM would load it:
    each value through the backend's converters, then the field's (often none), by
    attribute name."""
    values: dict[str, Any] = {}
    for (attname, column, converters), value in zip(
        _converters(connection, fields), row, strict=True
    ):
        for convert in converters:
            value = convert(value, column, connection)
        values[attname] = value
    return values
