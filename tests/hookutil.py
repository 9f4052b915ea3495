"""Helpers for driving the hook endpoint with the Claude Code fixture payloads."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.utils import timezone
from rest_framework.test import APIClient

from checkpoints.services.config import config_cache_clear, config_get, config_save
from hooks.signet_hook import transcript_extract

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "claude_code"
HOOK_URL = "/api/hooks/claude-code/"
TRANSCRIPT = FIXTURES / "transcript.jsonl"


def configure(**fields: Any) -> None:
    """Change the continuity config's ``fields`` and see them at once."""
    config = config_get()
    for name, value in fields.items():
        setattr(config, name, value)
    config_save(config=config)
    config_cache_clear()  # what the commit does; a test's transaction never commits


def throttle_statements() -> list[str]:
    """The statements a request's throttle count runs on the test database: one upsert of a
    row on PostgreSQL (without Redis), none on SQLite, which counts in a file
    (``services/host_counters``)."""
    from django.db import DEFAULT_DB_ALIAS

    from checkpoints.services.throttling import counters_file

    return [] if counters_file(alias=DEFAULT_DB_ALIAS) else ["INSERT"]


def payload(name: str, **overrides: Any) -> dict[str, Any]:
    """A fixture payload (``user_prompt_submit`` …) with fields replaced."""
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    data.update(overrides)
    return data


def client_read(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with what the hook client adds on the agent's machine: the transcript's facts
    (PreCompact), read from ``transcript_path`` by the client's own reader."""
    facts = transcript_extract(body)
    if facts is None:
        return body
    return {**body, "signet": {**body.get("signet", {}), "transcript": facts}}


def send(client: APIClient, body: dict[str, Any], **headers: str) -> Any:
    """POST ``body`` to the hook URL; the test client's response (with ``.json()``)."""
    return client.post(
        HOOK_URL, data=json.dumps(body), content_type="application/json", headers=headers
    )


def context_of(response: Any) -> str:
    """The additionalContext of a hook reply, '' when there is none."""
    body = response.json()
    if not body:
        return ""
    text: str = body["hookSpecificOutput"]["additionalContext"]
    return text


class Clock:
    """A settable ``timezone.now`` for the engine: tests move time instead of sleeping."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or timezone.now()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)
