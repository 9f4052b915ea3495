"""Queueing a session's checkpoint flush (``pending.pending_enqueue``) goes through one broker
per process: on Redis, one connection for every flush queued, not one each."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from django_q.conf import Conf

from checkpoints.services import pending
from tests.redisutil import RedisServer


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
