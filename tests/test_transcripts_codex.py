"""The Codex rollout reader (``hooks/transcripts/codex.py``) and what the hook client sends
with Codex's PreCompact.

The rollouts here are written for the tests, in the shape Codex CLI writes them: one
``{"timestamp", "type", "payload"}`` object a line, serialised compactly as serde does.
Sources of the shape, in ``openai/codex``: ``codex-rs/protocol/src/protocol.rs`` and (later)
``codex-rs/history/src/lib.rs`` (``RolloutLine``, ``RolloutItem``, ``CompactedItem``,
``SessionMetaLine`` with ``git``), ``codex-rs/protocol/src/models.rs`` (``ResponseItem``:
``message``, ``function_call``, ``custom_tool_call``, ``*_output``, ``reasoning``),
``codex-rs/rollout/src/policy.rs`` (which events are persisted: ``user_message``,
``agent_message``, ``token_count``, ``patch_apply_end``, ``context_compacted``…),
``codex-rs/core/src/context/`` (the harness's own user messages: ``<environment_context>``,
``# AGENTS.md instructions for <dir>`` + ``<INSTRUCTIONS>``, ``<hook_context>``), and the
``apply_patch`` grammar (``*** Begin Patch`` / ``*** Update File:`` / ``*** Add File:``).
CLI versions seen in public rollouts: 0.111 to 0.171 (``cli_version``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checkpoints.harnesses.codex import CodexAdapter
from checkpoints.models import Checkpoint
from hooks.transcripts import codex
from tests.test_hook_client import HOOK, PROJECT_DIR, TOKEN, recording_server

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "codex"
SESSION = "019a7c3e-5b21-7d40-9f3a-6e2c81b4d0f7"
GOAL = "Add rate limiting to POST /api/login: 5 attempts per 15 minutes per IP, use Redis."
FOLLOW_UP = "Now add a test for the 429 response."
AGENTS_MD = "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nRun pytest.\n</INSTRUCTIONS>"
ENVIRONMENT = (
    "<environment_context>\n  <cwd>/repo</cwd>\n  <shell>bash</shell>\n</environment_context>"
)
PATCH = (
    "*** Begin Patch\n*** Update File: app/login.py\n@@\n-def login():\n+@limited\n+def login():\n"
    "*** Add File: app/ratelimit.py\n+LIMIT = 5\n*** End Patch"
)
HEREDOC = f"apply_patch <<'EOF'\n{PATCH}\nEOF"
SUMMARY = "The user asked for rate limiting on POST /api/login; login.py is decorated."
REPLY = "Login is now limited to 5 attempts per 15 minutes; next I will add the 429 test."


def line(kind: str, payload: dict[str, Any], at: str = "2026-08-18T09:12:03.101Z") -> str:
    return json.dumps({"timestamp": at, "type": kind, "payload": payload}, separators=(",", ":"))


def message(role: str, text: str, kind: str = "input_text", **extra: Any) -> str:
    content = [{"type": kind, "text": text}]
    return line("response_item", {"type": "message", "role": role, "content": content, **extra})


def event(name: str, **fields: Any) -> str:
    return line("event_msg", {"type": name, **fields})


def function_call(name: str, arguments: dict[str, Any], call_id: str) -> str:
    payload = {"type": "function_call", "name": name, "arguments": json.dumps(arguments)}
    return line("response_item", {**payload, "call_id": call_id})


def patch_call(patch: str, call_id: str) -> str:
    payload = {"type": "custom_tool_call", "status": "completed", "call_id": call_id}
    return line("response_item", {**payload, "name": "apply_patch", "input": patch})


def output(call_id: str, text: str, kind: str = "custom_tool_call_output") -> str:
    return line("response_item", {"type": kind, "call_id": call_id, "output": text})


def token_count(total: int) -> str:
    usage = {
        "input_tokens": total - 900,
        "cached_input_tokens": total - 5000,
        "output_tokens": 900,
        "reasoning_output_tokens": 300,
        "total_tokens": total,
    }
    info = {
        "total_token_usage": {**usage, "total_tokens": total * 3},
        "last_token_usage": usage,
        "model_context_window": 272000,
    }
    limits = {"primary": {"used_percent": 4.0, "window_minutes": 300, "resets_at": 1787040000}}
    return event("token_count", info=info, rate_limits=limits)


SESSION_META = line(
    "session_meta",
    {
        "id": SESSION,
        "timestamp": "2026-08-18T09:12:03.004Z",
        "cwd": "/repo",
        "originator": "codex_cli_rs",
        "cli_version": "0.171.0",
        "source": "cli",
        "model_provider": "openai",
        "base_instructions": {"text": "You are Codex, a coding agent. " * 200},
        "git": {
            "commit_hash": "4e1c0b9f2a7d3e5c8b6a1f0e9d2c7b4a3e5f6d81",
            "branch": "feature/login-limit",
            "repository_url": "git@github.com:alice/webapp.git",
        },
    },
)
TURN_CONTEXT = line(
    "turn_context",
    {
        "turn_id": "019a7c3e-8f02-7a11-b6d4-3c9e0a52f718",
        "cwd": "/repo",
        "approval_policy": "on-request",
        "sandbox_policy": {"type": "workspace-write", "network_access": False},
        "model": "gpt-5.5-codex",
        "summary": "auto",
    },
)
PLAN = {
    "explanation": "Limit first, then tests.",
    "plan": [
        {"step": "Add the Redis-backed limiter", "status": "completed"},
        {"step": "Write the 429 test", "status": "in_progress"},
        {"step": "Document the limit", "status": "pending"},
    ],
}


def rollout() -> list[str]:
    """A session of two prompts, a plan, patches that worked, failed and were declined, a
    shell edit, a compaction and the token counts after it."""
    return [
        SESSION_META,
        line("response_item", {"type": "message", "role": "developer", "content": []}),
        message("developer", "<permissions instructions>\nFilesystem sandboxing…"),
        message("user", AGENTS_MD),
        message("user", ENVIRONMENT),
        TURN_CONTEXT,
        event("task_started", turn_id="t1", model_context_window=272000),
        message("user", GOAL),
        event("user_message", message=GOAL, images=[]),
        line("response_item", {"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}),
        function_call("update_plan", PLAN, "call_plan"),
        output("call_plan", "Plan updated", kind="function_call_output"),
        patch_call(PATCH, "call_patch"),
        output("call_patch", '{"output":"Success. Updated the following files:\\n"}'),
        event("patch_apply_end", call_id="call_patch", stdout="Success", stderr="", success=True),
        # Refused before applying: the output says so.
        patch_call("*** Begin Patch\n*** Update File: app/broken.py\n@@\n-x\n*** End Patch", "c2"),
        output("c2", "apply_patch verification failed: Failed to find expected lines"),
        # Applied and failed (or declined): Codex reports success false.
        patch_call("*** Begin Patch\n*** Update File: app/declined.py\n*** End Patch", "c3"),
        event("patch_apply_end", call_id="c3", stdout="", stderr="rejected", success=False),
        # A shell edit is not counted.
        function_call("shell", {"command": ["bash", "-lc", "sed -i s/a/b/ app/settings.py"]}, "c4"),
        output("c4", "Exit code: 0", kind="function_call_output"),
        token_count(120_000),
        message("assistant", "Working on it.", kind="output_text", phase="commentary"),
        line("compacted", {"message": SUMMARY, "replacement_history": []}),
        event("context_compacted"),
        message("user", "<hook_context>Signet recovery: …</hook_context>"),
        event("user_message", message=FOLLOW_UP, images=[]),
        message("user", FOLLOW_UP),
        token_count(41_900),
        message("assistant", REPLY, kind="output_text", phase="final_answer"),
        event("agent_message", message=REPLY),
    ]


def write(tmp_path: Path, lines: list[str], name: str = "rollout.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_whole_rollout_gives_every_fact(tmp_path):
    facts = codex.read_rollout(write(tmp_path, rollout()))

    assert facts is not None
    assert facts["current_task"] == "Write the 429 test"
    assert [todo["content"] for todo in facts["todos"]] == [step["step"] for step in PLAN["plan"]]
    assert [todo["status"] for todo in facts["todos"]] == ["completed", "in_progress", "pending"]
    # What the person typed, once each: not AGENTS.md, the environment or hook context.
    assert facts["recent_prompts"] == [GOAL, FOLLOW_UP]
    assert facts["last_user_request"] == FOLLOW_UP
    assert facts["goal"] == GOAL
    # Patched files only, and only the patches that applied.
    assert facts["modified_files"] == ["app/login.py", "app/ratelimit.py"]
    assert facts["last_assistant_message"] == REPLY
    assert facts["git_branch"] == "feature/login-limit"
    assert facts["model"] == "gpt-5.5-codex"
    assert facts["context_tokens"] == 41_900
    assert facts["compactions"] == 1
    assert facts["compact_summary"] == SUMMARY
    assert facts["truncated"] is False


def test_the_context_size_is_unknown_after_a_compaction_until_the_next_count(tmp_path):
    lines = rollout()
    cut = lines.index(line("compacted", {"message": SUMMARY, "replacement_history": []}))
    facts = codex.read_rollout(write(tmp_path, lines[: cut + 1]))

    assert facts is not None
    assert facts["context_tokens"] is None
    assert codex.read_rollout(write(tmp_path, lines[:cut]))["context_tokens"] == 120_000


def test_a_tail_has_no_goal_but_the_branch_from_the_first_line(tmp_path):
    lines = rollout()
    path = write(tmp_path, lines)
    typed = lines.index(event("user_message", message=GOAL, images=[]))
    after_goal = len("\n".join(lines[typed + 1 :]))

    facts = codex.read_rollout(path, max_bytes=after_goal)

    assert facts is not None
    assert facts["truncated"] is True
    assert facts["goal"] == ""  # a tail's first prompt is not the session's
    assert facts["recent_prompts"] == [FOLLOW_UP]
    assert facts["git_branch"] == "feature/login-limit"  # session_meta, read on its own
    assert facts["modified_files"] == ["app/login.py", "app/ratelimit.py"]


def test_without_user_message_events_the_user_items_are_the_prompts(tmp_path):
    lines = [entry for entry in rollout() if '"type":"user_message"' not in entry]

    facts = codex.read_rollout(write(tmp_path, lines))

    assert facts is not None
    assert facts["recent_prompts"] == [GOAL, FOLLOW_UP]
    assert facts["goal"] == GOAL


def test_older_user_message_kinds_that_are_not_typed_are_left_out(tmp_path):
    lines = [
        SESSION_META,
        # Text with no marker of its own: only the kind tells it from a prompt.
        event("user_message", message="Follow the style guide.", kind="user_instructions"),
        event("user_message", message=ENVIRONMENT, kind="environment_context"),
        event("user_message", message=GOAL, kind="plain"),
    ]

    facts = codex.read_rollout(write(tmp_path, lines))

    assert facts is not None
    assert facts["recent_prompts"] == [GOAL]


def test_rolled_back_turns_are_not_prompts_and_a_forks_parent_branch_is_not_its_own(tmp_path):
    parent = SESSION_META.replace("feature/login-limit", "main").replace(SESSION, "parent")
    lines = [
        SESSION_META,
        parent,  # a fork copies its parent's session_meta after its own
        event("user_message", message=GOAL, images=[]),
        event("user_message", message="Actually, drop Redis and use memcached.", images=[]),
        event("thread_rolled_back", num_turns=1),
        event("user_message", message=FOLLOW_UP, images=[]),
    ]

    facts = codex.read_rollout(write(tmp_path, lines))

    assert facts is not None
    assert facts["recent_prompts"] == [GOAL, FOLLOW_UP]
    assert facts["git_branch"] == "feature/login-limit"


@pytest.mark.parametrize(
    "call",
    [
        function_call("apply_patch", {"input": PATCH}, "c9"),
        function_call("shell", {"command": ["apply_patch", PATCH]}, "c9"),
        function_call("shell", {"command": ["bash", "-lc", HEREDOC]}, "c9"),
        line(
            "response_item",
            {
                "type": "local_shell_call",
                "call_id": "c9",
                "status": "completed",
                "action": {"type": "exec", "command": ["apply_patch", PATCH]},
            },
        ),
    ],
    ids=["function", "shell-argv", "shell-heredoc", "local-shell"],
)
def test_every_way_codex_calls_apply_patch_counts(tmp_path, call):
    facts = codex.read_rollout(write(tmp_path, [SESSION_META, call]))

    assert facts is not None
    assert facts["modified_files"] == ["app/login.py", "app/ratelimit.py"]


def test_broken_lines_are_skipped_and_a_missing_file_is_none(tmp_path):
    lines = rollout()
    lines.insert(3, '{"timestamp":"2026-08-18T09:12:03Z","type":"event_msg","payload":{"ty')
    lines.insert(5, "not json at all")
    lines.insert(7, '["a list"]')
    lines.insert(9, line("event_msg", {"type": "token_count", "info": None}))
    lines.insert(9, function_call("update_plan", {"plan": "not a list"}, "c0"))

    facts = codex.read_rollout(write(tmp_path, lines))

    assert facts is not None
    assert facts["current_task"] == "Write the 429 test"
    assert facts["recent_prompts"] == [GOAL, FOLLOW_UP]
    assert codex.read_rollout(tmp_path / "missing.jsonl") is None
    assert codex.read_rollout(tmp_path) is None  # a folder


# --- through the hook client and the server ------------------------------------------------


def pre_compact(transcript: Path) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((FIXTURES / "hook_pre_compact_auto.json").read_text())
    payload["transcript_path"] = str(transcript)
    return payload


def run_client(
    tmp_path: Path, payload: dict[str, Any], url: str
) -> subprocess.CompletedProcess[bytes]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SIGNET_")}
    env.update(HOME=str(tmp_path), SIGNET_TOKEN=TOKEN, SIGNET_OUTBOX=str(tmp_path / "o.jsonl"))
    return subprocess.run(
        [sys.executable, str(HOOK), "--url", url, "codex"],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env=env,
        cwd=PROJECT_DIR,
        timeout=15,
        check=False,
    )


def test_pre_compact_sends_the_rollout_facts_and_other_events_do_not(tmp_path):
    transcript = write(tmp_path, rollout())
    stop = {**pre_compact(transcript), "hook_event_name": "Stop", "last_assistant_message": REPLY}

    with recording_server((200, b"{}"), (200, b"{}")) as (url, received):
        assert run_client(tmp_path, pre_compact(transcript), url).returncode == 0
        assert run_client(tmp_path, stop, url).returncode == 0

    assert [request.path for request in received] == ["/api/hooks/codex/"] * 2
    sent = received[0].body["signet"]["transcript"]
    assert sent == codex.read_rollout(transcript)
    assert "transcript" not in received[1].body["signet"]
    event = CodexAdapter().parse(received[0].body)
    assert event.kind == "pre_compact"
    assert event.transcript is not None
    assert event.transcript.current_task == "Write the 429 test"
    assert event.transcript.modified_files == ("app/login.py", "app/ratelimit.py")
    assert event.transcript.goal == GOAL
    assert event.transcript.context_tokens == 41_900


@pytest.mark.django_db
def test_the_endpoint_keeps_the_rollout_facts_in_the_pre_compaction_checkpoint(
    tmp_path, client_for, owner
):
    transcript = write(tmp_path, rollout())
    with recording_server((200, b"{}")) as (url, received):
        run_client(tmp_path, pre_compact(transcript), url)

    hook = client_for(owner, "ingest")
    reply = hook.post(
        "/api/hooks/codex/", data=json.dumps(received[0].body), content_type="application/json"
    )

    assert reply.status_code == 200
    checkpoint = Checkpoint.objects.get(session__session_key=SESSION)
    assert checkpoint.current_task == "Write the 429 test"
    assert checkpoint.modified_files == ["app/login.py", "app/ratelimit.py"]
    assert FOLLOW_UP in checkpoint.recent_prompts
    assert all("AGENTS.md" not in prompt for prompt in checkpoint.recent_prompts)


def test_the_reader_imports_nothing_the_hook_client_has_not_loaded(tmp_path):
    """The client is a short-lived process: json, re, typing and dataclasses would cost
    more than the read (``claude_code.py`` keeps the same rule)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv.pop(1)); import signet_hook; "
        "signet_hook.main(); sys.stderr.write(' '.join(sorted(sys.modules)))"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("SIGNET_")}
    env.update(HOME=str(tmp_path), SIGNET_TOKEN=TOKEN, SIGNET_OUTBOX=str(tmp_path / "o.jsonl"))
    with recording_server((200, b"{}")) as (url, received):
        proc = subprocess.run(
            [sys.executable, "-I", "-S", "-c", code, str(HOOK.parent), "--url", url, "codex"],
            input=json.dumps(pre_compact(write(tmp_path, rollout()))).encode(),
            capture_output=True,
            env=env,
            timeout=15,
            check=False,
        )

    assert received[0].body["signet"]["transcript"]["current_task"] == "Write the 429 test"
    loaded = set(proc.stderr.decode().split())
    assert "transcripts.codex" in loaded
    assert loaded.isdisjoint({"json", "re", "typing", "dataclasses", "inspect"})
