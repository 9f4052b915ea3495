"""Throttle counters: one atomic count per (bucket, fixed window), in Redis, a file or the
database.

Each request is counted and its count read back in one step, so workers counting side by
side never lose a request and a window lets exactly its limit through. Where the count is
kept follows the stores the deployment has:

- with the Redis cache (``REDIS_URL``), a key raised by ``INCR`` and given its expiry in
  the same MULTI/EXEC: every host shares it;
- on SQLite, a slot in the counters' file beside the database (``host_counters``): SQLite
  keeps every worker on one host, and a row would cost a write transaction per request;
- otherwise (PostgreSQL without Redis), a ``ThrottleCounter`` row written by one upsert
  (``INSERT … ON CONFLICT DO UPDATE … RETURNING``). On SQLite, a bucket the file has no
  room for is counted so too.

A counter that cannot count fails closed: a database error (read-only, unreachable)
propagates, and a Redis or counters' file error becomes ``CounterUnavailable``; the API
answers 503 to both rather than letting requests through uncounted.
"""

from __future__ import annotations

import hashlib
import time
import weakref
from functools import cache, partial
from typing import NamedTuple

from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from django.db import connections, router
from redis import Redis
from redis.exceptions import RedisError

from checkpoints.models import ThrottleCounter
from checkpoints.services.host_counters import (
    HostCountersUnavailable,
    host_counter_increment,
    host_counters_path,
)
from checkpoints.services.locks import write_serialized
from checkpoints.services.statements import Statement, statement_build, statement_run

REDIS_KEY_FORMAT = "throttle:%(bucket)s:%(window_end)d"
_BUCKET_MAX = ThrottleCounter._meta.get_field("bucket").max_length or 150


class CounterUnavailable(Exception):
    """The counter's store (Redis, SQLite's counters' file) could not be used: the request
    cannot be counted."""


class WindowCount(NamedTuple):
    total: int  # requests counted in the window, the one just counted included
    window_end: int  # Unix time at which the window closes


def counter_increment(*, bucket: str, duration: int, now: float) -> WindowCount:
    """Count one request in ``bucket``'s window of ``duration`` seconds that holds ``now``.

    Windows are aligned on multiples of ``duration`` since the epoch, so every worker puts a
    request in the same window. Returns the window's count after this request.
    """
    window_end = (int(now) // duration + 1) * duration
    if len(bucket) > _BUCKET_MAX:  # an address header can be long; its hash is not
        bucket = "sha256:" + hashlib.sha256(bucket.encode()).hexdigest()
    cache = caches["default"]
    if isinstance(cache, RedisCache):
        count = _redis_increment(cache, bucket=bucket, window_end=window_end, now=now)
        return WindowCount(total=count, window_end=window_end)
    alias = router.db_for_write(ThrottleCounter) or "default"
    path = counters_file(alias=alias)
    if path is None:
        count = _database_increment(alias=alias, bucket=bucket, window_end=window_end)
    else:
        try:
            count = host_counter_increment(
                path=path,
                bucket=bucket,
                window_end=window_end,
                now=now,
                overflow_increment=partial(
                    _database_increment, alias=alias, bucket=bucket, window_end=window_end
                ),
                overflow_count=partial(
                    _database_count, alias=alias, bucket=bucket, window_end=window_end
                ),
            )
        except HostCountersUnavailable as exc:
            raise CounterUnavailable(str(exc)) from exc
    return WindowCount(total=count, window_end=window_end)


def counters_file(*, alias: str) -> str | None:
    """The host's counters' file for the database ``alias`` when it is a SQLite file."""
    connection = connections[alias]
    if connection.vendor != "sqlite":
        return None
    return host_counters_path(database_name=str(connection.settings_dict["NAME"]))


def counters_delete_expired(*, now: float | None = None) -> int:
    """Delete the database counters of windows that have closed; how many went.

    Redis counters expire by themselves.
    """
    now = time.time() if now is None else now
    deleted, _ = ThrottleCounter.objects.filter(window_end__lte=int(now)).delete()
    return deleted


@cache
def _upsert_statement(alias: str) -> Statement:
    quote = connections[alias].ops.quote_name
    table = quote(ThrottleCounter._meta.db_table)
    count = quote("count")
    return statement_build(
        alias=alias,
        sql=(
            f"INSERT INTO {table} ({quote('bucket')}, {quote('window_end')}, {count}) "  # noqa: S608
            f"VALUES (%s, %s, 1) "
            f"ON CONFLICT ({quote('bucket')}, {quote('window_end')}) "
            f"DO UPDATE SET {count} = {table}.{count} + 1 "
            f"RETURNING {count}"
        ),
        returns_rows=True,
    )


def _database_increment(*, alias: str, bucket: str, window_end: int) -> int:
    # A write like the engine's: on SQLite it queues on the writers' lock rather than in
    # SQLite's sleeping busy handler, which would hold the request up to 100 ms a poll.
    with write_serialized():
        outcome = statement_run(statement=_upsert_statement(alias), params=[bucket, window_end])
    return int(outcome.rows[0][0])


def _database_count(*, alias: str, bucket: str, window_end: int) -> int:
    found = (
        ThrottleCounter.objects.using(alias)
        .filter(bucket=bucket, window_end=window_end)
        .values_list("count", flat=True)
        .first()
    )
    return found or 0


def _redis_increment(cache: RedisCache, *, bucket: str, window_end: int, now: float) -> int:
    key = cache.make_key(  # any bytes make a Redis key: no memcached checks
        REDIS_KEY_FORMAT % {"bucket": bucket, "window_end": window_end}
    )
    # The key outlives its window by a little, so a worker whose clock lags still finds it.
    ttl = max(1, int(window_end - now) + 2)
    try:
        client = _redis_client(cache)
        with client.pipeline(transaction=True) as pipe:
            pipe.incr(key)
            pipe.expire(key, ttl)
            count, _ = pipe.execute()
    except RedisError as exc:
        raise CounterUnavailable(str(exc)) from exc
    return int(count)


# One Redis client per cache client, made once: Django's cache builds a new Redis client for
# every call (setting up its ~170 response callbacks each time), and a throttle counts every
# request. The client borrows connections from the cache client's pool, and goes with it.
_clients: weakref.WeakKeyDictionary[object, Redis] = weakref.WeakKeyDictionary()


def _redis_client(cache: RedisCache) -> Redis:
    owner = cache._cache
    client = _clients.get(owner)
    if client is None:
        client = _clients[owner] = owner.get_client(write=True)
    return client
