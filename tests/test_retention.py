"""Retention: the prune's three rules, its dry run, its batches and record; the idle close."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.db.models import SET_NULL
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from checkpoints import tasks
from checkpoints.models import (
    Checkpoint,
    ContinuityConfig,
    HookDelivery,
    Injection,
    RetentionRun,
    Session,
    Trigger,
)
from checkpoints.selectors import database_size
from checkpoints.services.config import config_cache_clear, config_get
from checkpoints.services.pending import checkpoints_flush_due
from checkpoints.services.retention import (
    Rule,
    prune_run,
    sessions_close_idle,
    sqlite_prepare,
)
from checkpoints.services.retention import prune as prune_module
from checkpoints.services.store import CHECKPOINT_REFERENCES, checkpoints_delete_ids
from tests.factories import CheckpointFactory, InjectionFactory, SessionFactory
from tests.hookutil import payload, send

pytestmark = pytest.mark.django_db


def configure(**fields):
    config = config_get()
    for name, value in fields.items():
        setattr(config, name, value)
    config.save()
    config_cache_clear()
    return config


def session_at(owner, clock, *, days_ago, project="/src/shop", **fields):
    """A session last active ``days_ago`` days before the clock."""
    moment = clock.now - timedelta(days=days_ago)
    return SessionFactory(
        owner=owner,
        project_normalized=project,
        started_at=moment - timedelta(hours=1),
        last_activity_at=moment,
        **fields,
    )


def checkpoint_at(session, clock, *, days_ago, **fields):
    return CheckpointFactory(
        session=session, created_at=clock.now - timedelta(days=days_ago), **fields
    )


def aged_in_bulk(session, clock, *, count, digest=""):
    """``count`` checkpoints of ``session``, ten days old and a second apart, in one insert."""
    Checkpoint.objects.bulk_create(
        Checkpoint(
            owner_id=session.owner_id,
            session=session,
            session_key=session.session_key,
            harness=session.harness,
            trigger=Trigger.PERIODIC,
            digest=digest,
            created_at=clock.now - timedelta(days=10, seconds=number),
        )
        for number in range(count)
    )


def ages(session):
    """The ages (days, rounded) of a session's surviving checkpoints, newest first."""
    now = timezone.now()
    return [
        round((now - created).total_seconds() / 86400, 2)
        for created in Checkpoint.objects.filter(session=session)
        .order_by("-created_at")
        .values_list("created_at", flat=True)
    ]


def test_checkpoints_older_than_retention_go_but_each_sessions_latest_stays(owner, clock):
    configure(retention_days=7, session_retention_days=90, max_checkpoints_per_session=50)
    active = session_at(owner, clock, days_ago=0)
    for days in (30, 20, 8, 6.9, 1):
        checkpoint_at(active, clock, days_ago=days)
    quiet = session_at(owner, clock, days_ago=10)  # inside session retention, all old
    for days in (30, 12):
        checkpoint_at(quiet, clock, days_ago=days)
    lone = session_at(owner, clock, days_ago=40)
    checkpoint_at(lone, clock, days_ago=40)

    report = prune_run()

    assert ages(active) == [1, 6.9]
    assert ages(quiet) == [12]  # older than retention, but the session's record
    assert ages(lone) == [40]
    assert report.rules[Rule.AGE].checkpoints == 4
    assert report.rules[Rule.CAP].checkpoints == 0
    assert report.sessions == 0


def test_ties_in_time_keep_exactly_one_latest(owner, clock):
    configure(retention_days=7)
    session = session_at(owner, clock, days_ago=1)
    for _ in range(3):
        checkpoint_at(session, clock, days_ago=9)  # the same instant
    prune_run()
    assert Checkpoint.objects.filter(session=session).count() == 1


def test_sessions_idle_past_session_retention_go_with_everything_they_own(owner, teammate, clock):
    configure(retention_days=7, session_retention_days=90)
    expired = session_at(owner, clock, days_ago=91)
    for days in (95, 92, 91):
        checkpoint_at(expired, clock, days_ago=days)
    InjectionFactory(session=expired)
    InjectionFactory(session=expired)
    continuation = session_at(owner, clock, days_ago=2, previous_session=expired)
    checkpoint_at(continuation, clock, days_ago=2)
    InjectionFactory(session=continuation)
    theirs = session_at(teammate, clock, days_ago=89)
    checkpoint_at(theirs, clock, days_ago=89)

    report = prune_run()

    assert not Session.objects.filter(pk=expired.pk).exists()
    assert not Checkpoint.objects.filter(session_key=expired.session_key).exists()
    assert Injection.objects.filter(session=expired.pk).count() == 0
    continuation.refresh_from_db()
    assert continuation.previous_session is None
    assert ages(continuation) == [2]
    assert Injection.objects.filter(session=continuation).count() == 1
    assert ages(theirs) == [89]
    assert (report.sessions, report.injections) == (1, 2)
    assert report.rules[Rule.SESSION_AGE].checkpoints == 3


def test_sessions_over_a_lowered_cap_are_trimmed_to_it(owner, clock):
    configure(retention_days=7, max_checkpoints_per_session=3)
    session = session_at(owner, clock, days_ago=0)
    for days in (10, 9, 6, 5, 4, 3, 2, 1):  # written when the cap was higher
        checkpoint_at(session, clock, days_ago=days)
    under = session_at(owner, clock, days_ago=0)
    for days in (3, 2, 1):
        checkpoint_at(under, clock, days_ago=days)

    report = prune_run()

    assert ages(session) == [1, 2, 3]
    assert ages(under) == [3, 2, 1][::-1]
    assert report.rules[Rule.AGE].checkpoints == 2  # 10 and 9 days: age, not cap
    assert report.rules[Rule.CAP].checkpoints == 3  # 6, 5 and 4 days


def build_mixed_history(users, clock):
    """Forty sessions of every kind, across projects and owners."""
    for index in range(40):
        owner = users[index % len(users)]
        last_days = [0, 3, 10, 60, 95, 200][index % 6]
        session = session_at(owner, clock, days_ago=last_days, project=f"/src/project-{index % 4}")
        for number in range(index % 9 + 1):
            checkpoint_at(session, clock, days_ago=last_days + number * 1.5)
        if index % 5 == 0:
            InjectionFactory(session=session)


def snapshot():
    return set(Checkpoint.objects.values_list("id", flat=True))


def test_the_dry_run_deletes_nothing_and_predicts_the_real_run_exactly(owner, teammate, clock):
    configure(retention_days=7, session_retention_days=90, max_checkpoints_per_session=4)
    build_mixed_history([owner, teammate], clock)
    before = snapshot()
    sessions_before = Session.objects.count()

    preview = prune_run(dry_run=True, batch_size=7)

    assert snapshot() == before
    assert Session.objects.count() == sessions_before
    assert not RetentionRun.objects.exists()  # a preview is not a run

    real = prune_run(batch_size=7)

    assert {**preview.as_dict(), "dry_run": False} == real.as_dict()
    assert len(before - snapshot()) == real.checkpoints > 0
    assert sessions_before - Session.objects.count() == real.sessions > 0
    for rule in Rule:
        assert real.rules[rule].checkpoints > 0, rule
    # Nothing is left for a second run to do.
    again = prune_run(dry_run=True)
    assert again.checkpoints == again.sessions == 0


def test_deletes_go_in_bounded_batches(owner, clock):
    configure(retention_days=7)
    session = session_at(owner, clock, days_ago=0)
    for number in range(23):
        checkpoint_at(session, clock, days_ago=10 + number)
    checkpoint_at(session, clock, days_ago=0)

    with CaptureQueriesContext(connection) as queries:
        report = prune_run(batch_size=5)

    deletes = [
        query["sql"]
        for query in queries.captured_queries
        if query["sql"].startswith('DELETE FROM "checkpoints_checkpoint"')
    ]
    assert report.rules[Rule.AGE].checkpoints == 23
    assert len(deletes) == 5  # 5 + 5 + 5 + 5 + 3
    assert ages(session) == [0]


def test_a_real_run_is_recorded_with_its_counts(owner, clock):
    configure(retention_days=7)
    session = session_at(owner, clock, days_ago=0)
    for days in (9, 8, 0):
        checkpoint_at(session, clock, days_ago=days)

    prune_run()

    run = RetentionRun.objects.get()
    assert run.kind == RetentionRun.Kind.PRUNE
    assert run.started_at == clock.now
    assert run.checkpoints_by_age == 2
    assert run.checkpoints_deleted == 2
    assert run.duration_seconds >= 0
    assert run.report["rules"]["age"]["by_project"] == {"/src/shop": 2}


def test_idempotency_keys_older_than_retention_are_forgotten(owner, clock):
    configure(retention_days=7)
    HookDelivery.objects.create(owner=owner, key="old", created_at=clock.now - timedelta(days=8))
    HookDelivery.objects.create(owner=owner, key="new", created_at=clock.now - timedelta(days=6))
    assert prune_run().hook_deliveries == 1
    assert list(HookDelivery.objects.values_list("key", flat=True)) == ["new"]


def test_prune_command_prints_what_it_would_delete_by_rule_and_project(owner, clock):
    configure(retention_days=7)
    session = session_at(owner, clock, days_ago=0, project="/src/billing")
    for days in (12, 9, 0):
        checkpoint_at(session, clock, days_ago=days)
    out = io.StringIO()

    call_command("prune_checkpoints", "--dry-run", stdout=out)

    text = out.getvalue()
    assert "(dry run)" in text
    assert "checkpoint age: would delete 2 checkpoint(s)" in text
    assert "2  /src/billing" in text
    oldest = timezone.localtime(clock.now - timedelta(days=12))
    assert f"created {oldest:%Y-%m-%d %H:%M} to" in text
    assert Checkpoint.objects.count() == 3

    call_command("prune_checkpoints", stdout=out)
    assert "checkpoint age: deleted 2 checkpoint(s)" in out.getvalue()
    assert Checkpoint.objects.count() == 1


# --- the policy -------------------------------------------------------------------------


def test_session_retention_shorter_than_checkpoint_retention_is_refused():
    config = config_get()
    config.retention_days, config.session_retention_days = 30, 10
    with pytest.raises(ValidationError, match="at least as long as checkpoints"):
        config.full_clean()
    with pytest.raises(IntegrityError), transaction.atomic():
        config.save()


def test_defaults():
    config = config_get()
    assert (
        config.retention_days,
        config.session_retention_days,
        config.idle_session_minutes,
        config.prune_interval_minutes,
    ) == (7, 90, 240, 60)
    assert ContinuityConfig._meta.get_field("session_retention_days").help_text


# --- idle sessions -------------------------------------------------------------------------


@pytest.fixture
def hook(client_for, owner):
    return client_for(owner, "ingest")


def prompt(hook, text, session_id="idle-1"):
    return send(hook, payload("user_prompt_submit", prompt=text, session_id=session_id))


def test_idle_sessions_are_ended_with_a_final_checkpoint(hook, clock):
    configure(idle_session_minutes=240, prompt_interval=100)
    prompt(hook, "refactor the checkout flow")
    prompt(hook, "and keep the old API", session_id="idle-quiet")
    send(hook, payload("session_end", session_id="idle-quiet"))
    clock.advance(minutes=200)
    prompt(hook, "still here", session_id="idle-busy")
    clock.advance(minutes=42)  # idle-1: 242 minutes, past 240 and the minute it is kept to

    report = sessions_close_idle()

    idle = Session.objects.get(session_key="idle-1")
    assert idle.ended_at == clock.now
    assert idle.end_reason == "idle"
    final = Checkpoint.objects.get(session=idle)
    assert final.trigger == Trigger.SESSION_END
    assert final.recent_prompts == ["refactor the checkout flow"]
    assert Session.objects.get(session_key="idle-busy").ended_at is None
    quiet = Session.objects.get(session_key="idle-quiet")
    assert quiet.end_reason != "idle"  # ended by its harness before
    assert report.closed == 1
    assert RetentionRun.objects.get().sessions_closed == 1


def test_an_idle_session_with_its_checkpoint_already_written_gets_no_new_one(hook, clock):
    configure(idle_session_minutes=60, prompt_interval=1)
    prompt(hook, "one")  # due at once, and no debounce in the tests
    assert checkpoints_flush_due() == 1
    clock.advance(minutes=62)
    sessions_close_idle()
    assert Checkpoint.objects.count() == 1
    assert Session.objects.get().end_reason == "idle"


def test_a_pending_checkpoint_is_written_before_the_idle_end(hook, clock):
    configure(idle_session_minutes=60, prompt_interval=1, debounce_seconds=3000)
    prompt(hook, "one")
    session = Session.objects.get()
    assert session.checkpoint_pending_since is not None
    assert not Checkpoint.objects.exists()
    clock.advance(minutes=62)
    sessions_close_idle()
    session.refresh_from_db()
    assert session.checkpoint_pending_since is None
    assert Checkpoint.objects.get().prompt_count == 1


def test_a_session_is_never_ended_before_its_idle_time(hook, clock):
    """Its last activity is kept to the minute (ACTIVITY_GRAIN): a prompt 50 s after the
    one recorded leaves the time as it was, and still counts."""
    configure(idle_session_minutes=60)
    prompt(hook, "one")
    clock.advance(seconds=50)
    prompt(hook, "two")  # within the minute: not recorded
    clock.advance(minutes=59, seconds=40)  # 59:40 since "two", 60:30 since "one"
    assert sessions_close_idle().closed == 0
    clock.advance(minutes=2)
    assert sessions_close_idle().closed == 1


def test_the_agent_coming_back_reopens_a_session_ended_for_silence(hook, clock):
    configure(idle_session_minutes=60)
    prompt(hook, "one")
    clock.advance(minutes=62)
    sessions_close_idle()
    prompt(hook, "back from lunch")
    session = Session.objects.get()
    assert session.ended_at is None
    assert session.prompt_count == 2


# --- space ------------------------------------------------------------------------------


def test_healthz_reports_the_database_size(client):
    body = client.get("/healthz").json()
    assert body["database_bytes"] == database_size()["bytes"] > 0


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite files only")
@pytest.mark.django_db(transaction=True)
def test_sqlite_returns_the_space_a_large_prune_freed(owner, clock):
    assert sqlite_prepare() == ""  # a new file starts in incremental auto-vacuum
    configure(retention_days=7)
    session = session_at(owner, clock, days_ago=0)
    aged_in_bulk(session, clock, count=500, digest="x" * 4000)
    checkpoint_at(session, clock, days_ago=0)
    before = database_size()

    report = prune_run()

    after = database_size()
    assert report.checkpoints == 500
    assert report.bytes_reclaimed is not None
    assert report.bytes_reclaimed >= 1_000_000
    assert after["free_bytes"] == 0
    assert after["bytes"] <= before["bytes"] - report.bytes_reclaimed


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite files only")
@pytest.mark.django_db(transaction=True)
def test_an_older_sqlite_file_is_switched_to_incremental_vacuum_once():
    try:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA auto_vacuum = NONE")
            cursor.execute("VACUUM")
            cursor.execute("PRAGMA auto_vacuum")
            assert cursor.fetchone()[0] == 0
        assert "incremental auto-vacuum" in sqlite_prepare()
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA auto_vacuum")
            assert cursor.fetchone()[0] == 2
        assert sqlite_prepare() == ""
    finally:  # the test database file is shared with the tests after this one
        sqlite_prepare()


def test_the_bulk_delete_handles_every_reference_to_a_checkpoint(owner):
    references = {
        (relation.related_model._meta.label, relation.field.name)
        for relation in Checkpoint._meta.related_objects
    }
    assert references == set(CHECKPOINT_REFERENCES)
    for relation in Checkpoint._meta.related_objects:
        assert relation.on_delete is SET_NULL

    session = SessionFactory(owner=owner)
    parent = CheckpointFactory(session=session)
    child = CheckpointFactory(session=session, parent=parent)
    injection = InjectionFactory(session=session, checkpoint=parent)
    assert checkpoints_delete_ids(ids=[parent.id]) == 1
    child.refresh_from_db()
    injection.refresh_from_db()
    assert child.parent is None
    assert injection.checkpoint is None


def test_a_run_out_of_time_stops_between_batches_and_the_next_one_goes_on(owner, clock):
    configure(retention_days=7, session_retention_days=90)
    expired = session_at(owner, clock, days_ago=100)
    for days in (103, 102, 101):
        checkpoint_at(expired, clock, days_ago=days)
    InjectionFactory(session=expired)
    live = session_at(owner, clock, days_ago=0)
    for days in (9, 8, 0):
        checkpoint_at(live, clock, days_ago=days)

    first = prune_run(max_seconds=0, batch_size=2)

    assert not first.complete
    assert first.checkpoints == 2  # one batch, then the budget is spent
    assert Session.objects.filter(pk=expired.pk).exists()  # its rows are not all gone yet
    assert "stopped at its time budget" in "\n".join(first.lines())
    runs = 1
    while not prune_run(max_seconds=0, batch_size=2).complete:
        runs += 1
    assert runs >= 3
    assert not Session.objects.filter(pk=expired.pk).exists()
    assert not Injection.objects.exists()
    assert ages(live) == [0]


def test_the_scheduled_prune_queues_its_own_continuation(owner, clock, monkeypatch):
    configure(retention_days=7)
    session = session_at(owner, clock, days_ago=0)
    for number in range(3):
        checkpoint_at(session, clock, days_ago=8 + number)
    aged_in_bulk(session, clock, count=120)
    checkpoint_at(session, clock, days_ago=0)
    monkeypatch.setattr(prune_module, "task_seconds", lambda: 0.0)

    tasks.retention_prune_task()  # django-q2 runs queued tasks at once in the tests

    assert ages(session) == [0]
    runs = RetentionRun.objects.filter(kind=RetentionRun.Kind.PRUNE)
    # A run starts with a batch of 50 and, out of time, stops after its first batch.
    assert runs.count() >= 3
    assert sum(run.checkpoints_by_age for run in runs) == 123


def test_only_one_prune_runs_at_a_time(owner, clock):
    configure(retention_days=7)
    session = session_at(owner, clock, days_ago=0)
    for days in (9, 0):
        checkpoint_at(session, clock, days_ago=days)
    cache.add(prune_module.PRUNE_LEASE_KEY, "another worker's run", timeout=60)

    busy = prune_run()

    assert busy.skipped
    assert busy.lines() == ["Another prune is running; this one did nothing."]
    assert Checkpoint.objects.count() == 2
    assert not RetentionRun.objects.exists()
    assert prune_run(dry_run=True).checkpoints == 1  # a preview needs no lease
    cache.delete(prune_module.PRUNE_LEASE_KEY)
    assert prune_run().checkpoints == 1
    assert cache.get(prune_module.PRUNE_LEASE_KEY) is None  # released after the run


def test_a_session_that_comes_back_during_the_prune_is_kept(owner, clock, monkeypatch):
    configure(retention_days=7, session_retention_days=90)
    session = session_at(owner, clock, days_ago=100)
    for days in (102, 101, 100):
        checkpoint_at(session, clock, days_ago=days)
    InjectionFactory(session=session)
    walk = prune_module._keyset_rows

    def resumed_meanwhile(rows, deleter):
        # A hook brings the session back between the prune's look-up and its delete.
        Session.objects.filter(pk=session.pk).update(last_activity_at=clock.now)
        yield from walk(rows, deleter)

    monkeypatch.setattr(prune_module, "_keyset_rows", resumed_meanwhile)

    report = prune_run()

    assert Session.objects.filter(pk=session.pk).exists()
    assert Injection.objects.filter(session=session).count() == 1
    assert (report.sessions, report.injections) == (0, 0)
    assert report.rules[Rule.SESSION_AGE].checkpoints == 0
    # Live again, the session is under the checkpoint-age rule: its latest stays.
    assert report.rules[Rule.AGE].checkpoints == 2
    assert ages(session) == [100]
