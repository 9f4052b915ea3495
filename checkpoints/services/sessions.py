"""Session rows: found or created, and locked for the writer's transaction; or, on the prompt
hot path, read without a lock and written back only if nobody wrote them in between, or
made in memory and inserted unless someone else inserted them first."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from copy import copy
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from django.contrib.auth.models import User
from django.db import DatabaseError, IntegrityError, connections, router, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DEFERRED, Field, JSONField, signals
from django.db.models.base import ModelState

from checkpoints.models import Session
from checkpoints.services.locks import write_serialized
from checkpoints.services.projects import project_identify
from checkpoints.services.statements import (
    Statement,
    statement_build,
    statement_run,
    statement_values,
)

# A session's last activity is kept to the minute: an event moves it only once it is a
# minute old (or in the future). Two indexes sort sessions by it, and PostgreSQL can write
# an UPDATE that changes no indexed column in place (a HOT update: no new index entries,
# and the old row version cleared from its page without waiting for VACUUM). So the events
# of a busy session, seconds apart, rewrite its row without adding to its indexes:
# measured on PostgreSQL, a prompt's read and write-back took 415-500 us of the server's
# CPU with the time written each time (and the table and its indexes grew with every
# prompt), 290-375 us without.
ACTIVITY_GRAIN = timedelta(minutes=1)


def activity_mark(*, session: Session, now: datetime, replayed: bool = False) -> None:
    """Record activity at ``now`` on ``session`` (in memory), to ``ACTIVITY_GRAIN``.

    A replayed event (one the client's outbox held) never moves the time back.
    """
    last = session.last_activity_at
    if replayed:
        now = max(now, last)
    if not last <= now < last + ACTIVITY_GRAIN:
        session.last_activity_at = now


@dataclass(frozen=True)
class SessionSeed:
    """What a session is created with when its first event (or capture) arrives."""

    harness: str
    cwd: str = ""
    client_project: str = ""
    client_git_root: str = ""
    previous_session_key: str = ""
    model: str = ""
    git_branch: str = ""
    git_head: str = ""
    transcript_path: str = ""
    # A first prompt with no SessionStart before it: that hook did not get through (or is not
    # installed), so the prompt carries the recovery context.
    recovery_due: bool = False


def session_lock(
    *,
    owner: User,
    session_key: str,
    seed: SessionSeed,
    now: datetime,
) -> Session:
    """The owner's session ``session_key``, locked for this transaction; created on first sight.

    Must run inside a transaction: the lock lasts until it commits.
    """
    session = _locked(owner=owner, session_key=session_key)
    if session is not None:
        return session
    created = session_new(owner=owner, session_key=session_key, seed=seed, now=now)
    try:
        with transaction.atomic():
            _insert(created)
    except IntegrityError:  # another worker created it first
        session = _locked(owner=owner, session_key=session_key)
        assert session is not None  # the row another worker has just inserted
        return session
    return created


def _locked(*, owner: User, session_key: str) -> Session | None:
    """The owner's session ``session_key``, whole and locked (``_read_statement``); None when
    there is none. As ``select_for_update().get()`` would load it, less the query's
    compilation: about half a millisecond of Python on every event but a live prompt."""
    alias = router.db_for_write(Session) or "default"
    connection = connections[alias]
    statement = _read_statement(alias, SESSION_COLUMNS, lock=True)
    rows = statement_run(
        statement=statement, params=[owner.pk, session_key], connection=connection
    ).rows
    if not rows:
        return None
    session, _ = _loaded(alias=alias, connection=connection, names=SESSION_COLUMNS, row=rows[0])
    session.owner = owner  # already loaded: spares a query wherever it is used
    return session


def session_insert(*, session: Session, together: Callable[[], None] | None = None) -> bool:
    """Insert the new ``session`` (``session_new``), and the rows ``together`` writes, which
    belong to it, in one transaction; True when written. False, with nothing written, when
    one of them cannot be: the owner has a session of that key already (another worker
    created it first), or a row refers to one that has gone since it was read.

    Its project was identified when it was made, so on SQLite the writers' lock is held for
    the INSERTs alone (``engine._prompt_unlocked``).
    With nothing to write beside it, and no transaction under way, the INSERT is its own
    transaction: on PostgreSQL a session's first prompt then makes one round trip for it
    instead of three (BEGIN, INSERT, COMMIT).
    """

    def insert() -> bool:
        _insert(session)
        return True

    alias = router.db_for_write(Session) or "default"
    if together is None and not connections[alias].in_atomic_block:
        try:
            with write_serialized():
                return insert()
        except IntegrityError:  # another worker created it first
            return False
    return _written_together(insert, together)


def _insert(session: Session) -> None:
    """Insert the new ``session`` as ``save(force_insert=True)`` would: every column but the
    id, which the database numbers and the INSERT returns, then the instance marked as saved
    to its database. Built once per database (``_insert_statement``): the ORM compiled the
    45-column INSERT at every session's first event, about 0.3 ms of Python. Where the
    database cannot return the new id from an INSERT, or a receiver listens for a session's
    save signals (sessions have none), the ORM inserts it."""
    alias = router.db_for_write(Session) or "default"
    connection = connections[alias]
    if not connection.features.can_return_columns_from_insert or _save_heard():
        session.save(force_insert=True, using=alias)
        return
    fields = _insert_fields()
    values = [field.get_db_prep_save(field.pre_save(session, True), connection) for field in fields]
    statement = _insert_statement(alias)
    result = statement_run(statement=statement, params=values, connection=connection)
    session.pk = result.rows[0][0]
    session._state.adding = False
    session._state.db = alias


def _save_heard() -> bool:
    return signals.pre_save.has_listeners(Session) or signals.post_save.has_listeners(Session)


@cache
def _insert_fields() -> tuple[Field[Any, Any], ...]:
    return tuple(field for field in Session._meta.concrete_fields if not field.primary_key)


@cache
def _insert_statement(alias: str) -> Statement:
    quote = connections[alias].ops.quote_name
    columns = ", ".join(quote(_column(field)) for field in _insert_fields())
    places = ", ".join(["%s"] * len(_insert_fields()))
    return statement_build(
        alias=alias,
        sql=(
            f"INSERT INTO {quote(Session._meta.db_table)} ({columns}) "  # noqa: S608
            f"VALUES ({places}) RETURNING {quote('id')}"
        ),
        returns_rows=True,
    )


def session_new(*, owner: User, session_key: str, seed: SessionSeed, now: datetime) -> Session:
    """A new session row for ``seed``, its project identified, not saved yet: no checkpoint
    can belong to it (``Session.created_now``)."""
    identity = project_identify(
        owner=owner,
        cwd=seed.cwd,
        client_project=seed.client_project,
        client_git_root=seed.client_git_root,
    )
    previous = None
    if seed.previous_session_key:
        previous = Session.objects.filter(
            owner=owner, session_key=seed.previous_session_key
        ).first()
    session = Session(
        owner=owner,
        session_key=session_key,
        harness=seed.harness,
        project=identity.project,
        project_normalized=identity.project_normalized,
        git_root=identity.git_root,
        previous_session=previous,
        started_at=now,
        last_activity_at=now,
        model=seed.model[:128],
        git_branch=seed.git_branch[:255],
        git_head=seed.git_head[:64],
        transcript_path=seed.transcript_path[:4096],
        recovery_due=seed.recovery_due,
    )
    session.created_now = True
    return session


# --- Optimistic read and write-back ---------------------------------------------------------
# The hot path's two statements, built once per database and field list, with no query
# compilation per call: a SELECT without a lock, and an UPDATE of the columns that changed,
# which applies only while ``row_version`` is still the one read. Whoever wrote in between
# (another worker's prompt, a checkpoint flush, the idle close) raised it: the UPDATE then
# changes nothing and the caller starts over.


# The row's identity, and its version (raised by the UPDATE itself).
_NEVER_SWAPPED = frozenset({"id", "owner_id", "row_version"})


@dataclass
class SessionRead:
    """A session row read without a lock, and its loaded values as they were read."""

    session: Session
    values: dict[str, Any]  # attname -> value (lists and dicts copied, one level deep)


@cache
def _fields(names: tuple[str, ...]) -> tuple[Field[Any, Any], ...]:
    """The fields named, in the model's order (the order ``Model.from_db`` takes values in)."""
    fields = Session._meta.concrete_fields
    chosen = tuple(field for field in fields if field.attname in names or field.name in names)
    assert len(chosen) == len(set(names)), f"not all are columns of a session: {names}"
    return chosen


_CONCRETE_ATTNAMES = [field.attname for field in Session._meta.concrete_fields]
# Every column of a session, by attribute name: what the locked path reads, and a prompt
# whose periodic checkpoint is due (the checkpoint takes the whole row).
SESSION_COLUMNS = tuple(_CONCRETE_ATTNAMES)
_JSON_ATTNAMES = frozenset(
    field.attname for field in Session._meta.concrete_fields if isinstance(field, JSONField)
)


@cache
def _positions(names: tuple[str, ...]) -> tuple[int, ...]:
    """Where each of ``_fields(names)`` stands among the model's concrete fields."""
    return tuple(_CONCRETE_ATTNAMES.index(field.attname) for field in _fields(names))


def _column(field: Field[Any, Any]) -> str:
    column = field.column
    assert column is not None  # a concrete field of the table
    return column


@cache
def _read_statement(alias: str, names: tuple[str, ...], *, lock: bool = False) -> Statement:
    """The columns ``names`` of an owner's session; ``lock``: its row locked until the
    transaction ends, where the database locks rows (SQLite's writers take turns instead:
    ``write_serialized``)."""
    connection = connections[alias]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(_column(field)) for field in _fields(names))
    locking = " FOR UPDATE" if lock and connection.features.has_select_for_update else ""
    return statement_build(
        alias=alias,
        sql=(
            f"SELECT {columns} FROM {quote(Session._meta.db_table)} "  # noqa: S608
            f"WHERE {quote('owner_id')} = %s AND {quote('session_key')} = %s{locking}"
        ),
        returns_rows=True,
    )


def _loaded(
    *, alias: str, connection: BaseDatabaseWrapper, names: tuple[str, ...], row: Sequence[Any]
) -> tuple[Session, dict[str, Any]]:
    """The session of ``row`` (the columns ``names``, read by ``_read_statement``), the
    others deferred as ``Model.from_db`` leaves them, and its values by attribute name.

    Made as ``from_db`` makes it, less ``Model.__init__``'s walk over every field and its
    two signals: the instance gets the loaded values and a state saying it came from
    ``alias``. Sessions have no ``pre_init``/``post_init`` receivers (``_plain_init``); were
    one connected, the instance would be made by ``from_db`` instead.
    """
    values = statement_values(connection=connection, fields=_fields(names), row=row)
    if not _plain_init():
        row_values: list[Any] = [DEFERRED] * len(_CONCRETE_ATTNAMES)
        for position, attname in zip(_positions(names), values, strict=True):
            row_values[position] = values[attname]
        return Session.from_db(alias, _CONCRETE_ATTNAMES, row_values), values
    session = Session.__new__(Session)
    state = ModelState()
    state.adding = False
    state.db = alias
    session._state = state
    session.__dict__.update(values)  # as ``__init__`` sets them: no descriptor runs on new
    return session, values


def _plain_init() -> bool:
    """Whether a session can be made without ``Model.__init__``: no receiver listens for
    the signals it sends."""
    return not (signals.pre_init.has_listeners(Session) or signals.post_init.has_listeners(Session))


@cache
def _swappable(names: tuple[str, ...]) -> tuple[Field[Any, Any], ...]:
    """The fields of ``names`` a write-back may change (not the row's identity or version)."""
    return tuple(field for field in _fields(names) if field.attname not in _NEVER_SWAPPED)


@cache
def _write_statement(
    alias: str, fields: tuple[Field[Any, Any], ...], *, if_version: bool
) -> Statement:
    """``UPDATE`` of ``fields`` of the session of an id, raising its version; ``if_version``:
    only while its version is the one given after the id (``session_swap``; a locked row's
    write needs no such check)."""
    quote = connections[alias].ops.quote_name
    version = quote("row_version")
    assignments = [f"{quote(_column(field))} = %s" for field in fields]
    assignments.append(f"{version} = {version} + 1")
    condition = f"{quote('id')} = %s" + (f" AND {version} = %s" if if_version else "")
    return statement_build(
        alias=alias,
        sql=(
            f"UPDATE {quote(Session._meta.db_table)} SET {', '.join(assignments)} "  # noqa: S608
            f"WHERE {condition}"
        ),
        returns_rows=False,
    )


def session_read(*, owner: User, session_key: str, fields: Sequence[str]) -> SessionRead | None:
    """The owner's session ``session_key`` with only ``fields`` loaded (they must include
    ``id`` and ``row_version``), read without a lock; None when there is none yet."""
    alias = router.db_for_read(Session) or "default"
    names = tuple(fields)
    connection = connections[alias]
    result = statement_run(
        statement=_read_statement(alias, names),
        params=[owner.pk, session_key],
        connection=connection,
    )
    if not result.rows:
        return None
    session, values = _loaded(alias=alias, connection=connection, names=names, row=result.rows[0])
    session.owner = owner  # already loaded: spares a query wherever it is used
    # The session's lists are the caller's to change: compare against copies.
    return SessionRead(session=session, values=_copied(values))


def session_swap(*, read: SessionRead, together: Callable[[], None] | None = None) -> bool:
    """Write back the loaded columns of ``read.session`` that changed since it was read, in
    one UPDATE, if no one wrote the row since, with the rows ``together`` writes (which
    belong to it) in the same transaction; True when written. False, with nothing written,
    when the row changed since it was read, or one of the new rows refers to one that has
    gone since.

    What to write is worked out before the writers' lock is taken. The row's new version is
    not loaded: a session read is written back once.
    """
    alias = router.db_for_write(Session) or "default"
    connection = connections[alias]
    session = read.session
    loaded = session.__dict__  # every column read is there: no descriptor to go through
    changed = tuple(
        field
        for field in _swappable(tuple(read.values))
        if loaded[field.attname] != read.values[field.attname]
    )
    values = [field.get_db_prep_save(loaded[field.attname], connection) for field in changed]
    statement = _write_statement(alias, changed, if_version=True)
    params = [*values, session.pk, read.values["row_version"]]

    def update() -> bool:
        return (
            statement_run(statement=statement, params=params, connection=connection).rowcount == 1
        )

    if together is None:
        # On SQLite, the one statement queues on the writers' lock like every other write.
        with write_serialized():
            return update()
    return _written_together(update, together)


def _written_together(write: Callable[[], bool], together: Callable[[], None] | None) -> bool:
    """Run ``write`` (the session row's own; False when it did not apply), then ``together``
    (the rows that belong to the session), in one transaction on the writers' lock. True
    when all were written; False, with nothing written, when ``write`` did not apply or a
    row breaks a constraint (checked at COMMIT: a reference to a row that has gone since)."""
    try:
        with write_serialized(), transaction.atomic():
            if not write():
                return False
            if together is not None:
                together()
    except IntegrityError:
        return False
    return True


# --- Locked writes: only what changed --------------------------------------------------------


def _copied(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with their lists and dicts copied, to compare the session against later.
    (Shallow: the engine replaces the items of a list, it does not change them in place.)
    Only a JSON column holds either."""
    copied = dict(values)
    for name in _JSON_ATTNAMES.intersection(values):
        value = copied[name]
        if isinstance(value, list | dict):
            copied[name] = copy(value)
    return copied


def session_values(session: Session) -> dict[str, Any]:
    """The loaded column values of ``session``, copied, for ``session_save_changed`` to tell
    which changed."""
    loaded = session.__dict__
    return _copied({name: loaded[name] for name in _CONCRETE_ATTNAMES if name in loaded})


def session_save_changed(*, session: Session, before: dict[str, Any]) -> None:
    """Save the locked ``session``'s columns that differ from ``before``, and any loaded since
    (``session_values`` taken when it was locked): an event changes a few of its ~45
    columns, and writing back the rest, its lists among them, is most of the UPDATE's cost.

    The UPDATE is built once per set of columns, as ``Session.save(update_fields=…)`` would
    write it (the row's version raised, and left unloaded on ``session``), without the
    ORM's compilation at every call: about half a millisecond of Python.
    """
    loaded = session.__dict__
    changed = tuple(
        name
        for name in _CONCRETE_ATTNAMES
        if name in loaded
        and name not in _NEVER_SWAPPED
        and (name not in before or loaded[name] != before[name])
    )
    if not changed:
        return
    alias = session._state.db or router.db_for_write(Session) or "default"
    connection = connections[alias]
    fields = _fields(changed)
    values = [field.get_db_prep_save(loaded[field.attname], connection) for field in fields]
    statement = _write_statement(alias, fields, if_version=False)
    result = statement_run(statement=statement, params=[*values, session.pk], connection=connection)
    if result.rowcount != 1:  # as the ORM would say it (the row is this transaction's)
        raise DatabaseError("Save with update_fields did not affect any rows.")
    loaded.pop("row_version", None)
