"""The counters' file that SQLite deployments count throttles in (``services/host_counters``):
exact across threads, slots reused once their window closes, a full neighbourhood counted
in the database without a request lost or counted twice, and a file it cannot use refused.

Counting across processes is in ``test_throttle_processes.py``, which on SQLite goes through
this file.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import threading

import pytest
from rest_framework.test import APIClient

from checkpoints.models import ThrottleCounter
from checkpoints.services import host_counters, throttling
from checkpoints.services.host_counters import (
    FILE_SIZE,
    GRACE_SECONDS,
    SLOTS,
    HostCountersUnavailable,
    host_counter_increment,
    host_counters_clear,
    host_counters_path,
)
from checkpoints.services.throttling import CounterUnavailable, counter_increment

pytestmark = pytest.mark.django_db

NOW = 1_000_020.0
MINUTE_END = 1_000_080  # of the one-minute window holding NOW
HOUR_END = 1_000_800  # of the one-hour window holding NOW


@pytest.fixture
def path(tmp_path, monkeypatch) -> str:
    """The throttle's counters' file, a new one, whatever the test database."""
    made = str(tmp_path / "signet.sqlite3-counters-v1")
    monkeypatch.setattr(throttling, "counters_file", lambda *, alias: made)
    return made


def count(bucket: str, *, duration: int = 60, now: float = NOW) -> int:
    return counter_increment(bucket=bucket, duration=duration, now=now).total


def rows() -> dict[str, int]:
    return dict(ThrottleCounter.objects.values_list("bucket", "count"))


def start_of(bucket: str) -> int:
    digest = hashlib.blake2b(bucket.encode(), digest_size=16).digest()
    return int.from_bytes(digest[:8], "little") % SLOTS


def colliding(bucket: str, how_many: int) -> list[str]:
    """``how_many`` other buckets whose search starts at ``bucket``'s slot."""
    wanted = start_of(bucket)
    found = (f"other:{n}" for n in itertools.count())
    return list(itertools.islice((b for b in found if start_of(b) == wanted), how_many))


def test_the_path_is_beside_a_database_file_and_none_for_one_in_memory():
    assert host_counters_path(database_name="/srv/signet.sqlite3") == (
        "/srv/signet.sqlite3-counters-v1"
    )
    assert host_counters_path(database_name=":memory:") is None
    assert host_counters_path(database_name="file:memorydb?mode=memory&cache=shared") is None


def test_counts_per_bucket_and_window(path):
    assert [count("read:1") for _ in range(3)] == [1, 2, 3]
    assert count("read:2") == 1
    assert count("read:1", now=NOW + 60) == 1
    assert rows() == {}  # all in the file


def test_the_file_is_allocated_whole_when_made(path):
    count("read:1")
    with open(path, "rb") as made:
        assert len(made.read()) == FILE_SIZE


def test_threads_counting_at_once_lose_nothing_and_repeat_nothing(path):
    threads, each = 8, 200
    results: list[int] = []
    lock = threading.Lock()
    gate = threading.Barrier(threads)

    def work() -> None:
        gate.wait()
        mine = [count("ingest:1") for _ in range(each)]
        with lock:
            results.extend(mine)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(results) == list(range(1, threads * each + 1))


def test_a_closed_windows_slot_is_taken_by_the_next_bucket(path, monkeypatch):
    monkeypatch.setattr(host_counters, "PROBES", 1)  # one slot each: reuse or overflow
    [other] = colliding("read:1", 1)
    assert count("read:1") == 1
    assert count(other) == 1  # the slot is live: counted in the database
    assert rows() == {other: 1}
    # The next minute, once the grace after the window's end is over: the slot is free.
    assert count(other, now=MINUTE_END + GRACE_SECONDS) == 1
    assert rows() == {other: 1}


def test_a_slot_stays_its_buckets_for_a_moment_after_its_window(path, monkeypatch):
    monkeypatch.setattr(host_counters, "PROBES", 1)
    [other] = colliding("read:1", 1)
    assert count("read:1") == 1
    # Another bucket's request, its clock just past the window's end, must not take the slot
    # of a request that read its clock just before it and is still on its way to the lock.
    assert count(other, now=MINUTE_END + 1) == 1
    assert rows() == {other: 1}  # counted in the database instead
    assert count("read:1", now=MINUTE_END - 0.001) == 2


def test_a_full_neighbourhood_overflows_to_the_database_and_the_count_carries_back(
    path, monkeypatch, django_assert_num_queries
):
    monkeypatch.setattr(host_counters, "PROBES", 2)
    first, second, third = colliding("read:1", 3)
    assert count(first) == 1  # its window closes at MINUTE_END
    assert count(second, duration=86_400) == 1
    # No room left on the third bucket's way: it is counted in the database.
    assert [count(third, duration=3600) for _ in range(3)] == [1, 2, 3]
    assert rows() == {third: 3}
    # The first bucket's window closes while the third's is still open: the third takes the
    # freed slot, starting from the three requests the database counted (one read), and is
    # counted in the file from there on.
    freed = MINUTE_END + GRACE_SECONDS
    with django_assert_num_queries(1):
        assert count(third, duration=3600, now=freed) == 4
    with django_assert_num_queries(0):
        assert count(third, duration=3600, now=freed + 1) == 5
    assert rows() == {third: 3}
    assert count(third, duration=3600, now=HOUR_END) == 1  # its next window


def test_a_file_of_another_size_is_refused(path):
    with open(path, "wb") as other:
        other.write(b"not a counters file")
    with pytest.raises(CounterUnavailable):
        count("read:1")


def test_a_file_of_the_size_but_not_ours_is_refused(path):
    with open(path, "wb") as other:
        other.write(b"X" * FILE_SIZE)
    with pytest.raises(HostCountersUnavailable):
        host_counter_increment(
            path=path,
            bucket="read:1",
            window_end=MINUTE_END,
            now=NOW,
            overflow_increment=lambda: 0,
            overflow_count=lambda: 0,
        )


def test_a_file_made_in_part_is_completed(path):
    with open(path, "wb") as part:
        part.write(bytes(100))  # a crash, or a full disk, while it was being made
    assert count("read:1") == 1
    assert count("read:1") == 2
    with open(path, "rb") as made:
        assert len(made.read()) == FILE_SIZE


def test_a_file_deleted_under_a_worker_is_let_go_for_the_new_one(path):
    assert [count("read:1") for _ in range(3)] == [1, 2, 3]
    os.remove(path)  # someone cleans the data folder while the service runs
    assert count("read:1") == 1  # a new file: every worker counts in it from now on
    assert count("read:1") == 2
    assert os.path.getsize(path) == FILE_SIZE


def test_clearing_forgets_every_count(path):
    count("read:1")
    count("read:1")
    host_counters_clear(path=path)
    assert count("read:1") == 1


def test_a_counters_file_that_cannot_be_used_refuses_requests_with_503(owner, make_token, path):
    with open(path, "wb") as broken:
        broken.write(b"x" * 10)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(owner, 'read')}")
    response = client.get("/api/whoami/")
    assert response.status_code == 503
    assert response.json()["error"] == "unavailable"
    assert response["Retry-After"] == "30"
