"""The hook route's own dispatch (``HookIngestApi.dispatch``) answers as DRF answers every
other API route: the same refusals, counted once, and the same success answer."""

from __future__ import annotations

import pytest
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIClient

from checkpoints.models import ApiToken, Session
from tests.hookutil import HOOK_URL, context_of, payload, send
from tests.test_serve import free_port

pytestmark = pytest.mark.django_db


def hook_client(authorization: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=authorization)
    return client


def test_a_hook_post_is_answered_in_drfs_json_with_its_headers(owner, make_token):
    client = hook_client(f"Bearer {make_token(owner, 'ingest')}")
    send(client, payload("session_start_startup"))
    send(client, payload("user_prompt_submit", prompt="Refactor the café"))
    send(client, payload("pre_compact_manual"))
    response = send(client, payload("session_start_compact"))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Allow"] == "POST, OPTIONS"
    assert "café" in context_of(response)
    assert response.content == JSONRenderer().render(response.json())  # unescaped, compact


@pytest.mark.parametrize(
    ("authorization", "error"),
    [
        ("", "not_authenticated"),
        ("Basic dXNlcjpwYXNz", "not_authenticated"),
        ("Bearer sig_not-a-real-token", "authentication_failed"),
        ("Bearer", "authentication_failed"),
        ("Bearer a b", "authentication_failed"),
        ("Bearer caf\u00e9", "authentication_failed"),
    ],
)
def test_a_hook_without_a_valid_token_gets_401_with_a_bearer_challenge(authorization, error):
    response = send(hook_client(authorization), payload("user_prompt_submit"))
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="signet"'
    assert response.json()["error"] == error
    assert not Session.objects.exists()


def test_a_token_without_the_ingest_scope_gets_403(owner, make_token):
    response = send(hook_client(f"Bearer {make_token(owner, 'read')}"), payload("stop"))
    assert response.status_code == 403
    assert response.json() == {
        "error": "permission_denied",
        "detail": "This token lacks the 'ingest' scope.",
    }
    assert not Session.objects.exists()


def test_a_hook_route_answers_other_methods_405_with_allow(owner, make_token):
    response = hook_client(f"Bearer {make_token(owner, 'ingest')}").get(HOOK_URL)
    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"
    assert response["Allow"] == "POST, OPTIONS"


@pytest.mark.usefixtures("throttle_clock")
def test_a_refused_token_is_counted_once_per_hook_post(throttle_rates):
    throttle_rates["anon"] = "3/min"
    client = APIClient(REMOTE_ADDR="192.0.2.9")
    client.credentials(HTTP_AUTHORIZATION="Bearer sig_guessed")
    statuses = [send(client, payload("stop")).status_code for _ in range(5)]
    assert statuses == [401, 401, 401, 429, 429]


@pytest.mark.usefixtures("throttle_clock")
def test_hooks_over_the_ingest_rate_get_429_with_retry_after(owner, make_token, throttle_rates):
    throttle_rates["ingest"] = "2/min"
    client = hook_client(f"Bearer {make_token(owner, 'ingest')}")
    responses = [send(client, payload("user_prompt_submit")) for _ in range(3)]
    assert [response.status_code for response in responses] == [200, 200, 429]
    refused = responses[-1]
    assert refused.json()["error"] == "throttled"
    assert refused["Retry-After"] == "60"  # the clock stands at its window's start
    assert refused["Allow"] == "POST, OPTIONS"
    assert Session.objects.get().prompt_count == 2  # the refused prompt changed nothing


def test_a_hook_that_cannot_be_counted_gets_503(owner, make_token, settings):
    client = hook_client(f"Bearer {make_token(owner, 'ingest')}")
    send(client, payload("stop"))  # the token's last use is written before the cache moves
    settings.CACHES = {
        **settings.CACHES,
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
        },
    }
    response = send(client, payload("stop"))
    assert response.status_code == 503
    assert response.json()["error"] == "unavailable"
    assert response["Retry-After"] == "30"


@pytest.mark.django_db(transaction=True)
def test_a_hook_meeting_a_read_only_database_gets_503_and_writes_nothing(
    owner, make_token, request
):
    client = hook_client(f"Bearer {make_token(owner, 'ingest')}")
    send(client, payload("user_prompt_submit"))
    request.getfixturevalue("read_only_database")
    response = send(client, payload("user_prompt_submit"))
    assert response.status_code == 503
    assert response.json() == {
        "error": "unavailable",
        "detail": "The database is unavailable; retry later.",
    }
    assert response["Retry-After"] == "30"
    assert Session.objects.get().prompt_count == 1


def test_a_request_drf_authenticates_otherwise_is_still_served(owner, make_token):
    make_token(owner, "ingest")
    client = APIClient()
    client.force_authenticate(user=owner, token=ApiToken.objects.get())
    response = send(client, payload("user_prompt_submit"))
    assert response.status_code == 200
    assert response["Allow"] == "POST, OPTIONS"
    assert Session.objects.get(owner=owner).prompt_count == 1


@pytest.mark.django_db(transaction=True)
def test_a_token_look_up_meeting_a_read_only_database_gets_503(
    owner, make_token, settings, request
):
    settings.SIGNET_TOKEN_CACHE_SECONDS = 0  # each request asks the database for its token
    client = hook_client(f"Bearer {make_token(owner, 'ingest')}")
    ApiToken.objects.update(last_used_at=None)  # so the look-up writes the token's last use
    request.getfixturevalue("read_only_database")
    response = send(client, payload("user_prompt_submit"))
    assert response.status_code == 503
    assert response.json()["error"] == "unavailable"
    assert response["Retry-After"] == "30"
    assert not Session.objects.exists()
