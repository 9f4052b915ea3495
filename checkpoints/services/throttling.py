"""Throttle counters: one atomic count per (bucket, fixed window), in Redis, a file or the
database.

Each request is counted and its count read back in one step, so workers counting side by
side never lose a request and a window lets exactly its limit through. Where the count is
kept follows the stores the deployment has:

- with the Redis cache (``REDIS_URL``), a key raised by ``INCR`` and given its expiry in
  the same script, one command on a connection the thread keeps: every host shares it;
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
import os
import threading
import time
import weakref
from functools import cache, partial
from typing import NamedTuple

from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from django.db import connections, router
from redis import ConnectionPool, Redis
from redis.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError
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


# Counts and gives the key its expiry in one command, atomically: Redis runs a script whole.
_REDIS_INCREMENT = (
    "local count = redis.call('INCR', KEYS[1]) redis.call('EXPIRE', KEYS[1], ARGV[1]) return count"
)


def _redis_increment(cache: RedisCache, *, bucket: str, window_end: int, now: float) -> int:
    key = cache.make_key(  # any bytes make a Redis key: no memcached checks
        REDIS_KEY_FORMAT % {"bucket": bucket, "window_end": window_end}
    )
    # The key outlives its window by a little, so a worker whose clock lags still finds it.
    ttl = max(1, int(window_end - now) + 2)
    pool = _redis_pool(cache)
    connection, reused = _redis_connection(pool)
    try:
        try:
            return _redis_count(connection, key=key, ttl=ttl)
        except RedisConnectionError:
            if not reused:
                raise
        # It broke while it sat idle (Redis restarted, a proxy closed it): once more, on a
        # new connection. Were the first count carried out all the same, the request is
        # counted twice: stricter, never laxer.
        connection, _ = _redis_connection(pool)
        return _redis_count(connection, key=key, ttl=ttl)
    except RedisError as exc:
        raise CounterUnavailable(str(exc)) from exc


def _eval_command(script: str) -> bytes:
    """The start of ``EVAL script 1 <key> <ttl>`` in Redis's protocol (RESP): an array of
    five bulk strings, of which the first three never change."""
    parts = (b"EVAL", script.encode(), b"1")
    return b"*5\r\n" + b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)


_REDIS_INCREMENT_HEAD = _eval_command(_REDIS_INCREMENT)


def _redis_count(connection: Connection, *, key: str, ttl: int) -> int:
    # The command is sent ready-made: redis-py's packing of it, at every count, was a
    # third of the client's CPU for it (measured with hiredis reading the reply).
    name, seconds = key.encode(), b"%d" % ttl
    command = _REDIS_INCREMENT_HEAD + b"$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
        len(name),
        name,
        len(seconds),
        seconds,
    )
    try:
        connection.send_packed_command([command])  # type: ignore[no-untyped-call]
        return int(connection.read_response())
    except RedisError:
        # Whatever of the reply is still to come must not be read as the next count's.
        _redis_connection_drop(connection)
        raise


# Each thread counts on a connection of its own, made once with the cache pool's settings
# and kept: through a Redis client, a count cost 140 us of the worker's CPU (a pipeline's
# MULTI, INCR, EXPIRE and EXEC, the pool's check-out and health check) against 45 us for one
# command on a kept connection (measured). It is not the pool's: a thread that ends takes
# its connection with it. Django's cache builds a new client at each call, so the pool is
# looked up through one client per cache client, made once.
_clients: weakref.WeakKeyDictionary[object, Redis] = weakref.WeakKeyDictionary()


class _Kept(threading.local):
    pool: ConnectionPool | None = None
    connection: Connection | None = None
    pid = 0  # the process that made it: a forked worker makes its own


_kept = _Kept()


def _redis_pool(cache: RedisCache) -> ConnectionPool:
    owner = cache._cache
    client = _clients.get(owner)
    if client is None:
        client = _clients[owner] = owner.get_client(write=True)
    return client.connection_pool


def _redis_connection(pool: ConnectionPool) -> tuple[Connection, bool]:
    """This thread's connection to ``pool``'s server (it connects when first used), and
    whether it was used before."""
    kept = _kept
    if kept.connection is not None and kept.pool is pool and kept.pid == os.getpid():
        return kept.connection, True
    if kept.connection is not None and kept.pid == os.getpid():
        _redis_connection_drop(kept.connection)  # the cache was configured anew (tests)
    kept.pool, kept.pid = pool, os.getpid()
    kept.connection = pool.connection_class(**pool.connection_kwargs)
    return kept.connection, False


def _redis_connection_drop(connection: Connection) -> None:
    connection.disconnect()  # type: ignore[no-untyped-call]
    if _kept.connection is connection:
        _kept.connection = None
