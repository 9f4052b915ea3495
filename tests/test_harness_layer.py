"""The adapter layer: a harness is one adapter file, with no line of the engine touched.

A harness made up here (events named in the URL, a small injection cap, its own note
prefix) goes through the real hook endpoint and engine.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from checkpoints.harnesses import ADAPTERS
from checkpoints.harnesses.base import (
    Event,
    EventKind,
    Outcome,
    client_block,
    client_fields,
    identifier_field,
    remembered_text,
    text_field,
)
from checkpoints.models import Checkpoint, Session
from tests.hookutil import payload, send

pytestmark = pytest.mark.django_db


class TinyAdapter:
    """A harness whose hooks post to ``/api/hooks/tiny/<event>/`` and take 1,500 characters."""

    harness = "tiny"
    context_cap_chars = 1500
    event_in_path = True

    def parse(self, payload: dict[str, Any], *, event_name: str = "") -> Event:
        kinds = {"start": EventKind.SESSION_START, "prompt": EventKind.PROMPT}
        prompt = text_field(payload, "text")
        return Event(
            kind=kinds.get(event_name, EventKind.UNKNOWN),
            harness=self.harness,
            session_key=identifier_field(payload, "id", required=True),
            name=event_name,
            cwd=text_field(payload, "dir"),
            prompt=prompt,
            remember=remembered_text(prompt, ("!note",)),
            context_cap_chars=self.context_cap_chars,
            **client_fields(client_block(payload)),
        )

    def render(self, event: Event, outcome: Outcome) -> dict[str, Any]:
        return {"inject": outcome.context} if outcome.context else {}


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(ADAPTERS, "tiny", TinyAdapter())


def post(client, event: str, body: dict[str, Any]):
    return client.post(
        f"/api/hooks/tiny/{event}/", data=json.dumps(body), content_type="application/json"
    )


def test_a_new_harness_is_one_adapter(tiny, client_for, owner):
    hook = client_for(owner, "ingest")
    long_task = "Port the billing exporter to the new ledger API " * 20
    send(hook, payload("user_prompt_submit", prompt=long_task, cwd="/w/app"))
    send(hook, payload("session_end"))
    reply = post(hook, "start", {"id": "t-1", "dir": "/w/app"}).json()
    assert reply["inject"].startswith("## Session Recovery Context")
    assert len(reply["inject"]) < TinyAdapter.context_cap_chars
    assert "Port the billing exporter" in reply["inject"]
    assert post(hook, "prompt", {"id": "t-1", "dir": "/w/app", "text": "!note use uv"}).json() == {}
    assert Session.objects.get(session_key="t-1").recent_remembers == ["use uv"]
    assert Session.objects.get(session_key="t-1").harness == "tiny"
    assert Checkpoint.objects.exists()


def test_the_route_shape_is_the_adapters(tiny, client_for, owner):
    hook = client_for(owner, "ingest")
    wrong = hook.post("/api/hooks/tiny/", data="{}", content_type="application/json")
    assert wrong.status_code == 404
    assert wrong.json()["error"] == "wrong_route"
    assert "/api/hooks/tiny/<event>/" in wrong.json()["detail"]
    claude = hook.post(
        "/api/hooks/claude-code/SessionStart/", data="{}", content_type="application/json"
    )
    assert claude.status_code == 404
    assert claude.json()["error"] == "wrong_route"
    assert not Session.objects.exists()
