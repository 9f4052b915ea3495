"""The prompt hot path's unlocked read and write-back (``sessions.session_read`` and
``session_swap``), and the row version every other write raises so that it can tell."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import signals
from django.utils import timezone
from django_q.conf import Conf

from checkpoints.models import Checkpoint, Injection, Session
from checkpoints.services import engine
from checkpoints.services.config import config_cache_clear, config_get, config_save
from checkpoints.services.engine import PROMPT_FIELDS, handlers
from checkpoints.services.pending import checkpoint_flush, pending_checkpoint_if_due
from checkpoints.services.recovery import recovery_prepare
from checkpoints.services.sessions import (
    ACTIVITY_GRAIN,
    activity_mark,
    session_insert,
    session_lock,
    session_read,
    session_swap,
)
from tests.factories import SessionFactory
from tests.hookutil import payload, send

pytestmark = pytest.mark.django_db


def test_the_read_loads_the_fields_asked_for_with_the_orms_types(owner):
    started = timezone.now() - timedelta(hours=1)
    SessionFactory(
        owner=owner,
        session_key="k1",
        started_at=started,
        recent_prompts=["fix the parser", "ünïcødé ✓"],
        recovery_due=True,
        context_percent=41.5,
    )
    read = session_read(owner=owner, session_key="k1", fields=PROMPT_FIELDS)
    assert read is not None
    session = read.session
    assert session.started_at == started
    assert session.recent_prompts == ["fix the parser", "ünïcødé ✓"]
    assert session.recovery_due is True
    assert session.context_percent == 41.5
    assert session.checkpoint_pending_since is None
    assert session.row_version == 0
    assert "transcript_path" in session.get_deferred_fields()
    assert session_read(owner=owner, session_key="other", fields=PROMPT_FIELDS) is None


@pytest.mark.parametrize("receiver", [False, True], ids=["made-directly", "post_init-receiver"])
def test_the_read_makes_the_instance_the_orm_would(owner, receiver, monkeypatch):
    """Made without ``Model.__init__`` while no ``pre_init``/``post_init`` receiver listens,
    through ``from_db`` (which sends them) while one does: the same instance either way."""
    SessionFactory(owner=owner, session_key="k1", recent_prompts=["a"], git_branch="main")
    fields = ("id", "owner_id", "row_version", "session_key", "recent_prompts", "last_activity_at")
    orm = Session.objects.only(*fields).get(owner=owner, session_key="k1")
    heard: list[Session] = []

    def listen(sender: type[Session], instance: Session, **kwargs: object) -> None:
        heard.append(instance)

    if receiver:
        signals.post_init.connect(listen, sender=Session)
    else:

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("made through Model.__init__")

        monkeypatch.setattr(Session, "__init__", refuse)
    try:
        read = session_read(owner=owner, session_key="k1", fields=fields)
    finally:
        signals.post_init.disconnect(listen, sender=Session)
        monkeypatch.undo()
    assert read is not None
    session = read.session
    assert type(session) is Session
    assert len(heard) == (1 if receiver else 0)
    assert all(instance is session for instance in heard)
    assert session.get_deferred_fields() == orm.get_deferred_fields()
    assert {name: value for name, value in vars(session).items() if name != "_state"} == {
        name: value for name, value in vars(orm).items() if name != "_state"
    }
    assert (session._state.adding, session._state.db) == (False, "default")
    assert session.git_branch == "main"  # a deferred column loads on use, as the ORM's do
    session.recent_prompts = ["a", "b"]
    session.save(update_fields=["recent_prompts"])
    orm.refresh_from_db()
    assert orm.recent_prompts == ["a", "b"]


def test_the_read_is_scoped_to_the_owner(owner, teammate):
    SessionFactory(owner=teammate, session_key="shared-name")
    assert session_read(owner=owner, session_key="shared-name", fields=PROMPT_FIELDS) is None


def test_a_write_back_applies_when_no_one_wrote_in_between(owner):
    SessionFactory(owner=owner, session_key="k1", prompt_count=4, transcript_path="/t.jsonl")
    read = session_read(owner=owner, session_key="k1", fields=PROMPT_FIELDS)
    assert read is not None
    read.session.prompt_count += 1
    read.session.recent_prompts.append("next")  # changed in place: still seen as changed
    assert session_swap(read=read)
    stored = Session.objects.get()
    assert stored.prompt_count == 5
    assert stored.recent_prompts[-1] == "next"
    assert stored.row_version == 1
    assert stored.transcript_path == "/t.jsonl"  # not one of the fields: left alone


def test_a_write_back_writes_only_what_changed(owner, django_assert_num_queries):
    SessionFactory(owner=owner, session_key="k1", prompt_count=4, git_branch="main")
    read = session_read(owner=owner, session_key="k1", fields=PROMPT_FIELDS)
    assert read is not None
    read.session.prompt_count = 5
    with django_assert_num_queries(1) as captured:
        assert session_swap(read=read)
    statement = captured.captured_queries[0]["sql"]
    assert "prompt_count" in statement
    assert "git_branch" not in statement
    assert "recent_prompts" not in statement


def test_a_write_back_changes_nothing_after_another_write(owner):
    SessionFactory(owner=owner, session_key="k1", prompt_count=4)
    mine = session_read(owner=owner, session_key="k1", fields=PROMPT_FIELDS)
    theirs = Session.objects.get()
    theirs.model = "another-model"
    theirs.save()  # another worker's write between our read and our write-back
    assert mine is not None
    mine.session.prompt_count += 1
    assert not session_swap(read=mine)
    stored = Session.objects.get()
    assert (stored.prompt_count, stored.model) == (4, "another-model")


def test_every_save_raises_the_version_in_the_database(owner):
    session = SessionFactory(owner=owner, session_key="k1")
    assert Session.objects.get().row_version == 0
    session.prompt_count = 1
    session.save()
    session.prompt_count = 2
    session.save(update_fields=["prompt_count"])
    assert session.row_version == 2  # not kept in memory: read back when asked for
    stale = Session.objects.get()
    session.save()
    stale.save()  # a copy loaded earlier still moves the version on, never back
    assert Session.objects.get().row_version == 4


def test_a_prompt_that_loses_the_race_reads_again_and_keeps_the_other_write(
    client_for, owner, monkeypatch
):
    hook = client_for(owner, "ingest")
    send(hook, payload("session_start_startup"))
    send(hook, payload("user_prompt_submit", prompt="first"))
    reads = []

    def read_then_another_writes(**kwargs):
        session = session_read(**kwargs)
        reads.append(session)
        if len(reads) == 1:  # another worker writes the row right after our first read
            other = Session.objects.get()
            other.prompt_count += 1
            other.last_assistant_message = "written by another worker"
            other.save()
        return session

    monkeypatch.setattr(engine, "session_read", read_then_another_writes)
    send(hook, payload("user_prompt_submit", prompt="second"))
    assert len(reads) == 2  # the write-back found the row changed and started over
    session = Session.objects.get()
    assert session.prompt_count == 3  # ours and the other worker's: none lost
    assert session.recent_prompts[-1] == "second"
    assert session.last_assistant_message == "written by another worker"


def test_a_prompt_that_keeps_losing_takes_the_locked_path(client_for, owner, monkeypatch):
    hook = client_for(owner, "ingest")
    send(hook, payload("session_start_startup"))
    reads = []
    locks = []

    def read_then_another_writes(**kwargs):
        reads.append(session_read(**kwargs))
        Session.objects.get().save()  # someone always writes in between
        return reads[-1]

    def lock(**kwargs):
        locks.append(kwargs["session_key"])
        return session_lock(**kwargs)

    monkeypatch.setattr(engine, "session_read", read_then_another_writes)
    monkeypatch.setattr(engine, "session_lock", lock)
    send(hook, payload("user_prompt_submit", prompt="contended"))
    assert len(reads) == engine.UNLOCKED_ATTEMPTS  # every try lost the race
    assert len(locks) == 1  # then the row lock settled it
    session = Session.objects.get()
    assert session.prompt_count == 1
    assert session.recent_prompts == ["contended"]


def test_a_first_prompt_racing_another_workers_creation_counts_once(client_for, owner, monkeypatch):
    _first_prompt_races_another_workers_creation(client_for, owner, monkeypatch)


@pytest.mark.django_db(transaction=True)  # the INSERT is then its own transaction
def test_a_first_prompt_racing_another_workers_creation_counts_once_in_autocommit(
    client_for, owner, monkeypatch
):
    _first_prompt_races_another_workers_creation(client_for, owner, monkeypatch)


def _first_prompt_races_another_workers_creation(client_for, owner, monkeypatch):
    hook = client_for(owner, "ingest")
    inserted = []

    def another_worker_creates_it_first(**kwargs):
        SessionFactory(owner=owner, session_key=kwargs["session"].session_key, prompt_count=1)
        inserted.append(session_insert(**kwargs))
        return inserted[-1]

    monkeypatch.setattr(engine, "session_insert", another_worker_creates_it_first)
    response = send(hook, payload("user_prompt_submit", prompt="mine"))
    assert response.status_code == 200
    assert inserted == [False]  # the INSERT met the other row; the prompt went on to it
    session = Session.objects.get()
    assert session.prompt_count == 2
    assert session.recent_prompts == ["mine"]


@pytest.mark.django_db(transaction=True)  # the audit row's reference is checked at COMMIT
@pytest.mark.parametrize("session_exists", [False, True], ids=["new session", "owed recovery"])
def test_a_recovery_whose_checkpoint_goes_before_the_write_starts_over(
    client_for, owner, monkeypatch, session_exists
):
    hook = client_for(owner, "ingest")
    send(hook, payload("user_prompt_submit", session_id="earlier", prompt="Ship the export"))
    send(hook, payload("pre_compact_manual", session_id="earlier"))
    if session_exists:  # a session owed a recovery (a compaction's that injected nothing)
        project = Session.objects.get(session_key="earlier").project_normalized
        SessionFactory(owner=owner, session_key="new", recovery_due=True, prompt_count=3)
        Session.objects.filter(session_key="new").update(project_normalized=project)
    looked_up = []
    writes = []

    def the_prune_runs_after_the_look_up(**kwargs):
        looked_up.append(recovery_prepare(**kwargs))
        Checkpoint.objects.all().delete()
        return looked_up[-1]

    def insert(**kwargs):
        writes.append(("insert", session_insert(**kwargs)))
        return writes[-1][1]

    def swap(**kwargs):
        writes.append(("update", session_swap(**kwargs)))
        return writes[-1][1]

    monkeypatch.setattr(handlers, "recovery_prepare", the_prune_runs_after_the_look_up)
    monkeypatch.setattr(engine, "session_insert", insert)
    monkeypatch.setattr(engine, "session_swap", swap)
    response = send(hook, payload("user_prompt_submit", session_id="new", prompt="go on"))
    assert response.status_code == 200
    # The row was written with the audit of a context whose checkpoint had gone: the
    # transaction failed as a whole, and the prompt started over with nothing to recover.
    assert [found is not None for found in looked_up] == [True, False]
    if session_exists:
        assert writes == [("update", False), ("update", True)]
    else:
        assert writes == [("insert", False), ("insert", True)]
    assert "additionalContext" not in response.json().get("hookSpecificOutput", {})
    session = Session.objects.get(session_key="new")
    prompts = 4 if session_exists else 1
    assert (session.prompt_count, session.recovery_due) == (prompts, False)
    assert not Injection.objects.filter(session=session).exists()


def test_an_owed_recovery_that_a_compactions_session_start_injects_meanwhile_is_not_repeated(
    client_for, owner, monkeypatch
):
    hook = client_for(owner, "ingest")
    send(hook, payload("user_prompt_submit", prompt="Ship the export"))
    send(hook, payload("pre_compact_manual"))  # the compaction: a recovery is now owed
    assert Session.objects.get().recovery_due
    reads = []

    def read_then_session_start_arrives(**kwargs):
        reads.append(session_read(**kwargs))
        if len(reads) == 1:  # another worker serves the compaction's SessionStart now
            answer = send(hook, payload("session_start_compact")).json()
            assert "Ship the export" in answer["hookSpecificOutput"]["additionalContext"]
        return reads[-1]

    monkeypatch.setattr(engine, "session_read", read_then_session_start_arrives)
    response = send(hook, payload("user_prompt_submit", prompt="go on"))
    # Our write-back found the row changed, read it again, and the recovery was no longer
    # owed: the context went in once, with the SessionStart.
    assert len(reads) == 2
    assert "additionalContext" not in response.json().get("hookSpecificOutput", {})
    session = Session.objects.get()
    assert (session.prompt_count, session.recovery_due) == (2, False)
    assert list(Injection.objects.values_list("source", flat=True)) == ["compact"]


def _due_at_the_next_prompt(hook) -> None:
    """A session whose periodic checkpoint is pending and past its debounce (none in the
    suite; the flush task queued at the mark runs at commit, which these tests' transaction
    never reaches, or stays queued, ``no_task_runs``)."""
    config = config_get()
    config.prompt_interval = 2
    config_save(config=config)
    config_cache_clear()
    send(hook, payload("session_start_startup"))
    send(hook, payload("user_prompt_submit", prompt="one"))
    send(hook, payload("user_prompt_submit", prompt="two"))  # marks the checkpoint pending
    assert Session.objects.get().checkpoint_pending_since is not None


def test_a_due_checkpoint_that_the_flush_task_writes_meanwhile_is_written_once(
    client_for, owner, monkeypatch
):
    hook = client_for(owner, "ingest")
    _due_at_the_next_prompt(hook)
    reads = []

    def read_then_the_task_flushes(**kwargs):
        reads.append(session_read(**kwargs))
        if kwargs["fields"] == engine.ALL_FIELDS and len(reads) == 2:
            # The queued flush task runs in another worker right after our whole-row read.
            assert checkpoint_flush(session_id=Session.objects.get().pk)
        return reads[-1]

    monkeypatch.setattr(engine, "session_read", read_then_the_task_flushes)
    send(hook, payload("user_prompt_submit", prompt="three"))
    # Our write-back found the row changed, read it (whole) again: nothing was due any more.
    assert [len(read.values) for read in reads] == [
        len(PROMPT_FIELDS), len(engine.ALL_FIELDS), len(engine.ALL_FIELDS)
    ]  # fmt: skip
    assert Checkpoint.objects.count() == 1
    assert Checkpoint.objects.get().recent_prompts == ["one", "two"]
    session = Session.objects.get()
    assert (session.prompt_count, session.checkpoint_pending_since) == (3, None)
    assert session.recent_prompts[-1] == "three"


@pytest.fixture
def no_task_runs(monkeypatch):
    """Queued tasks stay queued (the suite runs them at once): the flush task queued at a
    mark waits, as it waits out the debounce in a deployment."""
    monkeypatch.setattr(Conf, "SYNC", False)


@pytest.mark.django_db(transaction=True)  # the checkpoint's reference is checked at COMMIT
@pytest.mark.usefixtures("no_task_runs")
def test_a_due_checkpoint_whose_parent_goes_before_the_write_starts_over(
    client_for, owner, monkeypatch
):
    hook = client_for(owner, "ingest")
    send(hook, payload("session_start_startup"))
    send(hook, payload("pre_compact_manual"))  # the parent-to-be
    _due_at_the_next_prompt(hook)
    built = []

    def the_prune_runs_after_the_build(**kwargs):
        built.append(pending_checkpoint_if_due(**kwargs))
        Checkpoint.objects.all().delete()
        return built[-1]

    monkeypatch.setattr(handlers, "pending_checkpoint_if_due", the_prune_runs_after_the_build)
    response = send(hook, payload("user_prompt_submit", prompt="three"))
    assert response.status_code == 200
    # Built on a parent that had gone by COMMIT: nothing was written, and the prompt started
    # over, on a session with no checkpoint left.
    assert [checkpoint.parent_id is not None for checkpoint in built] == [True, False]
    written = Checkpoint.objects.get()
    assert (written.parent_id, written.recent_prompts) == (None, ["one", "two"])
    session = Session.objects.get()
    assert (session.prompt_count, session.checkpoint_pending_since) == (3, None)


@pytest.mark.django_db(transaction=True)  # the audit row's reference is checked at COMMIT
@pytest.mark.usefixtures("no_task_runs")
def test_a_prompt_owed_a_recovery_whose_checkpoint_falls_due_recovers_from_that_checkpoint(
    client_for, owner
):
    config = config_get()
    config.max_checkpoints_per_session = 1  # the new checkpoint drops the one before it
    config.prompt_interval = 2
    config_save(config=config)
    config_cache_clear()
    hook = client_for(owner, "ingest")
    send(hook, payload("session_start_startup"))
    send(hook, payload("pre_compact_manual"))  # the checkpoint before
    send(hook, payload("user_prompt_submit", prompt="go on"))  # injects the compaction's
    send(hook, payload("user_prompt_submit", prompt="one"))  # marks a periodic one pending
    assert Session.objects.get().checkpoint_pending_since is not None
    # A compaction whose SessionStart injected nothing: the next prompt owes a recovery.
    Session.objects.update(recovery_due=True, compaction_recovered=False)
    response = send(hook, payload("user_prompt_submit", prompt="three"))
    assert response.status_code == 200
    # The prompt wrote the due checkpoint, the session's latest, and recovered from it (not
    # from the one it dropped, which the audit row could not refer to).
    written = Checkpoint.objects.get()
    assert written.trigger == "periodic"
    assert written.recent_prompts[-2:] == ["go on", "one"]
    injection = Injection.objects.order_by("-created_at").first()
    assert injection is not None
    assert (injection.source, injection.checkpoint_id) == ("prompt", written.pk)
    assert injection.match == "session"


@pytest.mark.parametrize(
    ("after", "replayed", "moved"),
    [
        (timedelta(seconds=59), False, False),  # within the minute: the row keeps its time
        (ACTIVITY_GRAIN, False, True),
        (timedelta(seconds=-5), False, True),  # another host's clock behind: its time
        (timedelta(seconds=-5), True, False),  # a replay never moves it back
        (timedelta(minutes=3), True, True),
    ],
)
def test_activity_is_kept_to_the_minute(after, replayed, moved):
    recorded = timezone.now()
    session = Session(last_activity_at=recorded)
    activity_mark(session=session, now=recorded + after, replayed=replayed)
    assert session.last_activity_at == (recorded + after if moved else recorded)


def test_prompts_within_the_minute_leave_the_indexed_time_alone(client_for, owner):
    hook = client_for(owner, "ingest")
    send(hook, payload("user_prompt_submit", prompt="one"))
    first = Session.objects.get().last_activity_at
    send(hook, payload("user_prompt_submit", prompt="two"))
    session = Session.objects.get()
    assert (session.prompt_count, session.last_activity_at) == (2, first)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="HOT updates: PostgreSQL")
def test_on_postgresql_a_prompt_within_the_minute_rewrites_the_row_in_place(client_for, owner):
    hook = client_for(owner, "ingest")
    send(hook, payload("user_prompt_submit", prompt="one"))

    def updates() -> tuple[int, int]:  # this transaction's, so far
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables"
                " WHERE relid = %s::regclass",
                [Session._meta.db_table],
            )
            return cursor.fetchone() or (0, 0)

    before = updates()
    send(hook, payload("user_prompt_submit", prompt="two"))
    send(hook, payload("user_prompt_submit", prompt="three"))
    after = updates()
    assert (after[0] - before[0], after[1] - before[1]) == (2, 2)  # both HOT
