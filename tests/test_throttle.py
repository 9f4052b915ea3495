"""Per-token, per-scope throttling, with the throttle's clock patched instead of sleeping.

The counting itself across processes is in ``test_throttle_processes.py``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from pathlib import Path

import pytest
from django.core.cache import caches
from django.db import DEFAULT_DB_ALIAS, connection
from rest_framework.settings import api_settings
from rest_framework.test import APIClient

from checkpoints import tasks
from checkpoints.api.throttles import TokenScopeThrottle
from checkpoints.models import ApiToken, ThrottleCounter
from checkpoints.services import throttling
from checkpoints.services.throttling import counter_increment, counters_delete_expired
from checkpoints.services.tokens import token_revoke
from tests.conftest import THROTTLE_WINDOW_START
from tests.test_serve import free_port

pytestmark = pytest.mark.django_db

WHOAMI = "/api/whoami/"
SCHEMA = "/api/schema/"


@pytest.fixture
def read_rate_3_per_minute(throttle_rates):
    throttle_rates["read"] = "3/min"


@pytest.fixture
def anon_rate_3_per_minute(throttle_rates):
    throttle_rates["anon"] = "3/min"


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.mark.usefixtures("read_rate_3_per_minute")
def test_a_token_over_its_scope_rate_gets_429_with_retry_after(owner, make_token, throttle_clock):
    client = bearer(make_token(owner, "read"))
    assert [client.get(WHOAMI).status_code for _ in range(3)] == [200, 200, 200]
    throttle_clock[0] += 20
    response = client.get(WHOAMI)
    assert response.status_code == 429
    assert response.json()["error"] == "throttled"
    assert int(response["Retry-After"]) == 40
    throttle_clock[0] += 41
    assert client.get(WHOAMI).status_code == 200


@pytest.mark.usefixtures("read_rate_3_per_minute")
def test_each_token_has_its_own_bucket(owner, teammate, make_token, throttle_clock):
    first = bearer(make_token(owner, "read"))
    second = bearer(make_token(owner, "read"))
    other = bearer(make_token(teammate, "read"))
    for _ in range(3):
        first.get(WHOAMI)
    assert first.get(WHOAMI).status_code == 429
    assert second.get(WHOAMI).status_code == 200
    assert other.get(WHOAMI).status_code == 200


def test_default_rates_leave_ingest_generous():
    rates = api_settings.DEFAULT_THROTTLE_RATES
    ingest_count, ingest_seconds = TokenScopeThrottle().parse_rate(rates["ingest"])
    read_count, read_seconds = TokenScopeThrottle().parse_rate(rates["read"])
    assert ingest_count / ingest_seconds >= 10  # ten events a second, sustained, per token
    assert ingest_count / ingest_seconds > read_count / read_seconds


# --- The counter ----------------------------------------------------------------------------


@pytest.fixture(params=["where the deployment keeps it", "in the database"])
def counter_store(request, monkeypatch):
    """Each counter test twice: in the store the test database's deployment would use (on
    SQLite the counters' file, on PostgreSQL rows), and in rows (as on PostgreSQL)."""
    if request.param == "in the database":
        monkeypatch.setattr(throttling, "counters_file", lambda *, alias: None)
    return request.param


@pytest.fixture
def database_counters(monkeypatch):
    """Counters kept as rows, as on PostgreSQL without Redis, whatever the test database."""
    monkeypatch.setattr(throttling, "counters_file", lambda *, alias: None)


def test_a_counter_counts_each_request_once_per_window(counter_store):
    counts = [
        counter_increment(bucket="read:1", duration=60, now=THROTTLE_WINDOW_START + n).total
        for n in range(5)
    ]
    assert counts == [1, 2, 3, 4, 5]
    assert counter_increment(bucket="read:2", duration=60, now=THROTTLE_WINDOW_START).total == 1
    following = counter_increment(bucket="read:1", duration=60, now=THROTTLE_WINDOW_START + 60)
    assert following == (1, int(THROTTLE_WINDOW_START) + 120)
    in_rows = throttling.counters_file(alias=DEFAULT_DB_ALIAS) is None
    assert ThrottleCounter.objects.count() == (3 if in_rows else 0)


@pytest.mark.usefixtures("read_rate_3_per_minute")
def test_a_request_is_counted_in_the_file_on_sqlite_and_in_a_row_otherwise(owner, make_token):
    counters = Path(f"{connection.settings_dict['NAME']}-counters-v1")
    before = counters.read_bytes() if counters.exists() else b""
    assert bearer(make_token(owner, "read")).get(WHOAMI).status_code == 200
    if connection.vendor == "sqlite":
        assert counters.read_bytes() != before
        assert not ThrottleCounter.objects.exists()
    else:  # PostgreSQL without Redis: a row
        assert ThrottleCounter.objects.get().count == 1


@pytest.mark.usefixtures("database_counters")
def test_a_long_bucket_is_counted_under_its_hash():
    bucket = "anon:" + "9" * 400
    assert counter_increment(bucket=bucket, duration=60, now=THROTTLE_WINDOW_START).total == 1
    assert counter_increment(bucket=bucket, duration=60, now=THROTTLE_WINDOW_START).total == 2
    stored = ThrottleCounter.objects.get()
    assert stored.bucket.startswith("sha256:")


@pytest.mark.usefixtures("database_counters")
def test_the_minute_sweep_deletes_the_counters_of_closed_windows():
    counter_increment(bucket="read:1", duration=60, now=THROTTLE_WINDOW_START)
    counter_increment(bucket="read:1", duration=60, now=THROTTLE_WINDOW_START + 60)
    counter_increment(bucket="write:1", duration=3600, now=THROTTLE_WINDOW_START)
    assert counters_delete_expired(now=THROTTLE_WINDOW_START + 60) == 1
    assert sorted(ThrottleCounter.objects.values_list("bucket", "window_end")) == [
        ("read:1", int(THROTTLE_WINDOW_START) + 120),
        ("write:1", 1_000_800),
    ]
    counters_delete_expired(now=THROTTLE_WINDOW_START + 10_000)
    assert not ThrottleCounter.objects.exists()
    counter_increment(bucket="read:1", duration=60, now=0)  # a window closed long ago
    assert tasks.checkpoints_sweep_task() == 0
    assert not ThrottleCounter.objects.exists()


# --- When the counter cannot count -------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("database_counters")
def test_a_read_only_database_refuses_requests_instead_of_passing_them_uncounted(
    owner, make_token, request
):
    client = bearer(make_token(owner, "read"))
    assert client.get(WHOAMI).status_code == 200  # the token's last use is written
    request.getfixturevalue("read_only_database")
    for _ in range(3):
        response = client.get(WHOAMI)
        assert response.status_code == 503
        assert response.json()["error"] == "unavailable"
        assert response["Retry-After"] == "30"


def test_an_unreachable_redis_refuses_requests(owner, make_token, settings):
    raw = make_token(owner, "read")
    client = bearer(raw)
    client.get(WHOAMI)  # the token's last use is written before the cache moves
    settings.CACHES = {
        **settings.CACHES,
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
        },
    }
    response = client.get(WHOAMI)
    assert response.status_code == 503
    assert response.json() == {
        "error": "unavailable",
        "detail": "The request could not be counted against its rate limit; retry later.",
    }
    assert response["Retry-After"] == "30"


# --- Anonymous clients and refused tokens, by address --------------------------------------


@pytest.mark.usefixtures("anon_rate_3_per_minute")
def test_a_rotating_x_forwarded_for_is_still_one_client(throttle_clock):
    client = APIClient()
    statuses = [
        client.get(SCHEMA, HTTP_X_FORWARDED_FOR=f"203.0.113.{n}").status_code for n in range(5)
    ]
    assert statuses == [200, 200, 200, 429, 429]


@pytest.mark.usefixtures("anon_rate_3_per_minute")
def test_trusted_proxies_take_the_address_that_many_hops_from_the_right(throttle_clock, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    client = APIClient()

    def via_proxy(client_address: str) -> int:
        forwarded = f"198.51.100.7, {client_address}"  # the first part is the client's to write
        status: int = client.get(SCHEMA, HTTP_X_FORWARDED_FOR=forwarded).status_code
        return status

    assert [via_proxy("203.0.113.1") for _ in range(4)] == [200, 200, 200, 429]
    assert via_proxy("203.0.113.2") == 200


@pytest.mark.usefixtures("anon_rate_3_per_minute")
@pytest.mark.parametrize(
    "authorization",
    ["Bearer sig_wrong", "Bearer", "Bearer a b", "Bearer caf\u00e9"],
    ids=["unknown", "malformed", "three-parts", "not-ascii"],
)
def test_refused_tokens_are_throttled_per_address(authorization, throttle_clock):
    def attempt(address: str = "192.0.2.1") -> int:
        client = APIClient(REMOTE_ADDR=address)
        return client.get(WHOAMI, HTTP_AUTHORIZATION=authorization).status_code

    statuses = [attempt() for _ in range(5)]
    assert statuses == [401, 401, 401, 429, 429]
    assert attempt("192.0.2.2") == 401  # another client has its own count
    throttle_clock[0] += 60
    assert attempt() == 401


@pytest.mark.usefixtures("anon_rate_3_per_minute")
def test_a_revoked_token_is_throttled_but_a_valid_one_from_the_address_is_not(
    owner, make_token, throttle_clock
):
    raw = make_token(owner, "read")
    token_revoke(token=ApiToken.objects.get())
    revoked = bearer(raw)
    response = None
    for _ in range(4):
        response = revoked.get(WHOAMI)
    assert response is not None
    assert response.status_code == 429
    assert response.json()["error"] == "throttled"
    assert int(response["Retry-After"]) == 60
    assert bearer(make_token(owner, "read")).get(WHOAMI).status_code == 200


@pytest.mark.slow
def test_redis_counts_and_expires_the_window(redis_cache):
    counts = [
        counter_increment(bucket="read:1", duration=60, now=THROTTLE_WINDOW_START).total
        for _ in range(3)
    ]
    assert counts == [1, 2, 3]
    assert not ThrottleCounter.objects.exists()
    cache = caches["default"]
    key = cache.make_key(f"throttle:read:1:{int(THROTTLE_WINDOW_START) + 60}")
    client = cache._cache.get_client(key)
    assert int(client.get(key)) == 3
    assert 0 < client.ttl(key) <= 62


@pytest.mark.slow
def test_redis_counts_exactly_from_many_threads(redis_cache):
    def count_50() -> list[int]:
        return [
            counter_increment(bucket="read:7", duration=60, now=THROTTLE_WINDOW_START).total
            for _ in range(50)
        ]

    with ThreadPoolExecutor(max_workers=16) as pool:
        counts = sorted(chain.from_iterable(pool.map(lambda _: count_50(), range(16))))
    assert counts == list(range(1, 16 * 50 + 1))  # none lost, none repeated


@pytest.mark.slow
def test_a_redis_restart_between_counts_refuses_nothing(redis_cache, redis_server):
    def count() -> int:
        return counter_increment(bucket="read:2", duration=60, now=THROTTLE_WINDOW_START).total

    assert [count(), count()] == [1, 2]
    redis_server.stop()
    with pytest.raises(throttling.CounterUnavailable):
        count()
    redis_server.start()
    assert count() == 1  # a new server, empty: the thread's connection is made anew
    redis_server.stop()
    redis_server.start()
    assert count() == 1  # its connection broke while idle: counted on a new one at once


@pytest.fixture
def redis_cache(settings, redis_server):
    """``redis_server`` as the default cache."""
    settings.CACHES = {
        **settings.CACHES,
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{redis_server.port}/0",
        },
    }
    return caches["default"]
