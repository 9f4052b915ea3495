"""Time-sortable identifiers.

Python 3.11's ``uuid`` has no version 7, so it is built here from RFC 9562 §5.7: 48 bits of
Unix milliseconds, a 12-bit counter (``rand_a``, §6.2 method 1) and 62 random bits. Ids made
by one process are strictly increasing, even within one millisecond; across processes they
sort by millisecond. B-tree inserts stay at the right-hand edge of the index.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_COUNTER_BITS = 12
_COUNTER_MAX = (1 << _COUNTER_BITS) - 1
_lock = threading.Lock()
_last_ms = -1
_last_counter = 0


def uuid7(*, unix_ms: int | None = None) -> uuid.UUID:
    """Return a new version-7 UUID for now, or for ``unix_ms`` (outside the monotonic run)."""
    global _last_ms, _last_counter
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    if unix_ms is not None:
        return _assemble(unix_ms, int.from_bytes(os.urandom(2), "big") & _COUNTER_MAX, rand_b)
    ms = time.time_ns() // 1_000_000
    with _lock:
        if ms <= _last_ms:
            # Same (or a clock that stepped back) millisecond: count on from the last id.
            ms, counter = _last_ms, _last_counter + 1
            if counter > _COUNTER_MAX:
                ms, counter = ms + 1, 0
        else:
            # A fresh millisecond starts the counter low, leaving room to count up.
            counter = int.from_bytes(os.urandom(2), "big") & (_COUNTER_MAX >> 1)
        _last_ms, _last_counter = ms, counter
    return _assemble(ms, counter, rand_b)


def _assemble(ms: int, counter: int, rand_b: int) -> uuid.UUID:
    value = (ms & 0xFFFF_FFFF_FFFF) << 80
    value |= 0x7 << 76  # version
    value |= counter << 64
    value |= 0b10 << 62  # variant
    value |= rand_b
    return uuid.UUID(int=value)
