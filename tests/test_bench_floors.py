"""The floors the hook path bench measures beside the hook (``bench/urls.py``): each must do
what it says it does, and no less, or the floor it shows is too low."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from checkpoints.models import Session
from tests.hookutil import HOOK_URL, payload

pytestmark = pytest.mark.django_db

FLOORS = ("/api/hooks/floor/write/", "/api/hooks/floor/read-write/")


@pytest.fixture(autouse=True)
def bench_urls(settings: Any) -> None:
    settings.ROOT_URLCONF = "bench.urls"


def post(client: APIClient, path: str, body: object) -> Any:
    return client.post(path, data=json.dumps(body), content_type="application/json")


@pytest.mark.parametrize("path", FLOORS)
def test_a_floor_adds_one_prompt_to_the_session_and_changes_its_version(client_for, owner, path):
    client = client_for(owner, "ingest")
    body = payload("user_prompt_submit", session_id="floor")
    assert post(client, HOOK_URL, body).status_code == 200  # the hook makes the session
    before = Session.objects.get(owner=owner, session_key="floor")
    for _ in range(2):
        answer = post(client, path, body)
        assert answer.status_code == 200, answer.content
        assert answer.json() == {"written": True}
    after = Session.objects.get(owner=owner, session_key="floor")
    assert after.prompt_count == before.prompt_count + 2
    assert after.row_version > before.row_version  # the hook's write-back would start over


@pytest.mark.parametrize("path", FLOORS)
def test_a_floor_is_counted_in_the_hooks_throttle(
    client_for, owner, throttle_clock, throttle_rates, path
):
    throttle_rates["ingest"] = "2/min"
    client = client_for(owner, "ingest")
    body = payload("user_prompt_submit", session_id="floor")
    assert post(client, HOOK_URL, body).status_code == 200
    assert post(client, path, body).status_code == 200
    assert post(client, path, body).status_code == 429
    assert Session.objects.get(owner=owner, session_key="floor").prompt_count == 2


@pytest.mark.parametrize("path", FLOORS)
def test_a_floor_refuses_what_the_hook_refuses(api_client, client_for, owner, teammate, path):
    body = payload("user_prompt_submit", session_id="floor")
    assert post(client_for(teammate, "ingest"), HOOK_URL, body).status_code == 200
    assert post(api_client, path, body).status_code == 401  # no token
    assert post(client_for(owner, "read"), path, body).status_code == 401  # no ingest scope
    client = client_for(owner, "ingest")
    assert post(client, path, body).status_code == 404  # the teammate's session, not ours
    not_json = client.post(path, data=b"{", content_type="application/json")
    assert not_json.status_code == 400
    assert post(client, path, {"prompt": "no session"}).status_code == 400
    assert Session.objects.get(owner=teammate, session_key="floor").prompt_count == 1
