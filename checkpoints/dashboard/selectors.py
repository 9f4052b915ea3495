"""The dashboard's reads. Each takes an ``owner``: a user, or None for every user's data
(offered to superusers only, by ``views.viewer_for``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any, TypeVar

from django.contrib.auth.models import User
from django.db.models import (
    CharField,
    Count,
    F,
    Func,
    Max,
    Model,
    Q,
    QuerySet,
    Subquery,
    Sum,
)

from checkpoints.models import Checkpoint, Injection, Session, Trigger

M = TypeVar("M", bound=Model)


def _owned(queryset: QuerySet[M], owner: User | None, field: str = "owner") -> QuerySet[M]:
    return queryset if owner is None else queryset.filter(**{field: owner})


# What a row of the sessions list shows: the JSON lists and long texts stay in the database.
SESSION_ROW_FIELDS = (
    "id",
    "owner__username",
    "session_key",
    "harness",
    "project",
    "project_normalized",
    "git_branch",
    "started_at",
    "last_activity_at",
    "ended_at",
    "prompt_count",
    "compaction_count",
    "context_percent",
    "context_tokens",
)


@dataclass(frozen=True)
class SessionFilters:
    project: str = ""
    harness: str = ""
    state: str = ""  # "live", "ended" or "" for both
    since: date | None = None  # last activity on or after this day (the viewer's time zone)
    until: date | None = None  # last activity on or before this day


def sessions_page_queryset(
    *, owner: User | None, filters: SessionFilters, zone: tzinfo
) -> QuerySet[Session]:
    """Sessions matching ``filters``, most recently active first (counts: ``sessions_count``)."""
    sessions = (
        _owned(Session.objects.all(), owner).select_related("owner").only(*SESSION_ROW_FIELDS)
    )
    if filters.project:
        sessions = sessions.filter(project_normalized=filters.project)
    if filters.harness:
        sessions = sessions.filter(harness=filters.harness)
    if filters.state == "live":
        sessions = sessions.filter(ended_at__isnull=True)
    elif filters.state == "ended":
        sessions = sessions.filter(ended_at__isnull=False)
    if filters.since:
        start = datetime.combine(filters.since, datetime.min.time(), tzinfo=zone)
        sessions = sessions.filter(last_activity_at__gte=start)
    if filters.until:
        end = datetime.combine(filters.until + timedelta(days=1), datetime.min.time(), tzinfo=zone)
        sessions = sessions.filter(last_activity_at__lt=end)
    return sessions.order_by("-last_activity_at", "-id")


def sessions_count_checkpoints(*, sessions: Sequence[Session]) -> None:
    """Set ``checkpoint_total`` on each of a page's sessions, in one grouped query over just
    those sessions (a subquery in the page's own query would also run for every row an
    OFFSET skips, on PostgreSQL)."""
    totals = dict(
        Checkpoint.objects.filter(session__in=[session.pk for session in sessions])
        .order_by()
        .values("session")
        .annotate(total=Count("*"))
        .values_list("session", "total")
    )
    for session in sessions:
        session.checkpoint_total = totals.get(session.pk, 0)  # type: ignore[attr-defined]


def project_choices(*, owner: User | None, limit: int = 200) -> list[str]:
    """The owner's projects, most recently active first, for the filter's menu."""
    rows = (
        _owned(Session.objects.all(), owner)
        .exclude(project_normalized="")
        .values("project_normalized")
        .annotate(last=Max("last_activity_at"))
        .order_by("-last")[:limit]
    )
    return [row["project_normalized"] for row in rows]


def session_for_page(*, owner: User | None, pk: int) -> Session | None:
    """One session with its owner and predecessor, or None when it is not the owner's."""
    return (
        _owned(Session.objects.all(), owner)
        .select_related("owner", "previous_session")
        .filter(pk=pk)
        .first()
    )


def session_continuations(*, session: Session) -> list[Session]:
    """The sessions that continue ``session`` (the next ones in its lineage)."""
    return list(
        Session.objects.filter(previous_session=session, owner_id=session.owner_id)
        .only("id", "session_key", "started_at", "harness")
        .order_by("started_at")
    )


# The timeline shows fields and diffs; digests load when opened (``checkpoint_digest``).
TIMELINE_DEFERRED = ("digest", "state", "last_assistant_message", "memory_queries")


@dataclass(frozen=True)
class Timeline:
    checkpoints: list[Checkpoint]  # the newest ``limit``, oldest first
    before: Checkpoint | None  # the one before the oldest shown, for that one's diff
    total: int


def session_timeline(*, session: Session, limit: int) -> Timeline:
    """The session's newest ``limit`` checkpoints, the one before them, and how many it has."""
    newest = list(
        Checkpoint.objects.filter(session=session)
        .defer(*TIMELINE_DEFERRED)
        .order_by("-created_at", "-id")[: limit + 1]
    )
    if len(newest) <= limit:
        return Timeline(checkpoints=newest[::-1], before=None, total=len(newest))
    total = Checkpoint.objects.filter(session=session).count()
    return Timeline(checkpoints=newest[:limit][::-1], before=newest[limit], total=total)


def session_injections(*, session: Session, limit: int) -> tuple[list[Injection], int]:
    """The newest ``limit`` injections made into ``session``, and how many there are."""
    injections = list(
        Injection.objects.filter(session=session)
        .select_related("checkpoint")
        .only(
            "id",
            "source",
            "match",
            "content",
            "size_chars",
            "omitted",
            "created_at",
            "checkpoint__id",
            "checkpoint__trigger",
            "checkpoint__created_at",
            "checkpoint__session_id",
        )
        .order_by("-created_at")[:limit]
    )
    if len(injections) < limit:
        return injections, len(injections)
    return injections, Injection.objects.filter(session=session).count()


def checkpoint_for_page(*, owner: User | None, pk: str) -> Checkpoint | None:
    """One checkpoint with its session, or None when it is not the owner's."""
    return _owned(Checkpoint.objects.all(), owner).select_related("session").filter(pk=pk).first()


@dataclass(frozen=True)
class ProjectRow:
    project: str
    sessions: int
    live: int
    last_activity: datetime
    latest: Checkpoint | None


def projects_page(*, owner: User | None, offset: int, limit: int) -> tuple[list[ProjectRow], bool]:
    """One row per normalised project, most recently active first, with its latest
    checkpoint; and whether more rows follow.

    Two queries whatever the number of rows: the page's projects grouped from the sessions,
    then the latest checkpoint of each of those (one indexed look-up per project, inside one
    statement).
    """
    rows = list(
        _owned(Session.objects.all(), owner)
        .exclude(project_normalized="")
        .values("project_normalized")
        .annotate(
            sessions=Count("id"),
            live=Count("id", filter=Q(ended_at__isnull=True)),
            last_activity=Max("last_activity_at"),
        )
        .order_by("-last_activity", "project_normalized")[offset : offset + limit + 1]
    )
    more = len(rows) > limit
    rows = rows[:limit]
    latest: dict[str, Checkpoint] = {}
    if rows:
        newest_of = Q()
        for row in rows:
            newest_of |= Q(
                pk=Subquery(
                    _owned(Checkpoint.objects.all(), owner)
                    .filter(project_normalized=row["project_normalized"])
                    .order_by("-created_at", "-id")
                    .values("pk")[:1]
                )
            )
        latest = {
            c.project_normalized: c
            for c in Checkpoint.objects.filter(newest_of).annotate(
                session_summary=F("session__compact_summary")
            )
        }
    return [
        ProjectRow(
            project=row["project_normalized"],
            sessions=row["sessions"],
            live=row["live"],
            last_activity=row["last_activity"],
            latest=latest.get(row["project_normalized"]),
        )
        for row in rows
    ], more


@dataclass(frozen=True)
class DailyActivity:
    days: list[date]
    prompts: list[int]
    checkpoints: dict[str, list[int]]  # by trigger value
    compactions: list[int]
    injections: list[int]


class UtcHour(Func):
    """The UTC hour a timestamp falls in, computed natively: text ``YYYY-MM-DD HH`` on
    SQLite (Django's TruncHour runs a Python function per row there), ``date_trunc``
    elsewhere (a timestamp)."""

    output_field = CharField()
    template = "date_trunc('hour', %(expressions)s)"

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="substr(%(expressions)s, 1, 13)")


def _local_day(hour: str | datetime, zone: tzinfo) -> date:
    """The viewer's day an hour from ``UtcHour`` starts in."""
    if isinstance(hour, str):
        hour = datetime.strptime(hour, "%Y-%m-%d %H").replace(tzinfo=UTC)
    elif hour.tzinfo is None:
        hour = hour.replace(tzinfo=UTC)
    return hour.astimezone(zone).date()


def activity_by_day(*, owner: User | None, days: int, today: date, zone: tzinfo) -> DailyActivity:
    """Per day of the last ``days`` (in ``zone``): prompts, checkpoints by trigger,
    compactions and injections.

    Prompts are counted when a checkpoint records them (``new_prompts``); compactions are the
    pre-compaction checkpoints. Rows are counted per UTC hour in SQL, from the
    ``checkpoint_owner_activity`` index alone, and the hours added up into the viewer's days
    here (a zone with a half-hour offset puts an hour's rows in the day the hour starts in).
    """
    first = today - timedelta(days=days - 1)
    day_list = [first + timedelta(days=i) for i in range(days)]
    index = {day: i for i, day in enumerate(day_list)}
    start = datetime.combine(first, datetime.min.time(), tzinfo=zone)
    prompts = [0] * days
    by_trigger = {value: [0] * days for value in Trigger.values}
    checkpoints = (
        _owned(Checkpoint.objects.all(), owner)
        .filter(created_at__gte=start)
        .annotate(hour=UtcHour("created_at"))
        .values("hour", "trigger")
        .annotate(total=Count("*"), new=Sum("new_prompts"))
        .order_by()
    )
    for row in checkpoints:
        i = index.get(_local_day(row["hour"], zone))
        if i is None:
            continue
        by_trigger.setdefault(row["trigger"], [0] * days)[i] += row["total"]
        prompts[i] += row["new"] or 0
    injections = [0] * days
    injected = (
        _owned(Injection.objects.all(), owner, "session__owner")
        .filter(created_at__gte=start)
        .annotate(hour=UtcHour("created_at"))
        .values("hour")
        .annotate(total=Count("*"))
        .order_by()
    )
    for hour in injected:
        i = index.get(_local_day(hour["hour"], zone))
        if i is not None:
            injections[i] += hour["total"]
    return DailyActivity(
        days=day_list,
        prompts=prompts,
        checkpoints=by_trigger,
        compactions=list(by_trigger[Trigger.PRE_COMPACTION]),
        injections=injections,
    )
