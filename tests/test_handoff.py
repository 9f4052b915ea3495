"""Handoff across harnesses: ``manage.py handoff`` prints the command that starts the next
session with the lineage, the hook client sends it, and the new session recovers the task."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from checkpoints.models import Injection, Session
from hooks.signet_hook import client_context
from tests.factories import SessionFactory
from tests.hookutil import TRANSCRIPT, client_read, context_of, payload, send

pytestmark = pytest.mark.django_db

FIRST = "3f2b8c1e-5d4a-4e7b-9c2f-8a1d6e0b7c42"
NEXT = "codex-thread-0199"


def handoff(*args: str) -> str:
    out = io.StringIO()
    call_command("handoff", *args, stdout=out)
    return out.getvalue().strip()


@pytest.mark.parametrize(
    ("harness", "command"),
    [
        ("claude-code", "claude"),
        ("codex", "codex"),
        ("gemini", "gemini"),
        ("opencode", "opencode"),
        ("openclaw", "openclaw"),
    ],
)
def test_handoff_prints_the_command_with_the_lineage(owner, harness, command):
    SessionFactory(owner=owner, session_key=FIRST)
    assert handoff(FIRST, "--to", harness) == f"SIGNET_PREVIOUS_SESSION_KEY={FIRST} {command}"


def test_handoff_refuses_an_unknown_key_or_harness(owner, teammate):
    SessionFactory(owner=owner, session_key=FIRST)
    with pytest.raises(CommandError, match="No session"):
        handoff("nope", "--to", "codex")
    with pytest.raises(CommandError, match="No session"):
        handoff(FIRST, "--to", "codex", "--user", "bob")
    with pytest.raises(CommandError, match="invalid choice"):
        handoff(FIRST, "--to", "vim")
    SessionFactory(owner=teammate, session_key=FIRST)
    with pytest.raises(CommandError, match="--user"):
        handoff(FIRST, "--to", "codex")
    assert handoff(FIRST, "--to", "codex", "--user", "bob").endswith(" codex")


def test_hook_client_sends_the_previous_key_from_the_environment(monkeypatch):
    monkeypatch.setenv("SIGNET_PREVIOUS_SESSION_KEY", f" {FIRST} ")
    assert client_context({})["previous_session_key"] == FIRST
    assert client_context({"cwd": "/nonexistent/x"})["previous_session_key"] == FIRST
    for bad in ("x" * 256, "two words", "bell\x07", "", "a/b", "-lead", "50%"):
        monkeypatch.setenv("SIGNET_PREVIOUS_SESSION_KEY", bad)
        assert "previous_session_key" not in client_context({})
    monkeypatch.delenv("SIGNET_PREVIOUS_SESSION_KEY")
    assert "previous_session_key" not in client_context({})


def test_a_session_in_another_harness_recovers_the_task_through_the_lineage(
    owner, client_for, clock
):
    hook = client_for(owner, "ingest")
    send(hook, payload("session_start_startup"))
    clock.advance(seconds=5)
    send(hook, payload("user_prompt_submit"))
    clock.advance(seconds=5)
    response = send(
        hook, client_read(payload("pre_compact_manual", transcript_path=str(TRANSCRIPT)))
    )
    assert response.status_code == 200, response.content
    clock.advance(hours=6)  # beyond the recovery window: only the lineage can find it

    # The next harness's session: another key, another folder, the handoff's lineage.
    start = payload(
        "session_start_startup",
        session_id=NEXT,
        cwd="/home/alice/elsewhere",
        signet={"previous_session_key": FIRST},
    )
    response = send(hook, start)
    assert response.status_code == 200, response.content
    context = context_of(response)
    assert "Move the counter store to Redis" in context
    injection = Injection.objects.get(session__session_key=NEXT)
    assert injection.match == "lineage"
    assert injection.checkpoint is not None
    assert injection.checkpoint.session_key == FIRST
    assert Session.objects.get(session_key=NEXT).previous_session.session_key == FIRST


def test_without_the_lineage_nothing_is_recovered(owner, client_for, clock):
    hook = client_for(owner, "ingest")
    send(hook, payload("session_start_startup"))
    send(hook, client_read(payload("pre_compact_manual", transcript_path=str(TRANSCRIPT))))
    clock.advance(hours=6)
    start = payload("session_start_startup", session_id=NEXT, cwd="/home/alice/elsewhere")
    assert context_of(send(hook, start)) == ""
