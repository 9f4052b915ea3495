"""Secrets sent by an agent never reach the database or a reply."""

from __future__ import annotations

import pytest

from checkpoints.models import Checkpoint, Session
from tests.hookutil import TRANSCRIPT, context_of, payload, send

pytestmark = pytest.mark.django_db

GITHUB_TOKEN = "ghp_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa"
PASSWORD_LINE = "the password is hunter2-Correct-Horse"


def test_prompt_secrets_are_redacted_before_storage_and_in_the_context(client_for, owner):
    hook = client_for(owner, "ingest")
    secret_prompt = f"Use token {GITHUB_TOKEN} to push, and {PASSWORD_LINE}"
    send(hook, payload("user_prompt_submit", prompt=secret_prompt))
    send(hook, payload("pre_compact_auto", transcript_path=str(TRANSCRIPT)))
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
