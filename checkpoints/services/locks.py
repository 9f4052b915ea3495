"""Serialising SQLite writers without SQLite's sleeping busy handler.

SQLite lets one writer in at a time; the others poll with sleeps that grow to 100 ms, so
under load the CPU idles while requests wait. On SQLite, write transactions therefore
queue on a file lock first (plus a thread lock, as flock does not separate threads sharing
a descriptor): the kernel wakes the next writer the moment the lock is free. On other
databases this is a no-op; their row locks already queue without sleeping.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

# Re-entrant: a transaction's on-commit work (a synchronous task in tests) may write again.
_thread_lock = threading.RLock()
_depth = threading.local()
_fd: int | None = None
_fd_pid: int | None = None


def _lock_fd() -> int:
    global _fd, _fd_pid
    if _fd is None or _fd_pid != os.getpid():  # a forked worker needs its own descriptor
        path = os.path.join(settings.DATA_DIR, "sqlite-write.lock")
        _fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        _fd_pid = os.getpid()
    return _fd


@contextmanager
def write_serialized() -> Iterator[None]:
    """Hold the writers' queue for the duration of one write transaction (SQLite only)."""
    db = connections[DEFAULT_DB_ALIAS]  # once: each look-up goes through a thread-local
    if db.vendor != "sqlite" or db.in_atomic_block:
        yield
        return
    with _thread_lock:
        depth = getattr(_depth, "value", 0)
        _depth.value = depth + 1
        try:
            if depth:
                yield
                return
            fd = _lock_fd()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            _depth.value = depth
