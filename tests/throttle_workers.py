"""Work for the processes of ``test_throttle_processes.py``: each is a fresh interpreter
(spawned, so it shares no connection with the test) that sets Django up on the test database.

Nothing from Django's apps may be imported at the top: the module is imported in the
child before ``django.setup()``.
"""

from __future__ import annotations

from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any


def _setup(database_name: str) -> None:
    import django
    from django.conf import settings

    settings.DATABASES["default"]["NAME"] = database_name
    django.setup()


def increment(
    database_name: str, bucket: str, times: int, now: float, start: Barrier, out: Queue[Any]
) -> None:
    """Count ``times`` requests in ``bucket``; put the counts the counter returned."""
    try:
        _setup(database_name)
        from django.db import connections

        from checkpoints.services.throttling import counter_increment

        start.wait(timeout=60)
        counts = [
            counter_increment(bucket=bucket, duration=60, now=now).total for _ in range(times)
        ]
        connections.close_all()
        out.put(counts)
    except BaseException as exc:
        out.put(repr(exc))


def request(
    database_name: str,
    authorization: str,
    times: int,
    now: float,
    start: Barrier,
    out: Queue[Any],
) -> None:
    """GET /api/whoami/ ``times`` times through the whole stack; put the status codes."""
    try:
        _setup(database_name)
        from django.db import connections
        from django.test.utils import setup_test_environment
        from rest_framework.test import APIClient

        from checkpoints.api.throttles import TokenScopeThrottle

        setup_test_environment()
        TokenScopeThrottle.timer = lambda self: now
        client = APIClient()
        start.wait(timeout=60)
        statuses = [
            client.get("/api/whoami/", HTTP_AUTHORIZATION=authorization).status_code
            for _ in range(times)
        ]
        connections.close_all()
        out.put(statuses)
    except BaseException as exc:
        out.put(repr(exc))
