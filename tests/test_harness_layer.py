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
from tests.hookutil import TRANSCRIPT, client_read, payload, send

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


# Claude Code's adapter: what a person typed, and the facts its hook client reads.

IDE_FILE = (
    "<ide_opened_file>The user opened the file /home/alice/projects/webapp/src/vat.py in the "
    "IDE. This may or may not be related to the current task.</ide_opened_file>"
)
TASK_EXIT = (
    "<task-notification>\n<task-id>b8k2j1x</task-id>\n<status>failed</status>\n"
    '<summary>Background command "npm run dev" failed with exit code 143</summary>\n'
    "</task-notification>\nRead the output file to retrieve the result: /tmp/b8k2j1x.output"
)


def test_a_claude_code_prompt_is_what_a_person_typed(client_for, owner, clock):
    hook = client_for(owner, "ingest")
    now = clock.now.isoformat()
    send(
        hook, payload("user_prompt_submit", prompt=f"{IDE_FILE}\nFix the VAT rate", prompt_id="p-1")
    )
    send(hook, payload("user_prompt_submit", prompt=TASK_EXIT, prompt_id="p-2"))
    send(hook, payload("user_prompt_submit", prompt=f"{IDE_FILE}\n# use uv", prompt_id="p-3"))
    # An older client's catch-up, notices and all: the server cleans it the same way.
    backlog = [
        {"type": "prompt", "id": "p-4", "text": TASK_EXIT, "at": now},
        {"type": "prompt", "id": "p-5", "text": "\x1b[1;31mFAIL\x1b[0m: why?", "at": now},
    ]
    send(hook, payload("stop", signet={"sync": {"events": backlog}}))

    session = Session.objects.get()
    assert session.recent_prompts == ["Fix the VAT rate", "# use uv", "FAIL: why?"]
    assert session.recent_remembers == ["use uv"]


def test_the_claude_code_reader_s_goal_and_summary_reach_the_event():
    body = client_read(payload("pre_compact_auto", transcript_path=str(TRANSCRIPT)))

    event = ADAPTERS["claude-code"].parse(body)

    assert event.transcript is not None
    assert event.transcript.goal == (
        "Add rate limiting to POST /api/login: max 5 attempts per IP per 15 minutes, "
        "return 429 with Retry-After."
    )
    assert event.transcript.compact_summary.startswith("Summary:\n1. Primary Request and Intent:")
    assert "3. Pending Tasks:" in event.transcript.compact_summary
