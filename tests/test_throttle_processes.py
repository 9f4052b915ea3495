"""Throttle counts stay exact with several processes counting at once, in the test
database's store (on SQLite the counters' file beside it, on PostgreSQL rows): each process
is a fresh interpreter, as a web server process is, started together behind a barrier.
"""

from __future__ import annotations

import multiprocessing
from collections import Counter
from collections.abc import Callable
from itertools import chain
from typing import Any

import pytest
from django.db import connection

from tests import throttle_workers

PROCESSES = 8
WINDOW_START = 1_000_020.0


def run_processes(target: Callable[..., None], *args: Any) -> list[list[Any]]:
    """Run ``target(database, *args, start, out)`` in PROCESSES processes; their results."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(PROCESSES)
    out = context.Queue()
    database = str(connection.settings_dict["NAME"])
    processes = [
        context.Process(target=target, args=(database, *args, start, out)) for _ in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    results = [out.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
    failures = [result for result in results if not isinstance(result, list)]
    assert not failures, failures[:3]
    return results


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_increments_from_several_processes_each_get_their_own_count():
    per_process = 100
    results = run_processes(throttle_workers.increment, "read:1", per_process, WINDOW_START)
    counts = sorted(chain.from_iterable(results))
    assert counts == list(range(1, PROCESSES * per_process + 1))  # none lost, none repeated


@pytest.fixture
def read_rate_100(monkeypatch):
    monkeypatch.setenv("SIGNET_THROTTLE_READ", "100/min")  # the spawned processes read it
    monkeypatch.setenv("SIGNET_THROTTLE_ANON", "100/min")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("read_rate_100")
def test_requests_from_several_processes_let_exactly_the_limit_through(make_token, owner):
    authorization = f"Bearer {make_token(owner, 'read')}"
    results = run_processes(throttle_workers.request, authorization, 40, WINDOW_START)
    assert Counter(chain.from_iterable(results)) == {200: 100, 429: PROCESSES * 40 - 100}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("read_rate_100")
def test_refused_tokens_from_several_processes_are_throttled_at_exactly_the_limit():
    results = run_processes(throttle_workers.request, "Bearer sig_wrong", 40, WINDOW_START)
    assert Counter(chain.from_iterable(results)) == {401: 100, 429: PROCESSES * 40 - 100}
