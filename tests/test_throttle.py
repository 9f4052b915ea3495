"""Per-token, per-scope throttling, with the throttle's clock patched instead of sleeping."""

from __future__ import annotations

import pytest
from rest_framework.settings import api_settings
from rest_framework.test import APIClient

from checkpoints.api.throttles import TokenScopeThrottle

pytestmark = pytest.mark.django_db

WHOAMI = "/api/whoami/"


@pytest.fixture
def clock(monkeypatch):
    now = [1_000_020.0]  # the start of a one-minute window
    monkeypatch.setattr(TokenScopeThrottle, "timer", lambda self: now[0])
    return now


@pytest.fixture
def read_rate_3_per_minute(monkeypatch):
    rates = {**api_settings.DEFAULT_THROTTLE_RATES, "read": "3/min"}
    monkeypatch.setattr(TokenScopeThrottle, "THROTTLE_RATES", rates)


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.mark.usefixtures("read_rate_3_per_minute")
def test_a_token_over_its_scope_rate_gets_429_with_retry_after(owner, make_token, clock):
    client = bearer(make_token(owner, "read"))
    assert [client.get(WHOAMI).status_code for _ in range(3)] == [200, 200, 200]
    clock[0] += 20
    response = client.get(WHOAMI)
    assert response.status_code == 429
    assert response.json()["error"] == "throttled"
    assert int(response["Retry-After"]) == 40
    clock[0] += 41
    assert client.get(WHOAMI).status_code == 200


@pytest.mark.usefixtures("read_rate_3_per_minute")
def test_each_token_has_its_own_bucket(owner, teammate, make_token, clock):
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
