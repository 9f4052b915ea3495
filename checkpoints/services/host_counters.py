"""Throttle counters in a small file beside the SQLite database, shared by the host's processes.

On SQLite every worker runs on one host: SQLite's WAL mode needs memory shared by the
processes that open the database. A counter row there costs a write transaction per request,
one more turn on the writers' lock than the hook's own write (``bench/hook_path.py``: with
it, UserPromptSubmit ran at about 1,100 req/s; without it about 1,340). So with SQLite the
counters live in a file next to the database (``<database>-counters-v1``), which each process
maps into memory; counting one request reads and writes one slot while holding an exclusive
lock on the file (``flock``, and a thread lock, as ``flock`` does not separate the threads
of one process). The count is exact across processes and threads, like the upsert it stands
in for, and costs microseconds.

The file is a header and ``SLOTS`` slots of (the bucket's digest, its window's end, its
count). A bucket's slot is looked for from the place its digest names, over at most
``PROBES`` slots (open addressing); a slot whose window has closed is free for any bucket.
A bucket that finds neither its slot nor a free one there is counted in the database
(``ThrottleCounter``) instead, under the same lock: the header keeps the latest window so
counted, and a slot claimed in such a window starts from the bucket's database count. So a
request is never counted twice or lost, however full the file.

The whole file is allocated on disk when it is made: a write to a mapped page that the disk
cannot hold would kill the process (SIGBUS) instead of raising an error. (That makes it
unlikely, not impossible: another program may cut the file short, and a copy-on-write file
system may still need space for a write.) A file made only in part (a crash, a full disk) is
completed when next opened; a file deleted or replaced under running workers is seen at
their next count, and they map the one now at the path, so all count in one file.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import mmap
import os
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

MAGIC = b"SGNCNT01"
HEADER = struct.Struct("<8sq")  # magic, the latest window end counted in the database
HEADER_SIZE = 64
SLOT = struct.Struct("<16sqq")  # bucket digest, window end (Unix time), count
COUNT = struct.Struct("<q")
COUNT_OFFSET = 24  # of the count within a slot
SLOTS = 16384
PROBES = 64
# A slot is free this long after its window closed: a request that read the clock just
# before the window's end, then waited for the lock, still finds its slot.
GRACE_SECONDS = 2
FILE_SIZE = HEADER_SIZE + SLOTS * SLOT.size  # 512 KiB
SUFFIX = "-counters-v1"  # a new layout takes a new name: old and new never share a file


class HostCountersUnavailable(Exception):
    """The counters' file could not be made or opened (no space, no permission, not ours)."""


@dataclass
class _Mapped:
    fd: int
    memory: mmap.mmap
    pid: int


_lock = threading.Lock()  # flock does not separate threads sharing a descriptor
_mapped: dict[str, _Mapped] = {}


def host_counters_path(*, database_name: str) -> str | None:
    """The counters' file of the SQLite database file ``database_name``; None for a database
    in memory, which no other process shares."""
    if not database_name or database_name == ":memory:" or database_name.startswith("file:"):
        return None
    return f"{database_name}{SUFFIX}"


def host_counter_increment(
    *,
    path: str,
    bucket: str,
    window_end: int,
    now: float,
    overflow_increment: Callable[[], int],
    overflow_count: Callable[[], int],
) -> int:
    """Count one request in ``bucket``'s window ending at ``window_end``; the window's count
    after it. ``overflow_increment`` counts the request in the database (the file has no
    room for the bucket); ``overflow_count`` reads the bucket's database count for the
    window without counting."""
    digest = hashlib.blake2b(bucket.encode(), digest_size=16).digest()
    start = int.from_bytes(digest[:8], "little") % SLOTS
    with _lock:
        mapped = _locked(path)
        try:
            return _count(
                mapped.memory,
                digest=digest,
                start=start,
                window_end=window_end,
                now=int(now),
                overflow_increment=overflow_increment,
                overflow_count=overflow_count,
            )
        finally:
            fcntl.flock(mapped.fd, fcntl.LOCK_UN)


def host_counters_clear(*, path: str) -> None:
    """Forget every count in the file (the test suite, between tests)."""
    with _lock:
        mapped = _locked(path)
        try:
            mapped.memory[HEADER_SIZE:] = bytes(FILE_SIZE - HEADER_SIZE)
            HEADER.pack_into(mapped.memory, 0, MAGIC, 0)
        finally:
            fcntl.flock(mapped.fd, fcntl.LOCK_UN)


def _count(
    memory: mmap.mmap,
    *,
    digest: bytes,
    start: int,
    window_end: int,
    now: int,
    overflow_increment: Callable[[], int],
    overflow_count: Callable[[], int],
) -> int:
    free: int | None = None
    for probe in range(PROBES):
        offset = HEADER_SIZE + (start + probe) % SLOTS * SLOT.size
        found, end, count = SLOT.unpack_from(memory, offset)
        if end == window_end and found == digest:
            COUNT.pack_into(memory, offset + COUNT_OFFSET, count + 1)
            return int(count + 1)
        if end + GRACE_SECONDS <= now:  # closed a while ago, or never used
            if free is None:
                free = offset
            if end == 0:
                # Never used: a bucket takes the first free slot on its way, so its own slot
                # cannot lie beyond one that was never taken.
                break
    _, overflowed_until = HEADER.unpack_from(memory, 0)
    if free is None:
        # Rare (64 live buckets on one bucket's way), and slow: the database's write, with
        # every count of the host waiting on this lock. Until the window ends, a slot
        # claimed in it first reads the database (one look-up per bucket and window).
        HEADER.pack_into(memory, 0, MAGIC, max(overflowed_until, window_end))
        return overflow_increment()
    total = 1 + (overflow_count() if window_end <= overflowed_until else 0)
    # The window's end last: a process killed half-way leaves a slot that still reads free.
    COUNT.pack_into(memory, free + COUNT_OFFSET, total)
    memory[free : free + 16] = digest
    struct.pack_into("<q", memory, free + 16, window_end)
    return total


def _locked(path: str) -> _Mapped:
    """``path``'s mapping, with the file's lock held; the caller unlocks it. A file deleted
    or replaced since it was mapped is let go, and the one at the path now mapped."""
    mapped = _map(path)
    fcntl.flock(mapped.fd, fcntl.LOCK_EX)
    if os.fstat(mapped.fd).st_nlink > 0:
        return mapped
    fcntl.flock(mapped.fd, fcntl.LOCK_UN)
    _forget(path)
    mapped = _map(path)
    fcntl.flock(mapped.fd, fcntl.LOCK_EX)
    return mapped


def _forget(path: str) -> None:
    mapped = _mapped.pop(path)
    mapped.memory.close()
    os.close(mapped.fd)


def _map(path: str) -> _Mapped:
    mapped = _mapped.get(path)
    if mapped is not None:
        if mapped.pid == os.getpid():
            return mapped
        # A forked child: its inherited descriptor shares the parent's lock, so it opens
        # its own (the inherited one closes without touching the parent's lock).
        _forget(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise HostCountersUnavailable(f"cannot open {os.path.basename(path)}: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            size = os.fstat(fd).st_size
            if size > FILE_SIZE:
                raise HostCountersUnavailable(f"{os.path.basename(path)} is {size} bytes")
            if size < FILE_SIZE:  # new, or made in part: whole on disk before it is mapped
                _allocate(fd, size)
            memory = mmap.mmap(fd, FILE_SIZE)
            magic, _ = HEADER.unpack_from(memory, 0)
            if magic != MAGIC:
                if any(memory[:HEADER_SIZE]):
                    memory.close()
                    raise HostCountersUnavailable(f"{os.path.basename(path)} is not ours")
                HEADER.pack_into(memory, 0, MAGIC, 0)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError as exc:
        os.close(fd)
        raise HostCountersUnavailable(f"cannot map {os.path.basename(path)}: {exc}") from exc
    except HostCountersUnavailable:
        os.close(fd)
        raise
    mapped = _mapped[path] = _Mapped(fd=fd, memory=memory, pid=os.getpid())
    return mapped


def _allocate(fd: int, size: int) -> None:
    """Make the file ``FILE_SIZE`` bytes, all of them on disk; what it holds is kept."""
    allocate = getattr(os, "posix_fallocate", None)
    if allocate is not None:
        try:
            allocate(fd, 0, FILE_SIZE)
            return
        except OSError as exc:  # a file system without it
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
    os.pwrite(fd, bytes(FILE_SIZE - size), size)  # no fallocate (macOS): write the zeros
