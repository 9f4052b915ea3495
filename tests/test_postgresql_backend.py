"""``signet_site.postgresql``: a reused connection is health-checked only after sitting idle.

Each test opens its own connection to the test database (outside the test's transaction)
and plays requests on it as Django's request signals do: ``close_if_unusable_or_obsolete``
as a request starts and ends, a query in between.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import ProgrammingError, connection, connections

from signet_site.postgresql import base

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL backend"),
]


@pytest.fixture
def wrapper(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A fresh connection of the test database, counting the health checks it runs."""
    wrapped = connections.create_connection("default")
    assert isinstance(wrapped, base.DatabaseWrapper)
    made: Any = wrapped
    # As the service runs: persistent connections, health checks on.
    made.settings_dict = {**made.settings_dict, "CONN_MAX_AGE": 600, "CONN_HEALTH_CHECKS": True}
    made.checks = 0
    real = made.is_usable

    def counted() -> bool:
        made.checks += 1
        return bool(real())

    monkeypatch.setattr(made, "is_usable", counted)
    yield made
    made.close()


def request(wrapper: Any) -> None:
    """One request that queries the database, between the signals' calls."""
    wrapper.close_if_unusable_or_obsolete()
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT 1")
    wrapper.close_if_unusable_or_obsolete()


def test_a_connection_that_just_answered_is_reused_without_a_check(wrapper):
    request(wrapper)  # connects: a new connection needs no check
    for _ in range(5):
        request(wrapper)
    assert wrapper.checks == 0
    assert wrapper.connection is not None


def test_a_connection_idle_past_the_bound_is_checked_once_per_request(wrapper):
    request(wrapper)
    wrapper.answered_at -= base.RECENTLY_ANSWERED_SECONDS + 1
    request(wrapper)
    assert wrapper.checks == 1
    request(wrapper)  # it answered again just now
    assert wrapper.checks == 1


def test_a_request_that_met_an_error_does_not_count_as_an_answer(wrapper):
    request(wrapper)
    wrapper.answered_at -= base.RECENTLY_ANSWERED_SECONDS + 1  # that answer is old now
    wrapper.close_if_unusable_or_obsolete()
    with pytest.raises(ProgrammingError), wrapper.cursor() as cursor:  # checked: idle
        cursor.execute("SELECT * FROM no_such_table")
    assert wrapper.errors_occurred
    wrapper.close_if_unusable_or_obsolete()  # Django checks it at once, as before
    assert wrapper.checks == 2
    request(wrapper)  # the failed request answered nothing: checked again
    assert wrapper.checks == 3


def test_a_task_worker_that_closes_only_before_each_task_gets_an_idle_connection_checked(
    wrapper,
):
    """django-q2 calls close_old_connections before each task, never after: the time a
    connection answered is when it was used, not when the next task began."""
    wrapper.close_if_unusable_or_obsolete()
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT 1")
    wrapper.used_at -= base.RECENTLY_ANSWERED_SECONDS + 1  # that task ran a while ago
    wrapper.close_if_unusable_or_obsolete()  # the next task begins
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert wrapper.checks == 1


def test_a_broken_idle_connection_is_replaced_before_the_query(wrapper):
    request(wrapper)
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        first_pid = cursor.fetchone()[0]
    wrapper.close_if_unusable_or_obsolete()
    # The server ends the session, as a restart would; the connection then sits idle.
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [first_pid])
    wrapper.answered_at -= base.RECENTLY_ANSWERED_SECONDS + 1
    wrapper.close_if_unusable_or_obsolete()
    with wrapper.cursor() as cursor:  # the check fails, the connection is replaced
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != first_pid
    assert wrapper.checks == 1
