"""What Claude Code's ``http`` hooks carry, caught up from the transcript after an outage.

The hook client sends, with each command hook, the prompts, edits and compactions the
transcript gained since the last one (``hooks/transcripts/sync.py``, as ``signet.sync``);
the engine applies what it lacks, once and in order (``engine/backlog.py``).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from checkpoints.models import Session
from hooks import signet_hook
from hooks.transcripts import sync as transcript_sync
from tests.hookutil import payload, send

SESSION = "3f2b8c1e-5d4a-4e7b-9c2f-8a1d6e0b7c42"
VERSION = "2.1.197"
STAMP = "2026-11-27T00:10:00.000Z"


@pytest.fixture
def hook(client_for, owner):
    return client_for(owner, "ingest")


def live_prompt(hook, text: str, prompt_id: str) -> None:
    response = send(hook, payload("user_prompt_submit", prompt=text, prompt_id=prompt_id))
    assert response.status_code == 200, response.content


def stop_with(hook, events: list[dict[str, Any]], *, key: str = "stop-1", **signet: Any) -> Any:
    body = payload("stop", signet={"sync": {"events": events}, **signet})
    response = send(hook, body, **{"Idempotency-Key": key})
    assert response.status_code == 200, response.content
    return response


def at(clock: Any, **delta: float) -> str:
    moment: datetime = clock.now + timedelta(**delta)
    return moment.isoformat()


# --- the server ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_prompts_missed_in_an_outage_are_counted_once_and_kept_in_order(hook, clock):
    send(hook, payload("session_start_startup"))
    start = clock.now
    live_prompt(hook, "First: the login form", "p-1")
    clock.advance(minutes=10)  # the service is down: p-2 and p-3 are lost
    clock.advance(minutes=10)
    live_prompt(hook, "Fourth: the rate limit", "p-4")  # back up before the next Stop

    stop_with(hook, [
        {"type": "prompt", "id": "p-1", "text": "First: the login form", "at": start.isoformat()},
        {"type": "prompt", "id": "p-2", "text": "Second: the password reset", "at": (start + timedelta(minutes=5)).isoformat()},  # noqa: E501
        {"type": "prompt", "id": "p-3", "text": "Third: the lockout", "at": (start + timedelta(minutes=15)).isoformat()},  # noqa: E501
        {"type": "prompt", "id": "p-4", "text": "Fourth: the rate limit", "at": clock.now.isoformat()},  # noqa: E501
    ])  # fmt: skip

    session = Session.objects.get(session_key=SESSION)
    assert session.prompt_count == 4
    assert session.recent_prompts == [
        "First: the login form",
        "Second: the password reset",
        "Third: the lockout",
        "Fourth: the rate limit",
    ]


@pytest.mark.django_db
def test_a_backlog_that_comes_again_counts_nothing_again(hook, clock):
    send(hook, payload("session_start_startup"))
    events = [{"type": "prompt", "id": "p-1", "text": "Add the VAT rate", "at": at(clock)}]

    stop_with(hook, events, key="stop-1")
    # The next Stop finds it again (its cursor was not kept), under another key.
    stop_with(hook, events, key="stop-2")

    session = Session.objects.get(session_key=SESSION)
    assert session.prompt_count == 1
    assert session.recent_prompts == ["Add the VAT rate"]


@pytest.mark.django_db
def test_a_replayed_event_s_backlog_goes_before_the_prompts_that_came_after_it(hook, clock):
    send(hook, payload("session_start_startup"))
    lost_at = clock.now
    clock.advance(minutes=5)
    live_prompt(hook, "Second, delivered", "p-2")
    clock.advance(minutes=1)

    # The Stop of the turn before, queued in the outbox during the outage, replayed now.
    stop_with(
        hook,
        [{"type": "prompt", "id": "p-1", "text": "First, lost", "at": lost_at.isoformat()}],
        queued_at=lost_at.isoformat(),
    )

    session = Session.objects.get(session_key=SESSION)
    assert session.prompt_count == 2
    assert session.recent_prompts == ["First, lost", "Second, delivered"]


@pytest.mark.django_db
def test_edits_the_server_missed_are_added_and_known_files_keep_their_place(hook, clock):
    send(hook, payload("session_start_startup"))
    known = "/home/alice/projects/webapp/src/auth.py"
    send(hook, payload("post_tool_use_edit", tool_input={"file_path": known}, tool_use_id="t-1"))
    other = "/home/alice/projects/webapp/src/other.py"
    send(hook, payload("post_tool_use_edit", tool_input={"file_path": other}, tool_use_id="t-2"))
    missed = "/home/alice/projects/webapp/src/limits.py"

    stop_with(hook, [
        {"type": "edit", "id": "t-1", "tool": "Edit", "file": known, "at": at(clock)},
        {"type": "edit", "id": "t-2", "tool": "Edit", "file": other, "at": at(clock)},
        {"type": "edit", "id": "t-3", "tool": "Write", "file": missed, "at": at(clock)},
        {"type": "edit", "id": "t-4", "tool": "Read", "file": "/etc/hosts", "at": at(clock)},
    ])  # fmt: skip

    session = Session.objects.get(session_key=SESSION)
    assert session.modified_files == [known, other, missed]


@pytest.mark.django_db
def test_a_missed_compaction_summary_never_replaces_a_newer_one(hook, clock):
    send(hook, payload("session_start_startup"))
    missed_at = clock.now
    clock.advance(minutes=30)
    newer = payload("post_compact_manual", compact_summary="The newer summary", prompt_id="p-9")
    send(hook, newer)

    stop_with(hook, [
        {"type": "compaction", "id": "p-5", "summary": "The older summary", "at": missed_at.isoformat()},  # noqa: E501
        {"type": "compaction", "id": "p-9", "summary": "The newer summary", "at": at(clock)},
    ])  # fmt: skip

    assert Session.objects.get(session_key=SESSION).compact_summary == "The newer summary"


@pytest.mark.django_db
def test_a_missed_compaction_summary_is_kept(hook, clock):
    send(hook, payload("session_start_startup"))

    stop_with(hook, [{"type": "compaction", "id": "p-5", "summary": "What was done", "at": at(clock)}])  # fmt: skip  # noqa: E501

    assert Session.objects.get(session_key=SESSION).compact_summary == "What was done"


@pytest.mark.django_db
def test_a_backlog_past_its_bound_is_refused(hook):
    events = [{"type": "edit", "id": f"t-{n}", "tool": "Edit", "file": "/a"} for n in range(201)]
    body = payload("stop", signet={"sync": {"events": events}})

    response = send(hook, body)

    assert response.status_code == 400
    assert "signet.sync.events" in response.json()["detail"]


@pytest.mark.django_db
def test_a_backlog_of_a_kind_this_server_does_not_know_is_ignored(hook):
    stop_with(hook, [{"type": "subagent", "id": "x"}, {"type": "prompt", "id": "p-1", "text": ""}])

    assert Session.objects.get(session_key=SESSION).prompt_count == 0


@pytest.mark.django_db
def test_the_users_answers_the_transcript_holds_are_the_sessions_decisions_once(hook, clock):
    send(hook, payload("session_start_startup"))
    answer = {
        "type": "decision",
        "id": "toolu_Q1",
        "text": "How should users specify gist visibility? → Default unlisted only (MVP)",
        "at": at(clock),
    }
    said = {"type": "prompt", "id": "toolu_W1", "text": "test this first", "at": at(clock)}

    stop_with(hook, [answer, said], key="stop-1")
    stop_with(hook, [answer, said], key="stop-2")  # found again: nothing twice

    session = Session.objects.get(session_key=SESSION)
    assert session.decisions == [answer["text"]]
    assert session.recent_prompts == ["test this first"]
    assert session.prompt_count == 1


# --- the client ------------------------------------------------------------------------------


def user_line(
    text: str | list[dict[str, Any]], prompt_id: str, *, version: str = VERSION, **extra: Any
) -> dict[str, Any]:
    return {
        "type": "user", "uuid": f"u-{prompt_id}", "promptId": prompt_id, "version": version,
        "timestamp": STAMP, "isSidechain": False,
        "message": {"role": "user", "content": text}, **extra,
    }  # fmt: skip


def edit_line(tool_id: str, name: str, path: str) -> dict[str, Any]:
    block = {"type": "tool_use", "id": tool_id, "name": name, "input": {"file_path": path}}
    return {
        "type": "assistant", "uuid": f"a-{tool_id}", "version": VERSION, "isSidechain": False,
        "timestamp": "2026-11-27T00:11:00.000Z",
        "message": {"role": "assistant", "content": [block]},
    }  # fmt: skip


def append(path: Path, *records: dict[str, Any]) -> None:
    with path.open("a") as handle:
        for record in records:
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")


def collect(transcript: Path, state_dir: Path) -> transcript_sync.Sync:
    found = transcript_sync.sync_collect(
        {"session_id": SESSION, "transcript_path": str(transcript)},
        state_dir=str(state_dir),
        loads=json.loads,
        dumps=json.dumps,
    )
    assert found is not None
    return found


def test_the_client_sends_what_the_transcript_gained_since_its_last_event(tmp_path):
    transcript = tmp_path / "t.jsonl"
    append(transcript, user_line("Before our first event", "p-0"))
    first = collect(transcript, tmp_path / "sync")
    assert first.events == []  # what came before the first event is not ours to send
    first.commit()

    append(
        transcript,
        user_line("Add the VAT rate", "p-1"),
        edit_line("toolu_1", "Write", "/p/vat.py"),
        user_line("<command-name>/compact</command-name>", "p-2"),
        user_line("Continue from where you left off.", "p-2", isMeta=True),
        user_line(
            "This session is being continued from a previous conversation that ran out of "
            "context. The summary below covers the earlier portion of the conversation.\n\n"
            "Summary: VAT.\n\nIf you need specific details from before compaction (like "
            "exact code snippets), read the full transcript at: /p/t.jsonl\nContinue.",
            "p-2",
            isCompactSummary=True,
            isVisibleInTranscriptOnly=True,
        ),
        user_line("Before prompt ids", "p-3", version="2.1.195"),
        user_line("A subagent's", "p-4", isSidechain=True),
    )
    second = collect(transcript, tmp_path / "sync")

    assert [(e["type"], e["id"]) for e in second.events] == [
        ("prompt", "p-1"),
        ("edit", "toolu_1"),
        ("compaction", "p-2"),
    ]
    assert second.events[0]["text"] == "Add the VAT rate"
    assert second.events[0]["at"] == STAMP
    assert second.events[1]["file"] == "/p/vat.py"
    assert second.events[2]["summary"] == "Summary: VAT."
    # Not kept (the event was neither delivered nor queued): the same again next time.
    assert collect(transcript, tmp_path / "sync").events == second.events
    second.commit()
    assert collect(transcript, tmp_path / "sync").events == []


def result_line(tool_id: str, content: str, *, error: bool = False) -> dict[str, Any]:
    """A tool result as Claude Code 2.1 writes it (a failed one: ``is_error`` before the id)."""
    block: dict[str, Any] = {"type": "tool_result", "content": content}
    if error:
        block["is_error"] = True
    block["tool_use_id"] = tool_id
    return {
        "type": "user", "uuid": f"r-{tool_id}", "version": VERSION, "isSidechain": False,
        "timestamp": "2026-11-27T00:11:01.000Z", "message": {"role": "user", "content": [block]},
        "toolUseResult": f"Error: {content}" if error else {"filePath": "/p/x.py"},
    }  # fmt: skip


def started(tmp_path: Path) -> Path:
    transcript = tmp_path / "t.jsonl"
    transcript.touch()
    collect(transcript, tmp_path / "sync").commit()
    return transcript


def test_the_client_sends_only_what_a_person_typed(tmp_path):
    transcript = started(tmp_path)
    notice = (
        "<task-notification>\n<task-id>b8k2j1x</task-id>\n<status>failed</status>\n"
        '<summary>Background command "npm run dev" failed with exit code 143</summary>\n'
        "</task-notification>\nRead the output file to retrieve the result: /tmp/b8k2j1x.output"
    )
    ide = (
        "<ide_opened_file>The user opened the file /p/vat.py in the IDE. This may or may not "
        "be related to the current task.</ide_opened_file>"
    )
    append(
        transcript,
        user_line(notice, "p-1"),
        user_line([{"type": "text", "text": ide}, {"type": "text", "text": "Why 19%?"}], "p-2"),
        user_line(
            "<command-message>opsx:apply</command-message>\n"
            "<command-name>/opsx:apply</command-name>\n<command-args>vat-rate</command-args>",
            "p-3",
        ),
        user_line("<command-name>/clear</command-name>\n<command-args></command-args>", "p-4"),
        user_line("\x1b[1;31mFAIL\x1b[0m test_vat [2mline 3[0m: why?", "p-5"),
    )

    found = collect(transcript, tmp_path / "sync")

    assert [(e["id"], e["text"]) for e in found.events] == [
        ("p-2", "Why 19%?"),
        ("p-3", "/opsx:apply vat-rate"),
        ("p-5", "FAIL test_vat line 3: why?"),
    ]


def test_a_failed_or_rejected_edit_is_not_sent(tmp_path):
    transcript = started(tmp_path)
    append(
        transcript,
        edit_line("toolu_1", "Edit", "/p/a.py"),
        result_line(
            "toolu_1",
            "<tool_use_error>String to replace not found in file.</tool_use_error>",
            error=True,
        ),
        edit_line("toolu_2", "Write", "/p/b.py"),
        result_line(
            "toolu_2",
            "The user doesn't want to proceed with this tool use. The tool use was rejected.",
            error=True,
        ),
        edit_line("toolu_3", "Edit", "/p/c.py"),
        result_line("toolu_3", "The file /p/c.py has been updated successfully."),
    )

    found = collect(transcript, tmp_path / "sync")

    assert [e["file"] for e in found.events] == ["/p/c.py"]
    found.commit()
    assert collect(transcript, tmp_path / "sync").events == []


def test_an_edit_waits_for_its_result_before_it_is_sent(tmp_path):
    transcript = started(tmp_path)
    append(
        transcript, user_line("Add the VAT rate", "p-1"), edit_line("toolu_1", "Edit", "/p/a.py")
    )

    first = collect(transcript, tmp_path / "sync")
    first.commit()
    append(transcript, result_line("toolu_1", "The file /p/a.py has been updated successfully."))
    second = collect(transcript, tmp_path / "sync")
    second.commit()

    assert [e["id"] for e in first.events] == ["p-1"]  # PostToolUse time: no result yet
    assert [e["id"] for e in second.events] == ["toolu_1"]
    assert collect(transcript, tmp_path / "sync").events == []


def test_an_edit_that_never_got_a_result_is_sent_once_the_session_moved_on(tmp_path):
    transcript = started(tmp_path)
    append(
        transcript,
        edit_line("toolu_1", "Edit", "/p/a.py"),  # the agent was killed mid-edit
        user_line("Where were we?", "p-2"),
    )

    found = collect(transcript, tmp_path / "sync")

    assert [e["id"] for e in found.events] == ["toolu_1", "p-2"]


def test_the_client_sends_a_bounded_part_and_the_next_event_the_rest(tmp_path):
    transcript = tmp_path / "t.jsonl"
    transcript.touch()
    collect(transcript, tmp_path / "sync").commit()
    count = transcript_sync.SYNC_MAX_EVENTS + 5
    append(transcript, *(user_line(f"prompt {n}", f"p-{n}") for n in range(count)))

    first = collect(transcript, tmp_path / "sync")
    first.commit()
    rest = collect(transcript, tmp_path / "sync")

    assert len(first.events) == transcript_sync.SYNC_MAX_EVENTS
    assert [e["id"] for e in first.events + rest.events] == [f"p-{n}" for n in range(count)]


def test_a_line_too_long_to_read_is_stepped_over(tmp_path, monkeypatch):
    monkeypatch.setattr(transcript_sync, "SYNC_MAX_BYTES", 4096)
    monkeypatch.setattr(transcript_sync, "SKIP_CHUNK_BYTES", 1000)
    transcript = tmp_path / "t.jsonl"
    transcript.touch()
    collect(transcript, tmp_path / "sync").commit()
    append(transcript, user_line("x" * 10_000, "p-big"), user_line("After it", "p-next"))

    skipped = collect(transcript, tmp_path / "sync")
    skipped.commit()
    after = collect(transcript, tmp_path / "sync")

    assert skipped.events == []
    assert [e["id"] for e in after.events] == ["p-next"]


def test_a_stop_the_server_cannot_take_is_queued_with_its_backlog_and_the_cursor_moves(
    tmp_path, monkeypatch
):
    transcript = tmp_path / "t.jsonl"
    transcript.touch()
    outbox = tmp_path / "signet" / "outbox.jsonl"
    monkeypatch.setenv("SIGNET_TOKEN", "test-token")
    body = {**payload("stop"), "transcript_path": str(transcript), "cwd": str(tmp_path)}
    argv = ["--url", "http://127.0.0.1:9", "--outbox", str(outbox), "claude-code"]

    def stop() -> None:
        signet_hook.run(
            argv, stdin=io.BytesIO(json.dumps(body).encode()), stdout=io.BytesIO(), watchdog=False
        )

    stop()  # the session's first command hook: its cursor starts here
    append(transcript, user_line("Add the VAT rate", "p-1"))
    stop()
    stop()

    queued = [json.loads(line) for line in outbox.read_text().splitlines()]
    assert [entry["body"]["signet"].get("sync") for entry in queued] == [
        None,
        {"events": [{"type": "prompt", "id": "p-1", "text": "Add the VAT rate", "at": STAMP}]},
        None,  # the outbox carries it already
    ]
    assert os.path.isfile(tmp_path / "signet" / "sync" / f"{SESSION}.json")


def test_the_client_sends_a_bounded_amount_of_text_at_a_time(tmp_path):
    transcript = tmp_path / "t.jsonl"
    transcript.touch()
    collect(transcript, tmp_path / "sync").commit()
    long = "y" * transcript_sync.PROMPT_CHARS
    count = transcript_sync.SYNC_MAX_CHARS // transcript_sync.PROMPT_CHARS + 3
    append(transcript, *(user_line(long, f"p-{n}") for n in range(count)))

    first = collect(transcript, tmp_path / "sync")

    assert len(first.events) == transcript_sync.SYNC_MAX_CHARS // transcript_sync.PROMPT_CHARS


@pytest.mark.parametrize(("status", "kept"), [(200, True), (400, True), (401, False), (404, False)])
def test_the_cursor_moves_when_the_event_is_delivered_or_its_payload_refused(
    tmp_path, monkeypatch, status, kept
):
    from tests.test_hook_client import recording_server

    transcript = tmp_path / "t.jsonl"
    transcript.touch()
    monkeypatch.setenv("SIGNET_TOKEN", "test-token")
    body = {**payload("stop"), "transcript_path": str(transcript), "cwd": str(tmp_path)}
    outbox = tmp_path / "outbox.jsonl"

    def stop(url: str) -> None:
        argv = ["--url", url, "--outbox", str(outbox), "claude-code"]
        stdin = io.BytesIO(json.dumps(body).encode())
        signet_hook.run(argv, stdin=stdin, stdout=io.BytesIO(), watchdog=False)

    with recording_server((200, b"{}"), (status, b"{}")) as (url, received):
        stop(url)
        append(transcript, user_line("Add the VAT rate", "p-1"))
        stop(url)
        stop(url)

    sent = [request.body["signet"].get("sync") for request in received]
    assert sent[0] is None
    assert sent[1] is not None
    assert (sent[2] is None) is kept


def test_a_transcript_path_that_is_not_a_file_is_not_read(tmp_path):
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)

    found = transcript_sync.sync_collect(
        {"session_id": SESSION, "transcript_path": str(fifo)},
        state_dir=str(tmp_path / "sync"),
        loads=json.loads,
        dumps=json.dumps,
    )

    assert found is None


@pytest.mark.django_db
def test_a_prompt_whose_own_backlog_holds_it_counts_once(hook, clock):
    send(hook, payload("session_start_startup"))
    body = payload("user_prompt_submit", prompt="Add the VAT rate", prompt_id="p-1")
    body["signet"] = {"sync": {"events": [
        {"type": "prompt", "id": "p-1", "text": "Add the VAT rate", "at": at(clock)},
    ]}}  # fmt: skip

    assert send(hook, body, **{"Idempotency-Key": "ups-1"}).status_code == 200

    session = Session.objects.get(session_key=SESSION)
    assert session.prompt_count == 1
    assert session.recent_prompts == ["Add the VAT rate"]


@pytest.mark.django_db
def test_a_queued_prompt_a_later_backlog_applied_first_counts_nothing_again(hook, clock):
    send(hook, payload("session_start_startup"))
    queued_at = clock.now
    clock.advance(minutes=1)
    # The outbox let the Stop past the prompt that stalled before it.
    stop_with(hook, [{"type": "prompt", "id": "p-1", "text": "Add the VAT rate", "at": at(clock)}])
    late = payload("user_prompt_submit", prompt="Add the VAT rate", prompt_id="p-1")
    late["signet"] = {"queued_at": queued_at.isoformat()}

    assert send(hook, late, **{"Idempotency-Key": "ups-1"}).status_code == 200

    assert Session.objects.get(session_key=SESSION).prompt_count == 1


REJECTED_SAID = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it "
    "was a file edit, the new_string was NOT written to the file). To tell you how to proceed, "
    "the user said:\n"
)


def test_the_client_sends_what_the_user_said_in_tool_results(tmp_path):
    transcript = started(tmp_path)
    question = "How should users specify gist visibility (public vs unlisted)?"
    answers = {"type": "tool_result", "content": (
        f'User has answered your questions: "{question}"="Default unlisted only (MVP)". '
        "You can now continue with the user's answers in mind."
    ), "tool_use_id": "toolu_Q"}  # fmt: skip
    answered = {
        "type": "user", "uuid": "r-q", "version": "2.1.11", "isSidechain": False,
        "timestamp": STAMP, "message": {"role": "user", "content": [answers]},
        "toolUseResult": {"questions": [], "answers": {question: "Default unlisted only (MVP)"}},
    }  # fmt: skip
    append(
        transcript,
        answered,
        {**answered, "uuid": "r-s", "isSidechain": True},  # a subagent's: not the user's
        edit_line("toolu_W", "Write", "/p/types.go"),
        result_line("toolu_W", REJECTED_SAID + "actually maybe let's test this first", error=True),
    )

    found = collect(transcript, tmp_path / "sync")

    assert [(e["type"], e["id"], e["text"]) for e in found.events] == [
        ("decision", "toolu_Q", f"{question} → Default unlisted only (MVP)"),
        ("prompt", "toolu_W", "actually maybe let's test this first"),
    ]
    assert found.events[0]["at"] == STAMP


# --- what the lines say of the session now: its branch, the agent's last words ----------------


def claude_line(
    kind: str, content: Any, *, branch: str, at: str = STAMP, **extra: Any
) -> dict[str, Any]:
    """A main-chain line in the order of keys Claude Code writes them."""
    return {
        "parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/p",
        "sessionId": SESSION, "version": VERSION, "gitBranch": branch, "type": kind,
        "message": {"role": kind, "content": content}, "uuid": f"{kind}-{at}", "timestamp": at,
        **extra,
    }  # fmt: skip


def said(
    text: str, *, branch: str = "feat/limits", at: str = STAMP, **extra: Any
) -> dict[str, Any]:
    return claude_line("assistant", [{"type": "text", "text": text}], branch=branch, at=at, **extra)


def test_the_client_sends_the_newest_branch_the_lines_carry(tmp_path):
    transcript = started(tmp_path)
    append(
        transcript,
        claude_line("user", "Add the rate limit", branch="main", promptId="p-1"),
        said("On it.", branch="main"),
        # Switched mid-session; then a detached head, and a line with none: no branch to name.
        said("Branched off.", branch="feat/limits"),
        said("Checked out a tag.", branch="HEAD"),
        {"type": "system", "subtype": "turn_duration", "gitBranch": "", "timestamp": STAMP},
    )

    found = collect(transcript, tmp_path / "sync")
    found.commit()
    quiet = collect(transcript, tmp_path / "sync")

    assert found.latest["git_branch"] == "feat/limits"
    sent = found.payload()
    assert sent is not None
    assert sent["git_branch"] == "feat/limits"
    assert quiet.payload() is None  # no new line: nothing to say


def test_the_client_sends_the_agents_newest_text_clipped_as_the_reader_clips_it(tmp_path):
    transcript = started(tmp_path)
    long = "Found it. " + "The API points at localhost:5001. " * 80 + "\n\nNext: restart it."
    bash = {"type": "tool_use", "id": "toolu_B", "name": "Bash", "input": {"command": "ls"}}
    append(
        transcript,
        said("Looking at the upload."),
        said(long, at="2026-11-27T00:12:00.000Z"),
        claude_line("assistant", [bash], branch="feat/limits"),  # the call after it says nothing
        {**said("A subagent's words."), "isSidechain": True},
        said("No response requested.", message={"role": "assistant", "model": "<synthetic>",
             "content": [{"type": "text", "text": "No response requested."}]}),
    )  # fmt: skip

    found = collect(transcript, tmp_path / "sync")

    message = found.latest["last_assistant_message"]
    assert message["at"] == "2026-11-27T00:12:00.000Z"
    assert len(message["text"]) <= 2000
    assert message["text"].startswith("Found it. The API points at localhost:5001.")
    assert message["text"].endswith("Next: restart it.")  # the closing step survives the cut


def test_what_the_agent_said_before_a_compaction_is_not_sent_as_its_latest(tmp_path):
    transcript = started(tmp_path)
    append(
        transcript,
        said("I'll restart the API next."),
        {"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted",
         "gitBranch": "feat/limits", "timestamp": STAMP},
    )  # fmt: skip

    found = collect(transcript, tmp_path / "sync")

    assert "last_assistant_message" not in found.latest
    assert found.latest["git_branch"] == "feat/limits"


def sync_latest(clock: Any, *, branch: str = "", text: str = "", **delta: float) -> dict[str, Any]:
    sync: dict[str, Any] = {"events": []}
    if branch:
        sync["git_branch"] = branch
    if text:
        sync["last_assistant_message"] = {"text": text, "at": at(clock, **delta)}
    return sync


@pytest.mark.django_db
def test_a_live_events_lines_give_the_session_its_branch_and_the_agents_last_words(hook, clock):
    send(hook, payload("session_start_startup"))  # its cwd is not on this machine: no branch
    body = payload("post_tool_use_edit", tool_use_id="t-1")
    body["signet"] = {"sync": sync_latest(clock, branch="feat/limits", text="Port 5001 next.")}
    assert send(hook, body).status_code == 200

    session = Session.objects.get(session_key=SESSION)
    assert session.git_branch == "feat/limits"
    assert session.last_assistant_message == "Port 5001 next."

    # A live prompt (the unlocked path) reads and writes them too.
    clock.advance(minutes=1)
    prompt = payload("user_prompt_submit", prompt="and the signup route", prompt_id="p-2")
    prompt["signet"] = {"sync": sync_latest(clock, branch="main", text="Limiter wired in.")}
    assert send(hook, prompt).status_code == 200

    session = Session.objects.get(session_key=SESSION)
    assert session.git_branch == "main"
    assert session.last_assistant_message == "Limiter wired in."


@pytest.mark.django_db
def test_a_replayed_events_lines_change_neither_the_branch_nor_the_last_words(hook, clock):
    send(hook, payload("session_start_startup"))
    queued_at = clock.now
    clock.advance(minutes=1)
    stop = payload("stop", last_assistant_message="Signup is limited too.")
    stop["signet"] = {"sync": sync_latest(clock, branch="feat/signup")}
    send(hook, stop)
    # The outbox held this one from before: its lines are older than the Stop's.
    late = payload("post_tool_use_edit", tool_use_id="t-1")
    late["signet"] = {
        "queued_at": queued_at.isoformat(),
        "sync": sync_latest(clock, branch="main", text="On it.", minutes=-1),
    }
    assert send(hook, late).status_code == 200

    session = Session.objects.get(session_key=SESSION)
    assert session.git_branch == "feat/signup"
    assert session.last_assistant_message == "Signup is limited too."


@pytest.mark.django_db
def test_the_agents_words_from_before_the_latest_compaction_do_not_come_back(hook, clock):
    send(hook, payload("session_start_startup"))
    before = clock.now
    clock.advance(minutes=1)
    send(hook, payload("pre_compact_auto", transcript_path="/nonexistent/t.jsonl"))
    send(hook, payload("session_start_compact"))
    clock.advance(minutes=1)
    # A live event whose client read, bounded, had not reached the compaction yet.
    body = payload("post_tool_use_edit", tool_use_id="t-1")
    body["signet"] = {"sync": {"events": [], "last_assistant_message": {
        "text": "I'll restart the API next.", "at": before.isoformat()}}}  # fmt: skip
    send(hook, body)
    assert Session.objects.get(session_key=SESSION).last_assistant_message == ""

    body["signet"]["sync"]["last_assistant_message"] = {"text": "Restarted.", "at": at(clock)}
    send(hook, body)
    assert Session.objects.get(session_key=SESSION).last_assistant_message == "Restarted."


@pytest.mark.django_db
def test_a_new_session_after_a_dead_one_recovers_its_branch_and_last_words(hook, clock):
    from checkpoints.models import Checkpoint

    send(hook, payload("session_start_startup"))
    send(hook, payload("user_prompt_submit", prompt="Fix the upload 500s", prompt_id="p-1"))
    clock.advance(seconds=30)
    body = payload("post_tool_use_edit", tool_use_id="t-1")
    body["signet"] = {"sync": sync_latest(
        clock, branch="feat/phase-12", text="Found it: check port 5001 next.")}  # fmt: skip
    send(hook, body)  # the session is killed mid-turn: no Stop, no SessionEnd
    clock.advance(seconds=5)

    send(hook, payload("session_start_startup", session_id="b7c1d2e3-0000-4000-8000-000000000003"))

    written = Checkpoint.objects.get(session_key=SESSION)
    assert written.git_branch == "feat/phase-12"
    assert written.last_assistant_message == "Found it: check port 5001 next."


# --- a dead session's last lines, caught up by the next session's start ----------------------

SESSION_B = "b7c1d2e3-0000-4000-8000-000000000003"


class Project:
    """A Claude Code project folder (``~/.claude/projects/<slug>``) whose sessions' hooks the
    real client runs, one process per hook."""

    def __init__(self, tmp_path: Path, url: str) -> None:
        self.folder = tmp_path / "projects" / "-repo"
        self.folder.mkdir(parents=True)
        self.cwd = tmp_path / "repo"
        self.cwd.mkdir()
        self.outbox = tmp_path / "signet" / "outbox.jsonl"
        self.url = url

    def transcript(self, session_id: str) -> Path:
        return self.folder / f"{session_id}.jsonl"

    def cursor(self, session_id: str) -> Path:
        return self.outbox.parent / "sync" / f"{session_id}.json"

    def hook(self, token: str, name: str, session_id: str, **fields: Any) -> Any:
        from tests.test_hook_client_e2e import HOOK

        body = {
            **payload(name, **fields),
            "session_id": session_id,
            "transcript_path": str(self.transcript(session_id)),
            "cwd": str(self.cwd),
        }
        return subprocess.run(
            [sys.executable, str(HOOK), "--url", self.url, "--outbox", str(self.outbox),
             "--timeout", "5", "claude-code"],
            input=json.dumps(body).encode(), env={**os.environ, "SIGNET_TOKEN": token},
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip


def killed_mid_turn(project: Project, token: str) -> None:
    """Session A: started, given a prompt, then killed after a Read call and its last text,
    which fire no hook."""
    project.transcript(SESSION).touch()
    project.hook(token, "session_start_startup", SESSION)
    append(
        project.transcript(SESSION),
        claude_line("user", "Import the legacy accounts", branch="feat/import", promptId="p-1"),
    )
    project.hook(token, "user_prompt_submit", SESSION, prompt="Import the legacy accounts",
                 prompt_id="p-1")  # fmt: skip
    read = {"type": "tool_use", "id": "r-1", "name": "Read", "input": {"file_path": "a.py"}}
    append(
        project.transcript(SESSION),
        claude_line("assistant", [read], branch="feat/import"),
        result_line("r-1", "def load(): ..."),
        said("Next I will add the orphan check", branch="feat/import"),
    )


def test_a_new_session_recovers_what_a_session_killed_mid_turn_said_last(transactional_db,
                                                                          tmp_path):  # fmt: skip
    from checkpoints.services.tokens import token_create
    from tests.factories import UserFactory
    from tests.test_hook_client_e2e import Service, free_port

    _, token = token_create(owner=UserFactory(), name="hook", scopes=["ingest"])
    service = Service(free_port())
    service.start()
    try:
        project = Project(tmp_path, service.url)
        killed_mid_turn(project, token)

        started = project.hook(token, "session_start_startup", SESSION_B)
    finally:
        service.stop()
        connections.close_all()

    reply = json.loads(started.stdout)
    context = reply["hookSpecificOutput"]["additionalContext"]
    assert "Next I will add the orphan check" in context, context
    dead = Session.objects.get(session_key=SESSION)
    assert dead.git_branch == "feat/import"
    assert dead.ended_at is None
    assert json.loads(project.cursor(SESSION).read_text())["offset"] == (
        project.transcript(SESSION).stat().st_size
    )


def catch_up_setup(tmp_path: Path, url: str) -> Project:
    """Session A seen live (its cursor), then its last lines, with no hook; as the server
    would have had it (a recording server answers every hook)."""
    project = Project(tmp_path, url)
    killed_mid_turn(project, "test-token")
    return project


@pytest.mark.parametrize("source", ["resume", "compact", "clear"])
def test_a_start_that_is_no_new_session_catches_nothing_up(tmp_path, source):
    from tests.test_hook_client import recording_server

    with recording_server() as (url, received):
        project = catch_up_setup(tmp_path, url)
        cursor = project.cursor(SESSION).read_text()
        del received[:]
        project.hook("test-token", f"session_start_{source}", SESSION_B)

    assert [request.body["session_id"] for request in received] == [SESSION_B]
    assert project.cursor(SESSION).read_text() == cursor


def test_a_transcript_this_machine_never_saw_live_is_not_touched(tmp_path):
    from tests.test_hook_client import recording_server

    with recording_server() as (url, received):
        project = Project(tmp_path, url)
        append(project.transcript("c0ffee00-0000-4000-8000-000000000009"),
               said("Someone else's session"))  # fmt: skip
        project.hook("test-token", "session_start_startup", SESSION_B)

    assert [request.body["session_id"] for request in received] == [SESSION_B]
    assert not project.cursor("c0ffee00-0000-4000-8000-000000000009").exists()


def test_the_catch_up_goes_first_as_the_dead_sessions_own_event(tmp_path):
    from tests.test_hook_client import REPLY, recording_server

    with recording_server() as (url, _):
        project = catch_up_setup(tmp_path, url)
    with recording_server((200, b"{}"), (200, REPLY)) as (url, received):
        project.url = url
        started = project.hook("test-token", "session_start_startup", SESSION_B)

    catch_up, start = (request.body for request in received)
    assert (catch_up["hook_event_name"], catch_up["session_id"]) == ("SignetSync", SESSION)
    assert catch_up["signet"]["sync"]["last_assistant_message"]["text"] == (
        "Next I will add the orphan check"
    )
    assert catch_up["signet"]["sync"]["git_branch"] == "feat/import"
    assert start["session_id"] == SESSION_B
    assert started.stdout == REPLY


@pytest.mark.parametrize("status", [503, 401])
def test_a_catch_up_the_server_does_not_take_never_costs_the_start_its_answer(tmp_path, status):
    from tests.test_hook_client import REPLY, recording_server

    with recording_server() as (url, _):
        project = catch_up_setup(tmp_path, url)
    cursor = project.cursor(SESSION).read_text()
    with recording_server((status, b"{}"), (200, REPLY)) as (url, received):
        project.url = url
        started = project.hook("test-token", "session_start_startup", SESSION_B)

    assert [request.body["hook_event_name"] for request in received] == [
        "SignetSync",
        "SessionStart",
    ]
    assert started.stdout == REPLY
    assert started.returncode == 0
    queued = [json.loads(line)["body"] for line in project.outbox.read_text().splitlines()] if (
        project.outbox.exists()) else []  # fmt: skip
    if status == 503:  # kept for the next hook to replay, and the outbox carries it now
        assert [body["hook_event_name"] for body in queued] == ["SignetSync"]
        assert project.cursor(SESSION).read_text() != cursor
    else:  # refused for a reason a later try may not have: sent again next time
        assert queued == []
        assert project.cursor(SESSION).read_text() == cursor


def test_a_server_that_cannot_be_reached_gets_the_catch_up_queued_before_the_start(tmp_path):
    from tests.test_hook_client import closed_port_url, recording_server

    with recording_server() as (url, _):
        project = catch_up_setup(tmp_path, url)
    project.url = closed_port_url()
    started = project.hook("test-token", "session_start_startup", SESSION_B)

    assert started.returncode == 0
    queued = [json.loads(line)["body"] for line in project.outbox.read_text().splitlines()]
    assert [(body["hook_event_name"], body["session_id"]) for body in queued] == [
        ("SignetSync", SESSION),
        ("SessionStart", SESSION_B),
    ]
