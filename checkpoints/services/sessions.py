"""Session rows: found or created, and locked for the writer's transaction; or read without
a lock and written back only if nobody wrote them in between (the prompt hot path)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, connections, router, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field

from checkpoints.models import Session
from checkpoints.services.locks import write_serialized
from checkpoints.services.projects import project_identify


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
    fields: Sequence[str] = (),
) -> Session:
    """The owner's session ``session_key``, locked for this transaction; created on first sight.

    ``fields`` narrows what is loaded of an existing row (the hot path reads few columns).
    Must run inside a transaction: the lock lasts until it commits.
    """
    locked = Session.objects.select_for_update()
    if fields:
        locked = locked.only(*fields)
    try:
        session = locked.get(owner=owner, session_key=session_key)
    except Session.DoesNotExist:
        pass
    else:
        session.owner = owner  # already loaded: spares a query wherever it is used
        return session
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
    try:
        with transaction.atomic():
            return Session.objects.create(
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
    except IntegrityError:  # another worker created it first
        return Session.objects.select_for_update().get(owner=owner, session_key=session_key)


# --- Optimistic read and write-back ---------------------------------------------------------
# Two statements built once per database and field list, with no query compilation per call:
# the hot path's SELECT (no lock) and its UPDATE, which only applies when ``row_version`` is
# still the one read. Whoever wrote in between (another worker's prompt, a checkpoint flush,
# the idle close) raised it: the UPDATE then changes nothing and the caller starts over.

Converter = Callable[[Any, Any, BaseDatabaseWrapper], Any]


@cache
def _fields(names: tuple[str, ...]) -> tuple[Field[Any, Any], ...]:
    """The fields named, in the model's order (the order ``Model.from_db`` takes values in)."""
    fields = Session._meta.concrete_fields
    chosen = tuple(field for field in fields if field.attname in names or field.name in names)
    assert len(chosen) == len(set(names)), f"not all are columns of a session: {names}"
    return chosen


def _column(field: Field[Any, Any]) -> str:
    column = field.column
    assert column is not None  # a concrete field of the table
    return column


@cache
def _read_statement(alias: str, names: tuple[str, ...]) -> tuple[str, tuple[Any, ...]]:
    connection = connections[alias]
    quote = connection.ops.quote_name
    fields = _fields(names)
    columns = ", ".join(quote(_column(field)) for field in fields)
    sql = (
        f"SELECT {columns} FROM {quote(Session._meta.db_table)} "  # noqa: S608
        f"WHERE {quote('owner_id')} = %s AND {quote('session_key')} = %s"
    )
    # What the ORM would apply to each column's raw value: the backend's, then the field's.
    converters = tuple(
        tuple(
            connection.ops.get_db_converters(field.cached_col)
            + field.cached_col.get_db_converters(connection)
        )
        for field in fields
    )
    return sql, converters


@cache
def _swap_statement(alias: str, names: tuple[str, ...]) -> str:
    quote = connections[alias].ops.quote_name
    assignments = ", ".join(f"{quote(_column(field))} = %s" for field in _fields(names))
    version = quote("row_version")
    return (
        f"UPDATE {quote(Session._meta.db_table)} SET {assignments}, "  # noqa: S608
        f"{version} = {version} + 1 WHERE {quote('id')} = %s AND {version} = %s"
    )


def session_read(*, owner: User, session_key: str, fields: Sequence[str]) -> Session | None:
    """The owner's session ``session_key`` with only ``fields`` loaded (they must include
    ``id`` and ``row_version``), read without a lock; None when there is none yet."""
    alias = router.db_for_read(Session) or "default"
    names = tuple(fields)
    sql, converters = _read_statement(alias, names)
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute(sql, [owner.pk, session_key])
        row = cursor.fetchone()
    if row is None:
        return None
    values = []
    for field, value, field_converters in zip(_fields(names), row, converters, strict=True):
        for convert in field_converters:
            value = convert(value, field.cached_col, connection)
        values.append(value)
    session = Session.from_db(alias, [field.attname for field in _fields(names)], values)
    session.owner = owner  # already loaded: spares a query wherever it is used
    return session


def session_swap(*, session: Session, fields: Sequence[str]) -> bool:
    """Write ``fields`` of ``session`` (read by ``session_read``) back in one UPDATE, if no
    one wrote the row since it was read; True when it was written.

    ``id``, ``owner_id`` and ``row_version`` are not written. The row's new version is not
    loaded: a session is written back once.
    """
    alias = router.db_for_write(Session) or "default"
    connection = connections[alias]
    names = tuple(name for name in fields if name not in ("id", "owner_id", "row_version"))
    values = [
        field.get_db_prep_save(getattr(session, field.attname), connection)
        for field in _fields(names)
    ]
    # On SQLite, the one statement queues on the writers' lock like every other write.
    with write_serialized(), connection.cursor() as cursor:
        cursor.execute(_swap_statement(alias, names), [*values, session.pk, session.row_version])
        return bool(cursor.rowcount == 1)
