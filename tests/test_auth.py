"""Token authentication end to end: create_token's output against a protected route."""

from __future__ import annotations

import io
import time
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from checkpoints.models import ApiToken
from checkpoints.services.tokens import token_authenticate, token_revoke

pytestmark = pytest.mark.django_db

WHOAMI = "/api/whoami/"


def create_token(*args: str) -> tuple[str, str]:
    out = io.StringIO()
    call_command("create_token", *args, stdout=out)
    text = out.getvalue()
    return text, text.strip().splitlines()[-1]


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_route_name_matches_path():
    assert reverse("api:whoami") == WHOAMI


def test_create_token_creates_the_user_and_prints_a_working_token_last():
    text, raw = create_token("--user", "carol", "--scopes", "ingest,read,write", "--name", "lap")
    assert "Created user 'carol'" in text
    user = get_user_model().objects.get(username="carol")
    assert user.has_usable_password()  # the dashboard login it printed

    response = bearer(raw).get(WHOAMI)
    assert response.status_code == 200
    assert response.json() == {
        "user": "carol",
        "token": {"name": "lap", "prefix": raw[:12], "scopes": ["ingest", "read", "write"]},
    }


def test_create_token_for_an_existing_user_keeps_the_user(owner):
    text, raw = create_token("--user", owner.username, "--scopes", "read")
    assert "Created user" not in text
    assert ApiToken.objects.get(owner=owner).name == "alice-read"
    assert bearer(raw).get(WHOAMI).status_code == 200


def test_create_token_refuses_unknown_scopes():
    with pytest.raises(CommandError, match="unknown"):
        create_token("--user", "dave", "--scopes", "read,sudo")
    assert not ApiToken.objects.exists()


def test_missing_credentials_get_401_with_a_bearer_challenge():
    response = APIClient().get(WHOAMI)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"] == "not_authenticated"


@pytest.mark.parametrize(
    "header",
    [
        "Bearer sig_not-a-real-token",
        "Bearer nonsense",
        "Bearer",
        "Bearer a b",
        "Bearer " + "x" * 5000,
    ],
)
def test_wrong_tokens_get_401(header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get(WHOAMI)
    assert response.status_code == 401
    assert response.json()["error"] in {"authentication_failed", "not_authenticated"}


def test_revoked_token_gets_401(owner):
    _, raw = create_token("--user", owner.username, "--scopes", "read")
    assert bearer(raw).get(WHOAMI).status_code == 200
    token_revoke(token=ApiToken.objects.get(owner=owner))
    assert bearer(raw).get(WHOAMI).status_code == 401


def test_token_of_a_deactivated_user_gets_401(owner):
    _, raw = create_token("--user", owner.username, "--scopes", "read")
    owner.is_active = False
    owner.save()
    assert bearer(raw).get(WHOAMI).status_code == 401


def test_token_lacking_the_scope_gets_403(owner):
    _, raw = create_token("--user", owner.username, "--scopes", "ingest,write")
    response = bearer(raw).get(WHOAMI)
    assert response.status_code == 403
    assert response.json() == {
        "error": "permission_denied",
        "detail": "This token lacks the 'read' scope.",
    }


def test_a_logged_in_browser_session_is_not_an_api_credential(owner):
    client = APIClient()
    client.force_login(owner)
    assert client.get(WHOAMI).status_code in (401, 403)


def test_last_used_is_recorded_at_most_once_a_minute(owner, make_token, settings):
    settings.SIGNET_TOKEN_CACHE_SECONDS = 0  # every request asks the database
    raw = make_token(owner, "read")
    client = bearer(raw)
    client.get(WHOAMI)
    token = ApiToken.objects.get(owner=owner)
    first = token.last_used_at
    assert first is not None
    client.get(WHOAMI)
    token.refresh_from_db()
    assert token.last_used_at == first
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - timedelta(minutes=5))
    client.get(WHOAMI)
    token.refresh_from_db()
    assert token.last_used_at > first - timedelta(minutes=1)
    assert token.last_used_at <= timezone.now()


# --- the per-process token cache (SIGNET_TOKEN_CACHE_SECONDS) --------------------------------


def test_a_token_seen_lately_is_not_looked_up_again(owner, make_token, django_assert_num_queries):
    raw = make_token(owner, "read")
    assert token_authenticate(raw=raw) is not None
    with django_assert_num_queries(0):
        assert token_authenticate(raw=raw) is not None


def test_revoking_or_deactivating_is_seen_at_once_in_this_process(owner, make_token):
    raw = make_token(owner, "read")
    assert bearer(raw).get(WHOAMI).status_code == 200
    token_revoke(token=ApiToken.objects.get(owner=owner))
    assert bearer(raw).get(WHOAMI).status_code == 401
    other = make_token(owner, "read")
    assert bearer(other).get(WHOAMI).status_code == 200
    owner.is_active = False
    owner.save()
    assert bearer(other).get(WHOAMI).status_code == 401


def test_a_revocation_by_another_process_is_seen_within_the_bound(
    owner, make_token, settings, monkeypatch
):
    """Another process revokes with a plain UPDATE (no signal reaches this one): the token
    keeps working here for at most SIGNET_TOKEN_CACHE_SECONDS."""
    settings.SIGNET_TOKEN_CACHE_SECONDS = 5
    raw = make_token(owner, "read")
    assert token_authenticate(raw=raw) is not None
    ApiToken.objects.filter(owner=owner).update(revoked_at=timezone.now())
    assert token_authenticate(raw=raw) is not None  # within the bound
    later = time.monotonic() + 5.01
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert token_authenticate(raw=raw) is None
