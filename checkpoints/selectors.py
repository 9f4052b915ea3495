"""Reads: the queries views, the API and the admin share. Every read of users' data is
owner-scoped; the retention overview is the service's own (for the admin)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Count, QuerySet
from django_q.models import Schedule

from checkpoints.models import Checkpoint, RetentionRun, Session
from checkpoints.services.schedules import IDLE_CLOSE, PRUNE


def session_queryset(*, owner: User) -> QuerySet[Session]:
    """The owner's sessions with checkpoint and injection counts and the predecessor's key."""
    return (
        Session.objects.filter(owner=owner)
        .select_related("previous_session")
        .annotate(
            checkpoint_total=Count("checkpoints", distinct=True),
            injection_total=Count("injections", distinct=True),
        )
    )


def session_get(*, owner: User, session_key: str) -> Session | None:
    """One of the owner's sessions by key, with its counts; None when it is not theirs."""
    return session_queryset(owner=owner).filter(session_key=session_key).first()


@dataclass(frozen=True)
class CheckpointFilters:
    project: str = ""
    session: str = ""
    harness: str = ""
    trigger: str = ""
    agent: str = ""
    tag: str = ""
    before: datetime | None = None
    after: datetime | None = None
    q: str = ""


def checkpoint_list(*, owner: User, filters: CheckpointFilters) -> QuerySet[Checkpoint]:
    """The owner's checkpoints matching ``filters``, newest first."""
    exact = {
        "project_normalized": filters.project,
        "session_key": filters.session,
        "harness": filters.harness,
        "trigger": filters.trigger,
        "agent_id": filters.agent,
    }
    checkpoints = Checkpoint.objects.filter(
        owner=owner, **{field: value for field, value in exact.items() if value}
    )
    if filters.tag:
        # JSON "contains" has no SQLite implementation, so match the quoted element in the
        # stored JSON text: PostgreSQL prints jsonb unescaped, SQLite holds it ASCII-escaped.
        needle = json.dumps(filters.tag, ensure_ascii=connection.vendor != "postgresql")
        checkpoints = checkpoints.filter(tags__icontains=needle)
    if filters.before:
        checkpoints = checkpoints.filter(created_at__lt=filters.before)
    if filters.after:
        checkpoints = checkpoints.filter(created_at__gt=filters.after)
    if filters.q:
        checkpoints = checkpoints.filter(digest__icontains=filters.q)
    return checkpoints.order_by("-created_at", "-id")


def checkpoints_of_session(*, owner: User, session_key: str) -> QuerySet[Checkpoint]:
    """All of one session's checkpoints, oldest first."""
    return Checkpoint.objects.filter(owner=owner, session_key=session_key).order_by(
        "created_at", "id"
    )


def checkpoint_latest(*, owner: User, session_key: str) -> Checkpoint | None:
    """The newest checkpoint of one of the owner's sessions."""
    return (
        Checkpoint.objects.filter(owner=owner, session_key=session_key)
        .order_by("-created_at", "-id")
        .first()
    )


def checkpoint_get(*, owner: User, session_key: str, checkpoint_id: str) -> Checkpoint | None:
    """One checkpoint, only if it is the owner's and belongs to that session."""
    return Checkpoint.objects.filter(owner=owner, session_key=session_key, id=checkpoint_id).first()


@dataclass(frozen=True)
class RetentionOverview:
    """When the retention tasks run next, and what their last runs did."""

    prune_next_run: datetime | None
    idle_close_next_run: datetime | None
    last_prune: RetentionRun | None
    last_idle_close: RetentionRun | None


def retention_overview() -> RetentionOverview:
    """The schedules' next runs and the latest recorded run of each retention task."""

    def last(kind: str) -> RetentionRun | None:
        return RetentionRun.objects.filter(kind=kind).order_by("-started_at").first()

    return RetentionOverview(
        prune_next_run=schedule_next_run(PRUNE),
        idle_close_next_run=schedule_next_run(IDLE_CLOSE),
        last_prune=last(RetentionRun.Kind.PRUNE),
        last_idle_close=last(RetentionRun.Kind.IDLE_CLOSE),
    )


def schedule_next_run(name: str) -> datetime | None:
    """When the scheduler will next run the schedule ``name`` (None when not registered)."""
    next_run: datetime | None = (
        Schedule.objects.filter(name=name).values_list("next_run", flat=True).first()
    )
    return next_run


def database_size() -> dict[str, int] | None:
    """The database's size in bytes (and, on SQLite, the free space inside the file)."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA page_count")
            pages = cursor.fetchone()[0]
            cursor.execute("PRAGMA freelist_count")
            free = cursor.fetchone()[0]
            cursor.execute("PRAGMA page_size")
            size = cursor.fetchone()[0]
            return {"bytes": pages * size, "free_bytes": free * size}
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_database_size(current_database())")
            return {"bytes": int(cursor.fetchone()[0])}
    return None
