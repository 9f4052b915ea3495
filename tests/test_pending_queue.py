"""Queueing checkpoint flushes (``pending.pending_enqueue``): one broker per process (on Redis,
one connection for every flush queued, not one each); one task per batch of marks, which
writes them all once the last is past its debounce; a flush that succeeds leaves no task
result behind, one that fails does."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import Task
from django_q.monitor import save_task
from django_q.signing import SignedPackage

from checkpoints.models import Checkpoint, Trigger
from checkpoints.services import pending
from checkpoints.services.config import config_cache_clear, config_get, config_save
from tests.factories import SessionFactory
from tests.redisutil import RedisServer


@pytest.fixture
def batch(settings: Any) -> float:
    """Flushes batched over half a second (each test starts a fresh batch: conftest)."""
    settings.SIGNET_FLUSH_BATCH_SECONDS = 0.5
    return 0.5


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
    redis_broker, redis_server, settings
):
    pending.pending_enqueue(session_id=1)
    redis_server.stop()
    settings.SIGNET_FLUSH_BATCH_SECONDS = 30.0  # the batch that could not be queued ends
    pending.pending_enqueue(session_id=2)  # logged; the sweep writes its checkpoint later
    redis_server.start()
    pending.pending_enqueue(session_id=3)
    watcher = redis.Redis(port=redis_server.port)
    assert watcher.llen(redis_broker) == 1  # a new server: only the third is there
    watcher.close()


@pytest.mark.slow
def test_one_flush_is_queued_per_batch_of_marks(redis_broker, redis_server, batch):
    watcher = redis.Redis(port=redis_server.port)
    first = time.time()
    for session_id in range(1, 6):
        pending.pending_enqueue(session_id=session_id)
    assert watcher.llen(redis_broker) == 1
    package = SignedPackage.loads(watcher.lindex(redis_broker, 0))
    (marked_before,) = package["args"]
    assert first + batch <= marked_before <= time.time() + batch  # the batch it covers
    time.sleep(batch + 0.05)
    pending.pending_enqueue(session_id=6)  # a new batch
    assert watcher.llen(redis_broker) == 2
    watcher.close()


@pytest.mark.django_db
def test_the_task_of_a_batch_waits_for_its_last_mark_and_writes_every_one_due(settings):
    configure(debounce_seconds=0.3)
    early = _pending_session()
    late = SessionFactory.create(
        prompt_count=10,
        changed_since_checkpoint=True,
        recent_prompts=["ship it"],
        checkpoint_pending_since=timezone.now(),  # marked just now: due in 0.3 s
    )
    written = pending.checkpoints_flush_marked(marked_before=time.time())
    assert written == 2
    assert set(
        Checkpoint.objects.filter(trigger=Trigger.PERIODIC).values_list("session_id", flat=True)
    ) == {early, late.pk}


def configure(**fields: Any) -> None:
    config = config_get()
    for name, value in fields.items():
        setattr(config, name, value)
    config_save(config=config)
    config_cache_clear()  # what the commit does; a test's transaction never commits


def _pending_session() -> int:
    """A session whose periodic checkpoint is pending and past its debounce; its id."""
    session = SessionFactory.create(
        prompt_count=10,
        changed_since_checkpoint=True,
        recent_prompts=["make the cart total include tax"],
        checkpoint_pending_since=timezone.now() - timedelta(minutes=1),
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
    assert abs(marked_before - time.time()) < 60
    for success, result in ((True, False), (False, "RuntimeError: the database went away")):
        outcome = {**package, "success": success, "result": result, "stopped": timezone.now()}
        # "sync": the cluster would close its database connections first, the test's too.
        save_task({**outcome, "sync": True}, pending._broker())
    kept = Task.objects.get(func=pending.FLUSH_TASK)
    assert kept.success is False
    assert kept.result == "RuntimeError: the database went away"
