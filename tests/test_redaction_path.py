"""Secrets sent by an agent never reach the database or a reply."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from checkpoints.models import Checkpoint, Injection, Session
from checkpoints.services.events import _redacted_short
from tests.hookutil import TRANSCRIPT, client_read, context_of, payload, send

pytestmark = pytest.mark.django_db

GITHUB_TOKEN = "ghp_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa"
PASSWORD_LINE = "the password is hunter2-Correct-Horse"


def test_prompt_secrets_are_redacted_before_storage_and_in_the_context(client_for, owner):
    hook = client_for(owner, "ingest")
    secret_prompt = f"Use token {GITHUB_TOKEN} to push, and {PASSWORD_LINE}"
    send(hook, payload("user_prompt_submit", prompt=secret_prompt))
    send(hook, client_read(payload("pre_compact_auto", transcript_path=str(TRANSCRIPT))))
    session = Session.objects.get()
    stored = repr(
        [session.recent_prompts, session.recent_queries, Checkpoint.objects.values_list()]
    )
    assert GITHUB_TOKEN not in stored
    assert "hunter2" not in stored
    context = context_of(send(hook, payload("session_start_compact")))
    assert context
    assert GITHUB_TOKEN not in context
    assert "hunter2" not in context


SLACK = "xoxb-521720509597-2169023705690-j8KVuxgaaJl7LRiiQbLJmWZT"
ANTHROPIC = "sk-ant-api03-GVBrYSuIb9OZiFZ3HLKv797TPNbpjava1bMZwIMlvdp5gjTAbCdEf"


def test_every_text_the_client_sends_is_redacted_before_storage(client_for, owner):
    """The branch, model, cwd (with a database URL in a folder name), transcript path and
    the client's project fields: none is stored or served raw."""
    hook = client_for(owner, "ingest", "read")
    body = payload(
        "session_start_startup",
        cwd="/home/u/postgres://u:pw-Sup3rS3cret@db.internal/app",
        model=ANTHROPIC,
        transcript_path=f"/home/u/.claude/{SLACK}.jsonl",
        signet={"git_branch": SLACK, "git_head": "not-a-sha", "git_root": f"/w/{SLACK}"},
    )
    assert send(hook, body).status_code == 200
    send(hook, payload("user_prompt_submit", prompt="go", signet={"git_branch": SLACK}))
    stored = repr(list(Session.objects.values_list()))
    stored += repr(list(Checkpoint.objects.values_list()))
    for secret in (SLACK, ANTHROPIC, "Sup3rS3cret"):
        assert secret not in stored
    session = Session.objects.get()
    assert session.git_head == ""
    served = hook.get(f"/api/sessions/{session.session_key}/").content.decode()
    assert SLACK not in served
    assert "Sup3rS3cret" not in served


@pytest.mark.parametrize(
    "key",
    ["a/b", "../x", "a b", "a%2Fb", "a?b", "-lead", SLACK, ANTHROPIC],
)
def test_session_keys_outside_the_safe_set_are_refused_everywhere(client_for, owner, key):
    """A key is stored and addressed as sent, so it cannot be redacted: one with a slash, a
    space, a percent or a credential in it is refused, by the hook endpoint and the API."""
    client = client_for(owner, "ingest", "write")
    response = send(client, payload("user_prompt_submit", session_id=key))
    assert response.status_code == 400
    assert "session_id" in response.json()["detail"]
    capture = client.post("/api/checkpoints/", {"session_key": key, "digest": "x"}, format="json")
    assert capture.status_code == 400
    previous = payload("session_start_startup", signet={"previous_session_key": key})
    assert send(client, previous).status_code == 400
    assert not Session.objects.exists()


@pytest.mark.parametrize("key", ["3f2b8c1e-5d4a", "ses_4f9bB3xY", "agent:main:main", "séssion-漢"])
def test_every_session_the_hook_endpoint_accepts_is_addressable(client_for, owner, key):
    client = client_for(owner, "ingest", "read")
    assert send(client, payload("user_prompt_submit", session_id=key)).status_code == 200
    response = client.get(f"/api/sessions/{quote(key)}/")
    assert response.status_code == 200
    assert response.json()["session_key"] == key
    assert client.get(f"/api/checkpoints/{quote(key)}/").status_code == 200


def test_an_end_reason_and_a_start_source_are_redacted(client_for, owner):
    hook = client_for(owner, "ingest")
    send(hook, payload("session_start_startup", source=f"startup {GITHUB_TOKEN}"))
    send(hook, payload("session_end", reason=GITHUB_TOKEN))
    stored = repr(list(Session.objects.values_list())) + repr(list(Injection.objects.values_list()))
    assert GITHUB_TOKEN not in stored


def test_long_field_values_are_not_kept_in_the_redaction_cache(client_for, owner):
    """The per-worker cache holds short repeated values only: a client sending huge,
    ever-different values cannot pin them in memory."""
    hook = client_for(owner, "ingest")

    def cached_after(models):
        _redacted_short.cache_clear()
        for model in models:
            send(hook, payload("user_prompt_submit", model=model))
        return _redacted_short.cache_info().currsize

    long_ones = cached_after([f"m{number}" * 50_000 for number in range(5)])
    short_ones = cached_after([f"model-{number}" for number in range(5)])
    assert short_ones == long_ones + 5
