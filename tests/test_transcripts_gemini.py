"""The Gemini CLI chat-recording reader (``hooks/transcripts/gemini.py``) and what the hook
client sends with Gemini's PreCompress.

The recordings here are written for the tests, in the shape Gemini CLI writes them (one
``JSON.stringify`` record a line). Sources of the shape, in ``google-gemini/gemini-cli``
(read at 0.56.0-nightly.20260806, the JSONL layout dating from 0.39, PR #23749):
``packages/core/src/services/chatRecordingService.ts`` (``appendRecord``: the metadata line,
each message whole again under its id when it gains tool calls or tokens, ``{"$set": …}``
updates with ``messages`` after a compression, ``{"$rewindTo": id}``; the legacy single
``.json`` document), ``chatRecordingTypes.ts`` (``MessageRecord``, ``ToolCallRecord``,
``TokensSummary``), ``core/geminiChat.ts`` (tool results recorded as ``user`` messages of
``functionResponse`` parts; ``displayContent`` when it differs from what was sent),
``core/client.ts`` (BeforeAgent context appended as a ``<hook_context>`` part),
``utils/sessionUtils.ts`` (``isIgnoredUserContent``), ``context/chatCompressionService.ts``
(the ``<state_snapshot>`` summary and its "Got it." answer) and
``tools/definitions/base-declarations.ts`` (``write_todos``, ``replace``, ``write_file``,
``file_path``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checkpoints.harnesses.gemini import GeminiAdapter
from checkpoints.models import Checkpoint
from hooks.transcripts import gemini
from tests.test_hook_client import HOOK, PROJECT_DIR, TOKEN, recording_server

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gemini"
SESSION = "c2f8a4d1-7e39-4b06-9a5c-1d3e8f7b2a64"
GOAL = "Add rate limiting to POST /api/login: 5 attempts per 15 minutes per IP, use Redis."
FOLLOW_UP = "Now add a test for the 429 response. @tests/test_login.py"
SENT_FOLLOW_UP = (
    "Now add a test for the 429 response. @tests/test_login.py\n"
    "--- Content from referenced files ---\nContent from @tests/test_login.py:\nimport pytest\n"
)
SESSION_CONTEXT = "<session_context>\nThis is the Gemini CLI. We are setting up the context…"
SNAPSHOT = "<state_snapshot>\n<overall_goal>Rate-limit the login endpoint.</overall_goal>\n"
REPLY = "The limiter is in place; next I will write the 429 test."
MODEL = "gemini-3-pro-preview"
TODOS = [
    {"description": "Add the Redis-backed limiter", "status": "completed"},
    {"description": "Write the 429 test", "status": "in_progress"},
    {"description": "Document the limit", "status": "pending"},
]


def record(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"))


def user(ident: str, parts: list[Any], **extra: Any) -> dict[str, Any]:
    message = {"id": ident, "timestamp": "2026-08-18T10:00:00.000Z", "type": "user"}
    return {**message, "content": parts, **extra}


def model(
    ident: str, text: str, *calls: dict[str, Any], tokens: int | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": ident,
        "timestamp": "2026-08-18T10:00:05.000Z",
        "type": "gemini",
        "content": text,
        "thoughts": [{"subject": "Planning", "description": "…", "timestamp": "…"}],
        "model": MODEL,
    }
    if tokens is not None:
        total = tokens + 700
        message["tokens"] = {
            "input": tokens,
            "output": 500,
            "cached": tokens // 2,
            "thoughts": 200,
            "tool": 0,
            "total": total,
        }
    if calls:
        message["toolCalls"] = list(calls)
    return message


def call(ident: str, name: str, args: dict[str, Any], status: str = "success") -> dict[str, Any]:
    return {
        "id": ident,
        "name": name,
        "args": args,
        "result": [{"functionResponse": {"id": ident, "name": name, "response": {}}}],
        "status": status,
        "timestamp": "2026-08-18T10:00:06.000Z",
        "displayName": name,
        "description": "",
        "renderOutputAsMarkdown": False,
    }


def tool_result(ident: str, name: str) -> dict[str, Any]:
    part = {"functionResponse": {"id": ident, "name": name, "response": {"output": "ok"}}}
    return user(f"r-{ident}", [part])


TODO_CALL = call("t1", "write_todos", {"todos": TODOS})
EDITS = (
    call("e1", "replace", {"file_path": "/repo/app/login.py", "old_string": "a", "new_string": ""}),
    call("e2", "write_file", {"file_path": "/repo/app/ratelimit.py", "content": "LIMIT = 5\n"}),
    call("e3", "replace", {"file_path": "/repo/app/broken.py", "old_string": "x"}, "error"),
    call("e4", "run_shell_command", {"command": "sed -i s/a/b/ app/settings.py"}),
)
METADATA = {
    "sessionId": SESSION,
    "projectHash": "58df6e89cfb6b928f49fb28b5641b657b29450e06282c806e964e4752b495acc",
    "startTime": "2026-08-18T10:00:00.000Z",
    "lastUpdated": "2026-08-18T10:00:00.000Z",
    "kind": "main",
}
STAMP = {"$set": {"lastUpdated": "2026-08-18T10:00:07.000Z"}}


def conversation() -> list[dict[str, Any]]:
    """The messages as Gemini records them before a compression, in order."""
    return [
        user("u0", [{"text": SESSION_CONTEXT}]),
        user("u1", [{"text": GOAL}, {"text": "<hook_context>Signet: …</hook_context>"}]),
        model("g1", "I'll plan this first.", tokens=12_000),
        model("g1", "I'll plan this first.", TODO_CALL, tokens=12_000),  # the same, grown
        tool_result("t1", "write_todos"),
        model("g2", "", *EDITS, tokens=30_000),
        *(tool_result(edit["id"], edit["name"]) for edit in EDITS),
        user("u3", [{"text": SENT_FOLLOW_UP}], displayContent=[{"text": FOLLOW_UP}]),
        {"id": "i1", "timestamp": "…", "type": "info", "content": "Chat history compressed."},
    ]


def compressed() -> dict[str, Any]:
    """``$set.messages`` after a compression: the environment, the summary and its answer,
    then the turns kept (the same ids)."""
    kept = [user("u0b", [{"text": SESSION_CONTEXT}])]
    kept += [user("s1", [{"text": SNAPSHOT}]), model("a1", gemini.SNAPSHOT_ACK)]
    kept += [user("u3", [{"text": SENT_FOLLOW_UP}], displayContent=[{"text": FOLLOW_UP}])]
    return {"$set": {"messages": kept, "lastUpdated": "2026-08-18T10:05:00.000Z"}}


def recording() -> list[str]:
    lines = [record(METADATA)]
    for message in conversation():
        lines += [record(message), record(STAMP)]
    lines.append(record(compressed()))
    lines.append(record(model("g3", REPLY, tokens=41_000)))
    lines.append(record({"$set": {"messages": [*compressed()["$set"]["messages"]]}}))  # masking
    return lines


def write(tmp_path: Path, lines: list[str], name: str = "session-2026-08-18T10-00-c2f8a4d1.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_whole_recording_gives_every_fact(tmp_path):
    facts = gemini.read_chat(write(tmp_path, recording()))

    assert facts is not None
    assert facts["current_task"] == "Write the 429 test"
    assert [(t["content"], t["status"]) for t in facts["todos"]] == [
        (todo["description"], todo["status"]) for todo in TODOS
    ]
    # What the person typed (as Gemini shows it), once each: no environment, hook context,
    # tool results or compression summary, and a rewrite repeats nothing.
    assert facts["recent_prompts"] == [GOAL, FOLLOW_UP]
    assert facts["last_user_request"] == FOLLOW_UP
    assert facts["goal"] == GOAL
    # Successful edit calls only; the shell is not read.
    assert facts["modified_files"] == ["/repo/app/login.py", "/repo/app/ratelimit.py"]
    assert facts["last_assistant_message"] == REPLY
    assert facts["model"] == MODEL
    assert facts["context_tokens"] == 41_000
    assert facts["compactions"] == 1
    assert facts["compact_summary"] == SNAPSHOT.strip()
    assert facts["git_branch"] == ""  # Gemini records none
    assert facts["truncated"] is False


def test_a_tail_that_starts_at_a_rewrite_takes_the_rewritten_conversation(tmp_path):
    lines = recording()
    start = lines.index(record(compressed()))
    path = write(tmp_path, lines)

    facts = gemini.read_chat(path, max_bytes=len("\n".join(lines[start:])) + 1)

    assert facts is not None
    assert facts["truncated"] is True
    assert facts["goal"] == ""
    assert facts["recent_prompts"] == [FOLLOW_UP]
    assert facts["compactions"] == 1
    assert facts["last_assistant_message"] == REPLY


def test_the_legacy_json_document_is_read_whole(tmp_path):
    messages = [m for m in conversation() if m["id"] != "g1" or "toolCalls" in m]
    document = {**METADATA, "messages": [*messages, model("g3", REPLY, tokens=41_000)]}
    path = tmp_path / "session-2026-03-11T21-02-c2f8a4d1.json"
    path.write_text(json.dumps(document, indent=2))

    facts = gemini.read_chat(path)

    assert facts is not None
    assert facts["recent_prompts"] == [GOAL, FOLLOW_UP]
    assert facts["current_task"] == "Write the 429 test"
    assert facts["modified_files"] == ["/repo/app/login.py", "/repo/app/ratelimit.py"]
    assert facts["last_assistant_message"] == REPLY
    assert facts["goal"] == GOAL


def test_a_custom_command_is_its_expansion_and_a_bare_command_no_prompt(tmp_path):
    expansion = "Review the diff of the current branch and list the risky changes."
    lines = [
        record(METADATA),
        record(user("c1", [{"text": expansion}], displayContent=[{"text": "/review"}])),
        record(user("c2", [{"text": "/stats"}])),
    ]

    facts = gemini.read_chat(write(tmp_path, lines))

    assert facts is not None
    assert facts["recent_prompts"] == [expansion]


def test_a_rewind_takes_back_the_requests_it_removed(tmp_path):
    abandoned = "Actually, drop Redis and use memcached."
    lines = [
        record(METADATA),
        record(user("u1", [{"text": GOAL}])),
        record(model("g1", "Done.", tokens=1000)),
        record(user("u2", [{"text": abandoned}])),
        record(model("g2", "Switching to memcached.", tokens=2000)),
        record({"$rewindTo": "u2"}),
        record(user("u3", [{"text": FOLLOW_UP}])),
    ]

    facts = gemini.read_chat(write(tmp_path, lines))

    assert facts is not None
    assert facts["recent_prompts"] == [GOAL, FOLLOW_UP]
    # A rewind to a message the tail does not hold takes back all it had, as Gemini does.
    lines.append(record({"$rewindTo": "before-the-tail"}))
    assert gemini.read_chat(write(tmp_path, lines))["recent_prompts"] == []


def test_broken_lines_are_skipped_and_a_missing_file_is_none(tmp_path):
    lines = recording()
    lines.insert(2, '{"id":"x","type":"user","content":[{"te')
    lines.insert(4, "[1, 2]")
    lines.insert(6, record({"id": "g9", "type": "gemini", "toolCalls": "not a list"}))
    lines.insert(6, record({"id": "u9", "type": "user", "content": {"unknown": True}}))

    facts = gemini.read_chat(write(tmp_path, lines))

    assert facts is not None
    assert facts["recent_prompts"] == [GOAL, FOLLOW_UP]
    assert facts["modified_files"] == ["/repo/app/login.py", "/repo/app/ratelimit.py"]
    assert gemini.read_chat(tmp_path / "missing.jsonl") is None
    assert gemini.read_chat(tmp_path / "missing.json") is None
    bad = tmp_path / "session-bad.json"
    bad.write_text("{not json")
    assert gemini.read_chat(bad)["recent_prompts"] == []


# --- through the hook client and the server ------------------------------------------------


def pre_compress(transcript: Path) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((FIXTURES / "hook_pre_compress_auto.json").read_text())
    payload["transcript_path"] = str(transcript)
    return payload


def run_client(
    tmp_path: Path, payload: dict[str, Any], url: str
) -> subprocess.CompletedProcess[bytes]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SIGNET_")}
    env.update(HOME=str(tmp_path), SIGNET_TOKEN=TOKEN, SIGNET_OUTBOX=str(tmp_path / "o.jsonl"))
    return subprocess.run(
        [sys.executable, str(HOOK), "--url", url, "gemini"],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env=env,
        cwd=PROJECT_DIR,
        timeout=15,
        check=False,
    )


def test_pre_compress_sends_the_recording_facts_and_other_events_do_not(tmp_path):
    transcript = write(tmp_path, recording())
    end = {**pre_compress(transcript), "hook_event_name": "SessionEnd", "reason": "exit"}

    with recording_server((200, b"{}"), (200, b"{}")) as (url, received):
        first = run_client(tmp_path, pre_compress(transcript), url)
        run_client(tmp_path, end, url)

    assert first.returncode == 0
    assert first.stdout == b"{}"  # Gemini reads stdout as JSON on exit 0
    assert [request.path for request in received] == ["/api/hooks/gemini/"] * 2
    assert received[0].body["signet"]["transcript"] == gemini.read_chat(transcript)
    assert "transcript" not in received[1].body["signet"]
    event = GeminiAdapter().parse(received[0].body)
    assert event.kind == "pre_compact"
    assert event.transcript is not None
    assert event.transcript.current_task == "Write the 429 test"
    assert event.transcript.recent_prompts == (GOAL, FOLLOW_UP)
    assert event.transcript.goal == GOAL
    assert event.transcript.context_tokens == 41_000


@pytest.mark.django_db
def test_the_endpoint_keeps_the_recording_facts_in_the_pre_compaction_checkpoint(
    tmp_path, client_for, owner
):
    transcript = write(tmp_path, recording())
    with recording_server((200, b"{}")) as (url, received):
        run_client(tmp_path, pre_compress(transcript), url)

    hook = client_for(owner, "ingest")
    reply = hook.post(
        "/api/hooks/gemini/", data=json.dumps(received[0].body), content_type="application/json"
    )

    assert reply.status_code == 200
    checkpoint = Checkpoint.objects.get(session__session_key=SESSION)
    assert checkpoint.current_task == "Write the 429 test"
    assert FOLLOW_UP in checkpoint.recent_prompts
    assert all("<hook_context>" not in prompt for prompt in checkpoint.recent_prompts)
    assert checkpoint.modified_files == ["/repo/app/login.py", "/repo/app/ratelimit.py"]


def test_the_reader_imports_nothing_the_hook_client_has_not_loaded(tmp_path):
    """The client is a short-lived process, and Gemini runs PreCompress every turn."""
    code = (
        "import sys; sys.path.insert(0, sys.argv.pop(1)); import signet_hook; "
        "signet_hook.main(); sys.stderr.write(' '.join(sorted(sys.modules)))"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("SIGNET_")}
    env.update(HOME=str(tmp_path), SIGNET_TOKEN=TOKEN, SIGNET_OUTBOX=str(tmp_path / "o.jsonl"))
    with recording_server((200, b"{}")) as (url, received):
        proc = subprocess.run(
            [sys.executable, "-I", "-S", "-c", code, str(HOOK.parent), "--url", url, "gemini"],
            input=json.dumps(pre_compress(write(tmp_path, recording()))).encode(),
            capture_output=True,
            env=env,
            timeout=15,
            check=False,
        )

    assert received[0].body["signet"]["transcript"]["current_task"] == "Write the 429 test"
    loaded = set(proc.stderr.decode().split())
    assert "transcripts.gemini" in loaded
    assert loaded.isdisjoint({"json", "re", "typing", "dataclasses", "inspect"})
