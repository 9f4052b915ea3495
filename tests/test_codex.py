"""Codex CLI: its hook payloads and the legacy ``notify`` program through the real endpoint,
the hook client's ``--notify`` mode, the hooks.json installer, and a Claude Code handoff."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from checkpoints.harnesses.codex import CodexAdapter
from checkpoints.models import Checkpoint, Injection, Session, Trigger
from hooks import install
from hooks.install_harnesses import codex_notify_argv, install_codex, uninstall_harness
from tests.hookutil import context_of
from tests.hookutil import payload as claude_payload
from tests.hookutil import send as claude_send
from tests.test_hook_client import PROJECT_DIR, TOKEN, recording_server

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "codex"
HOOK_URL = "/api/hooks/codex/"
SESSION = "019a7c3e-5b21-7d40-9f3a-6e2c81b4d0f7"
PROJECT = "/home/alice/projects/webapp"
TASK = "Add rate limiting to POST /api/login (5 attempts / 15 min per IP)."
HOOK_SCRIPT = Path(install.__file__).resolve().with_name("signet_hook.py")


def fixture(name: str, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    data.update(overrides)
    return data


def send(client: Any, body: dict[str, Any] | str) -> Any:
    data = body if isinstance(body, str) else json.dumps(body)
    return client.post(HOOK_URL, data=data, content_type="application/json")


@pytest.fixture
def hook(client_for, owner):
    return client_for(owner, "ingest")


def reply_with(context: str, event: str = "SessionStart") -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": context}}


def test_every_fixture_payload_through_the_endpoint(hook):
    start = send(hook, fixture("hook_session_start"))
    assert start.status_code == 200
    assert start.json() == {}  # nothing to recover yet
    session = Session.objects.get(session_key=SESSION)
    assert session.harness == "codex"
    assert session.model == "gpt-5-codex"
    assert session.project == PROJECT

    assert send(hook, fixture("hook_user_prompt_submit")).json() == {}
    session.refresh_from_db()
    assert session.prompt_count == 1
    assert session.recent_prompts == [TASK]

    assert send(hook, fixture("hook_pre_compact_auto")).json() == {}
    checkpoint = Checkpoint.objects.get(session=session)
    assert checkpoint.trigger == Trigger.PRE_COMPACTION
    assert TASK in checkpoint.current_task or TASK in json.dumps(checkpoint.recent_prompts)

    # Codex's compaction: SessionStart(compact) recovers what PreCompact kept.
    compact = send(hook, fixture("hook_session_start", source="compact"))
    injection = Injection.objects.get(session=session)
    assert compact.json() == reply_with(injection.content)
    assert TASK in injection.content
    assert send(hook, fixture("hook_post_compact_auto")).json() == {}

    assert send(hook, fixture("hook_stop")).json() == {}
    session.refresh_from_db()
    assert session.last_assistant_message == "Added loginRateLimit middleware; tests pass."
    assert session.compaction_count == 1

    end = fixture("hook_stop", hook_event_name="SessionEnd", reason="other")
    assert send(hook, end).json() == {}
    session.refresh_from_db()
    assert session.ended_at is not None
    assert session.end_reason == "other"
    assert session.ignored_event_count == 0


def test_a_new_codex_session_in_the_same_cwd_gets_the_recovery_context_within_the_cap(hook):
    long_task = "Port the billing exporter to the new ledger API and keep the CSV layout. " * 60
    send(hook, fixture("hook_user_prompt_submit", prompt=long_task))
    send(hook, fixture("hook_stop", hook_event_name="SessionEnd", reason="other"))
    reply = send(hook, fixture("hook_session_start", session_id="codex-second")).json()
    injection = Injection.objects.get(session__session_key="codex-second")
    assert reply == reply_with(injection.content)
    context = injection.content
    assert context.startswith("## Session Recovery Context")
    assert "Port the billing exporter" in context
    assert len(context) < CodexAdapter.context_cap_chars
    # Codex counts a token as four UTF-8 bytes and shows at most 2,500 tokens of a hook.
    assert (len(context.encode("utf-8")) + 3) // 4 <= 2500


def test_a_note_and_an_unknown_event(hook):
    send(hook, fixture("hook_user_prompt_submit", prompt="/remember run tests with uv"))
    assert Session.objects.get().recent_remembers == ["run tests with uv"]
    other = fixture("hook_stop", hook_event_name="PreToolUse", tool_name="shell")
    assert send(hook, other).json() == {}
    assert Session.objects.get().ignored_event_count == 1


def test_the_legacy_notify_payload_is_a_stop(hook):
    send(hook, fixture("hook_user_prompt_submit"))
    reply = send(hook, fixture("notify_agent_turn_complete"))
    assert reply.status_code == 200
    assert reply.json() == {}
    session = Session.objects.get()
    assert session.last_assistant_message == "Added loginRateLimit middleware; tests pass."
    assert session.ignored_event_count == 0
    other = fixture("notify_agent_turn_complete", type="approval-requested")
    assert send(hook, other).json() == {}
    assert Session.objects.get().ignored_event_count == 1


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[1]",
        {"session_id": SESSION},  # no event name
        {"hook_event_name": "Stop"},  # no session
        {"hook_event_name": "UserPromptSubmit", "session_id": SESSION},  # no prompt
        {"hook_event_name": "Stop", "session_id": "has space"},
        {"hook_event_name": 5, "session_id": SESSION},
        {"type": "agent-turn-complete"},  # notify without its thread
        {"type": "", "thread-id": SESSION},
        {"type": "agent-turn-complete", "thread-id": SESSION, "last-assistant-message": 3},
    ],
)
def test_bad_payloads_get_a_400_json_error(hook, body):
    response = send(hook, body)
    assert response.status_code == 400
    assert set(response.json()) == {"error", "detail"}
    assert not Session.objects.exists()


def test_a_claude_code_session_hands_off_to_codex_within_its_cap(client_for, owner):
    hook = client_for(owner, "ingest")
    claude_session = "claude-first"
    task = "Migrate the session store to Redis with a 30 day TTL " * 40
    claude_send(
        hook,
        claude_payload(
            "user_prompt_submit", session_id=claude_session, prompt=task, cwd="/src/claude"
        ),
    )
    claude_send(hook, claude_payload("session_end", session_id=claude_session, cwd="/src/claude"))
    start = fixture(
        "hook_session_start",
        session_id="codex-next",
        cwd="/src/elsewhere",
        signet={"previous_session_key": claude_session},
    )
    response = send(hook, start)
    context = context_of(response)
    assert "Migrate the session store to Redis" in context
    assert len(context) < CodexAdapter.context_cap_chars
    codex = Session.objects.get(session_key="codex-next")
    assert codex.harness == "codex"
    assert codex.previous_session.session_key == claude_session
    assert codex.previous_session.harness == "claude-code"


# --- the hook client's --notify mode ----------------------------------------------------------


def test_notify_through_the_real_hook_client_posts_a_stop(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("SIGNET_")}
    env.update(HOME=str(tmp_path), SIGNET_TOKEN=TOKEN, SIGNET_OUTBOX=str(tmp_path / "o.jsonl"))
    notify = (FIXTURES / "notify_agent_turn_complete.json").read_text()
    with recording_server((200, b"{}")) as (url, received):
        argv = codex_notify_argv(url=url, token_env="SIGNET_TOKEN", interpreter=sys.executable)
        proc = subprocess.run(
            [*argv, notify],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=env,
            cwd=PROJECT_DIR,
            timeout=15,
            check=False,
        )
    assert proc.returncode == 0
    assert proc.stderr == b""
    assert len(received) == 1
    assert received[0].path == "/api/hooks/codex/"
    body = received[0].body
    assert body["type"] == "agent-turn-complete"
    assert body["thread-id"] == SESSION
    assert body["signet"]["project_normalized"] == PROJECT
    event = CodexAdapter().parse(body)
    assert event.kind == "stop"
    assert event.session_key == SESSION
    assert event.last_assistant_message == "Added loginRateLimit middleware; tests pass."


@pytest.mark.django_db(transaction=True)
def test_notify_end_to_end_against_the_real_endpoint(live_server, owner, make_token, tmp_path):
    token = make_token(owner, "ingest")
    env = {key: value for key, value in os.environ.items() if not key.startswith("SIGNET_")}
    env.update(HOME=str(tmp_path), SIGNET_TOKEN=token, SIGNET_OUTBOX=str(tmp_path / "o.jsonl"))
    argv = codex_notify_argv(
        url=live_server.url, token_env="SIGNET_TOKEN", interpreter=sys.executable
    )
    notify = (FIXTURES / "notify_agent_turn_complete.json").read_text()
    proc = subprocess.run(
        [*argv, notify], capture_output=True, env=env, cwd=PROJECT_DIR, timeout=15, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b""
    assert proc.stdout == b"{}"
    session = Session.objects.get(session_key=SESSION)
    assert session.harness == "codex"
    assert session.last_assistant_message == "Added loginRateLimit middleware; tests pass."


# --- installer ----------------------------------------------------------------------------------


def signet_events(hooks_file: Path) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for event, groups in json.loads(hooks_file.read_text())["hooks"].items():
        for group in groups:
            found.setdefault(event, []).extend(
                h for h in group["hooks"] if install.is_signet_handler(h)
            )
    return {event: handlers for event, handlers in found.items() if handlers}


def test_install_merges_keeps_foreign_hooks_and_is_idempotent(tmp_path):
    hooks_file = tmp_path / "hooks.json"
    foreign = json.loads((FIXTURES / "hooks.json").read_text())
    foreign["other"] = {"keep": True}
    hooks_file.write_text(json.dumps(foreign, indent=2))

    result = install_codex(hooks_file, url="http://127.0.0.1:9000", interpreter=sys.executable)
    assert result.changed
    assert result.backup_path is not None
    assert json.loads(result.backup_path.read_text()) == foreign
    data = json.loads(hooks_file.read_text())
    assert data["other"] == {"keep": True}
    for event, groups in foreign["hooks"].items():  # the foreign curl hooks, untouched
        assert data["hooks"][event][: len(groups)] == groups
    handlers = signet_events(hooks_file)
    assert list(handlers) == [
        "SessionStart",
        "PreCompact",
        "Stop",
        "UserPromptSubmit",
        "PostCompact",
        "SessionEnd",
    ]
    start = handlers["SessionStart"][0]
    assert start["type"] == "command"
    assert start["timeout"] == 10
    assert start["command"].endswith("--url http://127.0.0.1:9000 --token-env SIGNET_TOKEN codex")
    assert handlers["PreCompact"][0]["command"].endswith("--timeout 25 codex")
    assert handlers["PreCompact"][0]["timeout"] == 30

    before = hooks_file.read_bytes()
    again = install_codex(hooks_file, url="http://127.0.0.1:9000", interpreter=sys.executable)
    assert not again.changed
    assert again.backup_path is None
    assert hooks_file.read_bytes() == before
    assert len(list(tmp_path.glob("hooks.json.signet-backup-*"))) == 1

    removed = uninstall_harness(hooks_file)
    assert removed.changed
    assert json.loads(hooks_file.read_text()) == foreign
    assert not uninstall_harness(hooks_file).changed


def test_installed_command_runs_the_hook_client(tmp_path):
    hooks_file = tmp_path / "hooks.json"
    install_codex(hooks_file, url="http://127.0.0.1:1", interpreter=sys.executable)
    command = signet_events(hooks_file)["UserPromptSubmit"][0]["command"]
    env = {key: value for key, value in os.environ.items() if not key.startswith("SIGNET_")}
    env.update(HOME=str(tmp_path), SIGNET_TOKEN=TOKEN, SIGNET_OUTBOX=str(tmp_path / "o.jsonl"))
    with recording_server((200, b"{}")) as (url, received):
        command = command.replace("http://127.0.0.1:1", url)
        body = (FIXTURES / "hook_user_prompt_submit.json").read_bytes()
        proc = subprocess.run(  # noqa: S602 (the installed command line, as the harness runs it)
            command, shell=True, input=body, capture_output=True, env=env, timeout=15, check=False
        )
    assert proc.returncode == 0
    assert proc.stdout == b"{}"
    assert received[0].path == "/api/hooks/codex/"
    assert received[0].body["prompt"] == TASK


def test_install_hooks_command_for_codex(tmp_path, monkeypatch):
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    out = tmp_path / "out.txt"
    with out.open("w") as stdout:
        call_command("install_hooks", "codex", "--python", sys.executable, stdout=stdout)
    hooks_file = tmp_path / "codex-home" / "hooks.json"
    assert "SessionStart" in signet_events(hooks_file)
    text = out.read_text()
    assert f"Created {hooks_file}" in text
    assert "notify = [" in text
    assert "Codex must see the token" in text
    with out.open("w") as stdout:
        call_command("install_hooks", "codex", "--uninstall", stdout=stdout)
    assert "Removed Signet's hooks" in out.read_text()
    assert json.loads(hooks_file.read_text()) == {}
