"""Queueing checkpoint flushes (``pending.pending_enqueue``): one broker per process (on Redis,
one connection for every flush queued, not one each); one task per batch of marks, which
writes them all once the last is past its debounce; a flush that succeeds leaves no task
result behind, one that fails does."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis
from django.db import DatabaseError
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import Task
from django_q.monitor import save_task
from django_q.signing import SignedPackage

from checkpoints import tasks
from checkpoints.models import Checkpoint, Trigger
from checkpoints.services import pending
from tests.factories import SessionFactory
from tests.hookutil import Clock, configure
from tests.redisutil import RedisServer


class Monotonic:
    """``monotonic`` for ``pending``'s batches, moved by the test instead of sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def batch(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Monotonic:
    """Flushes batched over half a second on a clock the test moves (each test starts a
    fresh batch: conftest)."""
    settings.SIGNET_FLUSH_BATCH_SECONDS = 0.5
    clock = Monotonic()
    monkeypatch.setattr(pending, "monotonic", clock)
    return clock


@pytest.fixture
def redis_broker(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """django-q2's broker on ``redis_server`` for the test; the queue's key."""
    monkeypatch.setattr(Conf, "SYNC", False)  # the suite runs tasks in place otherwise
    monkeypatch.setattr(Conf, "ORM", None)
    monkeypatch.setattr(Conf, "REDIS", f"redis://127.0.0.1:{redis_server.port}/0")
    pending._broker.cache_clear()
    yield f"django_q:{Conf.CLUSTER_NAME}:q"
    pending._broker.cache_clear()


@pytest.mark.slow
def test_flushes_queued_on_redis_share_one_connection(redis_broker, redis_server):
    watcher = redis.Redis(port=redis_server.port)
    before = watcher.info("stats")["total_connections_received"]
    for session_id in range(1, 6):
        pending.pending_enqueue(session_id=session_id)
    assert watcher.llen(redis_broker) == 5  # every flush is queued
    opened = watcher.info("stats")["total_connections_received"] - before
    assert opened == 1  # django-q2 alone would have opened 5
    watcher.close()


@pytest.mark.slow
def test_a_flush_queued_while_redis_is_down_is_lost_quietly_and_the_next_is_queued(
    redis_broker, redis_server
):
    pending.pending_enqueue(session_id=1)
    redis_server.stop()
    pending.pending_enqueue(session_id=2)  # logged; the sweep writes its checkpoint later
    redis_server.start()
    pending.pending_enqueue(session_id=3)
    watcher = redis.Redis(port=redis_server.port)
    assert watcher.llen(redis_broker) == 1  # a new server: only the third is there
    watcher.close()


@pytest.mark.slow
def test_one_flush_is_queued_per_batch_of_marks(redis_broker, redis_server, batch):
    watcher = redis.Redis(port=redis_server.port)
    first = timezone.now().timestamp()
    for session_id in range(1, 6):
        pending.pending_enqueue(session_id=session_id)
        batch.now += 0.09
    assert watcher.llen(redis_broker) == 1
    package = SignedPackage.loads(watcher.lindex(redis_broker, 0))
    (marked_before,) = package["args"]
    # The batch it covers, by the clock marks are stamped with.
    assert first + 0.5 <= marked_before <= timezone.now().timestamp() + 0.5
    batch.now += 0.05  # the batch is over
    pending.pending_enqueue(session_id=6)
    assert watcher.llen(redis_broker) == 2
    watcher.close()


@pytest.mark.slow
def test_a_batch_whose_flush_could_not_be_queued_tries_once_more_after_it(
    redis_broker, redis_server, batch
):
    redis_server.stop()
    pending.pending_enqueue(session_id=1)  # logged
    redis_server.start()
    pending.pending_enqueue(session_id=2)  # rides on the batch: its session's next event or
    watcher = redis.Redis(port=redis_server.port)  # the sweep writes it
    assert watcher.llen(redis_broker) == 0
    batch.now += 0.5
    pending.pending_enqueue(session_id=3)
    assert watcher.llen(redis_broker) == 1
    watcher.close()


@pytest.fixture
def slept(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """What ``pending`` sleeps, in seconds: the clock moves on by as much instead."""
    asked: list[float] = []

    def sleep(seconds: float) -> None:
        asked.append(seconds)
        clock.advance(seconds=seconds)

    monkeypatch.setattr(pending, "sleep", sleep)
    return asked


@pytest.mark.django_db
def test_the_task_of_a_batch_waits_for_its_last_mark_and_writes_every_one_due(clock, slept):
    configure(debounce_seconds=3)
    early = _pending_session()
    late = _pending_session(marked=clock.now)  # due in 3 s
    written = pending.checkpoints_flush_marked(marked_before=clock.now.timestamp())
    assert slept == [pytest.approx(3)]
    assert written == 2
    assert set(
        Checkpoint.objects.filter(trigger=Trigger.PERIODIC).values_list("session_id", flat=True)
    ) == {early, late}


@pytest.mark.django_db
def test_a_task_waits_for_its_batch_and_a_bounded_debounce_then_leaves_the_rest(
    clock, slept, settings
):
    settings.SIGNET_FLUSH_BATCH_SECONDS = 1.0
    configure(debounce_seconds=600)
    late = _pending_session(marked=clock.now)
    assert pending.checkpoints_flush_marked(marked_before=clock.now.timestamp() + 1) == 0
    assert slept == [pytest.approx(1 + pending.MAX_DEBOUNCE_WAIT_SECONDS)]
    assert not Checkpoint.objects.filter(session_id=late).exists()  # the sweep's, later


@pytest.mark.django_db
def test_a_session_that_cannot_be_written_leaves_the_others_written(monkeypatch):
    first, broken, last = _pending_session(), _pending_session(), _pending_session()
    write = pending.checkpoint_flush

    def flush(*, session_id: int, now: Any = None) -> bool:
        if session_id == broken:
            raise DatabaseError("could not serialize access")
        return bool(write(session_id=session_id, now=now))

    monkeypatch.setattr(pending, "checkpoint_flush", flush)
    with pytest.raises(pending.FlushFailed, match="1 of 3"):
        pending.checkpoints_flush_due()
    written = Checkpoint.objects.values_list("session_id", flat=True)
    assert sorted(written) == sorted([first, last])


def _pending_session(marked: datetime | None = None) -> int:
    """A session whose periodic checkpoint is pending, marked a minute ago unless
    ``marked``; its id."""
    session = SessionFactory.create(
        prompt_count=10,
        changed_since_checkpoint=True,
        recent_prompts=["make the cart total include tax"],
        checkpoint_pending_since=marked or timezone.now() - timedelta(minutes=1),
    )
    return int(session.pk)


@pytest.mark.django_db
def test_a_flush_that_succeeds_leaves_no_task_result():
    session_id = _pending_session()
    pending.pending_enqueue(session_id=session_id)  # the suite's cluster runs it in place
    assert Checkpoint.objects.filter(session_id=session_id, trigger=Trigger.PERIODIC).count() == 1
    assert not Task.objects.filter(func=pending.FLUSH_TASK).exists()


@pytest.mark.slow
@pytest.mark.django_db
def test_a_flush_queued_is_kept_only_if_it_fails(redis_broker, redis_server):
    # The suite runs tasks in place, where django-q2 raises a task's error instead of
    # keeping it: here the package is taken as the cluster takes it, and its outcome saved.
    pending.pending_enqueue(session_id=7)
    watcher = redis.Redis(port=redis_server.port)
    package = SignedPackage.loads(watcher.lpop(redis_broker))
    watcher.close()
    assert package["func"] == pending.FLUSH_TASK
    (marked_before,) = package["args"]  # the suite's batch is 0: the mark's own time
    assert abs(marked_before - timezone.now().timestamp()) < 60
    for success, result in ((True, False), (False, "RuntimeError: the database went away")):
        outcome = {**package, "success": success, "result": result, "stopped": timezone.now()}
        # "sync": the cluster would close its database connections first, the test's too.
        save_task({**outcome, "sync": True}, pending._broker())
    kept = Task.objects.get(func=pending.FLUSH_TASK)
    assert kept.success is False
    assert kept.result == "RuntimeError: the database went away"


@pytest.mark.django_db
def test_a_flush_task_queued_by_an_earlier_version_still_writes_what_is_due():
    session_id = _pending_session()
    assert tasks.checkpoint_flush_task(session_id) == 1
    assert Checkpoint.objects.filter(session_id=session_id, trigger=Trigger.PERIODIC).exists()


@pytest.mark.django_db
def test_failures_in_a_row_stop_the_flush_instead_of_trying_every_session(monkeypatch):
    due = [_pending_session() for _ in range(6)]
    tried: list[int] = []

    def flush(*, session_id: int, now: Any = None) -> bool:
        tried.append(session_id)
        raise DatabaseError("the database went away")

    monkeypatch.setattr(pending, "checkpoint_flush", flush)
    with pytest.raises(pending.FlushFailed, match="3 pending checkpoints in a row"):
        pending.checkpoints_flush_due()
    assert tried == due[: pending.FLUSH_FAILURES_IN_A_ROW]  # oldest mark first
