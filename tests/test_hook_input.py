"""Bad input at the hook endpoint: a 4xx with a JSON reason, never a 500, nothing written."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from checkpoints.models import Checkpoint, HookDelivery, Session
from tests.hookutil import HOOK_URL, payload, send

pytestmark = pytest.mark.django_db


@pytest.fixture
def hook(client_for, owner):
    return client_for(owner, "ingest")


def post_raw(client: APIClient, body: bytes | str, content_type: str = "application/json"):
    return client.generic("POST", HOOK_URL, body, content_type=content_type)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("body", "code", "reason"),
    [
        ("", "invalid_json", "empty"),
        ("{not json", "invalid_json", "not valid JSON"),
        ("[1, 2, 3]", "invalid_payload", "JSON object, not list"),
        ('"just a string"', "invalid_payload", "JSON object, not str"),
        ("{}", "invalid_payload", "'hook_event_name' is required"),
        ('{"hook_event_name": "UserPromptSubmit"}', "invalid_payload", "'session_id' is required"),
        (
            '{"hook_event_name": "UserPromptSubmit", "session_id": 42}',
            "invalid_payload",
            "'session_id' must be a string, not int",
        ),
        (
            '{"hook_event_name": "UserPromptSubmit", "session_id": "  "}',
            "invalid_payload",
            "must be 1 to 255 characters",
        ),
        (
            '{"hook_event_name": "UserPromptSubmit", "session_id": "s"}',
            "invalid_payload",
            "'prompt' is required",
        ),
        (
            '{"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": ["x"]}',
            "invalid_payload",
            "'prompt' must be a string, not list",
        ),
        (
            '{"hook_event_name": "SessionStart", "session_id": "s", "cwd": {"a": 1}}',
            "invalid_payload",
            "'cwd' must be a string",
        ),
        (
            '{"hook_event_name": "SessionStart", "session_id": "s", "signet": "x"}',
            "invalid_payload",
            "'signet' must be an object",
        ),
        (
            json.dumps({"hook_event_name": "SessionStart", "session_id": "k" * 300}),
            "invalid_payload",
            "must be 1 to 255 characters",
        ),
        ("[" * 100_000 + "]" * 100_000, "invalid_json", "not valid JSON"),
        (b"\xff\xfe{}", "invalid_json", "not valid JSON"),
    ],
)
def test_malformed_bodies_get_400_with_a_reason_and_write_nothing(hook, body, code, reason):
    response = post_raw(hook, body)
    assert response.status_code == 400, response.content
    data = response.json()
    assert data["error"] == code
    assert reason in data["detail"]
    assert not Session.objects.exists()
    assert not HookDelivery.objects.exists()


def test_a_body_over_the_limit_gets_413(hook, settings):
    settings.SIGNET_MAX_HOOK_BODY_BYTES = 10_000
    body = payload("user_prompt_submit", prompt="x" * 20_000)
    response = send(hook, body)
    assert response.status_code == 413
    assert response.json()["error"] == "too_large"
    assert not Session.objects.exists()


def test_unknown_harness_is_404(hook):
    response = hook.post("/api/hooks/vim/", data={}, format="json")
    assert response.status_code == 404
    assert response.json()["error"] == "unknown_harness"


def test_bad_idempotency_key_is_refused_before_anything_is_written(hook):
    response = send(hook, payload("user_prompt_submit"), **{"Idempotency-Key": "no spaces"})
    assert response.status_code == 400
    assert not Session.objects.exists()


def test_unicode_nul_and_lone_surrogates_are_stored_safely(hook):
    body = (
        '{"hook_event_name": "UserPromptSubmit", "session_id": "s\\u00e9ssion-\\u6f22",'
        ' "cwd": "/home/al\\u00efce/\\u6f22\\u5b57",'
        ' "prompt": "fix \\u0000 the \\ud800 bug \\ud83d\\ude00"}'
    )
    response = post_raw(hook, body)
    assert response.status_code == 200, response.content
    session = Session.objects.get()
    assert session.session_key == "séssion-漢"
    assert session.project == "/home/alïce/漢字"
    assert session.recent_prompts == ["fix  the ? bug 😀"]


def test_get_is_not_allowed(hook):
    assert hook.get(HOOK_URL).status_code == 405


def test_tokens_without_ingest_scope_are_refused(client_for, owner):
    reader = client_for(owner, "read", "write")
    response = send(reader, payload("user_prompt_submit"))
    assert response.status_code == 403
    assert not Session.objects.exists()


def test_no_token_is_401(api_client):
    response = send(api_client, payload("user_prompt_submit"))
    assert response.status_code == 401
    assert not Session.objects.exists()


def test_tool_input_of_the_wrong_shape_is_tolerated(hook):
    body = payload("post_tool_use_edit", tool_input="not an object")
    assert send(hook, body).status_code == 200
    assert Session.objects.get().modified_files == []
    assert not Checkpoint.objects.exists()
