"""Personas and clients shared by the suite, and the throttle's clock, rates and a read-only
database for the tests of refusals.

Three people, as in every multi-tenant test: the ``owner`` whose data it is, a ``teammate``
(another real user of the same service) and a ``stranger``; neither of the last two may see
or touch the owner's data.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS, connection
from django.utils import timezone
from rest_framework.settings import api_settings
from rest_framework.test import APIClient

from checkpoints.api.throttles import TokenScopeThrottle
from checkpoints.services import pending
from checkpoints.services.config import config_cache_clear
from checkpoints.services.host_counters import host_counters_clear, host_counters_path
from checkpoints.services.throttling import counters_file
from checkpoints.services.tokens import token_create
from tests.factories import UserFactory
from tests.hookutil import Clock
from tests.redisutil import RedisServer

ALL_SCOPES = ("ingest", "read", "write")

# The real Claude Code CLI's fixtures: claude, claude_code_cli, hook_service, model_api.
pytest_plugins = ["tests.claude_cli"]


def pytest_report_header() -> str:
    from tests.browser import CHROMIUM, MISSING, SCREENSHOTS

    if MISSING:
        return f"browser tests: SKIPPED, {MISSING}"
    return f"browser tests: Chromium at {CHROMIUM}; screenshots in {SCREENSHOTS}"


def pytest_sessionfinish() -> None:
    """The test database's counters' file goes with the database (SQLite removes its own)."""
    from django.conf import settings

    name = settings.DATABASES["default"].get("TEST", {}).get("NAME")
    counters = host_counters_path(database_name=str(name)) if name else None
    if counters is not None and os.path.exists(counters):
        os.remove(counters)


@pytest.fixture(autouse=True)
def _fresh_flush_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # A test that batches flushes must not leave the next test's first mark riding on a
    # task queued before it (``pending.pending_enqueue``).
    monkeypatch.setattr(pending, "_batch_ends", float("-inf"))


@pytest.fixture(autouse=True)
def _clean_cache(db: Any) -> Iterator[None]:
    # The database cache outlives a test's transaction only on PostgreSQL's keepdb runs,
    # and the counters' file beside a SQLite database outlives every test: clearing keeps
    # throttle counts and the cached config from leaking between tests.
    cache.clear()
    config_cache_clear()
    counters = counters_file(alias=DEFAULT_DB_ALIAS)
    if counters is not None:
        host_counters_clear(path=counters)
    yield
    cache.clear()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """``timezone.now`` under the test's control: ``clock.advance(minutes=5)``."""
    clock = Clock()
    monkeypatch.setattr(timezone, "now", clock)
    return clock


@pytest.fixture
def owner(db: Any) -> Any:
    return UserFactory(username="alice")


@pytest.fixture
def teammate(db: Any) -> Any:
    return UserFactory(username="bob")


@pytest.fixture
def stranger(db: Any) -> Any:
    return UserFactory(username="mallory")


@pytest.fixture
def superuser(db: Any) -> Any:
    return UserFactory(username="root", is_staff=True, is_superuser=True)


@pytest.fixture
def make_token(db: Any) -> Callable[..., str]:
    """Issue a token: ``make_token(user, "read", "write")`` returns the raw bearer token."""

    def _make(user: Any, *scopes: str, name: str = "test") -> str:
        _, raw = token_create(owner=user, name=name, scopes=scopes or ALL_SCOPES)
        return raw

    return _make


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


@pytest.fixture
def client_for(make_token: Callable[..., str]) -> Callable[..., APIClient]:
    """An ``APIClient`` carrying a fresh token of ``user`` with the given scopes."""

    def _client(user: Any, *scopes: str) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(user, *scopes)}")
        return client

    return _client


# --- Throttling ---------------------------------------------------------------------------

THROTTLE_WINDOW_START = 1_000_020.0  # the start of a one-minute window


@pytest.fixture
def throttle_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The throttle's clock, standing at a window's start: ``throttle_clock[0] += 60``."""
    now = [THROTTLE_WINDOW_START]
    monkeypatch.setattr(TokenScopeThrottle, "timer", lambda self: now[0])
    return now


@pytest.fixture
def throttle_rates(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The throttle rates, to be changed for one test: ``throttle_rates["read"] = "3/min"``."""
    changed = dict(api_settings.DEFAULT_THROTTLE_RATES)
    monkeypatch.setattr(TokenScopeThrottle, "THROTTLE_RATES", changed)
    return changed


@pytest.fixture
def read_only_database() -> Iterator[None]:
    """The database refuses writes, as a standby or a read-only file does; reads work.

    For a test outside a transaction: PostgreSQL's setting applies from the next one on.
    """
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET default_transaction_read_only = on")
        else:
            cursor.execute("PRAGMA query_only = ON")
    yield
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET default_transaction_read_only = off")
        else:
            cursor.execute("PRAGMA query_only = OFF")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real Redis server for the test (skipped without one)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    server = RedisServer(binary, tmp_path)
    server.start()
    yield server
    server.stop()
