"""Gemini CLI: its hook payloads through the real endpoint, and the settings.json installer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from checkpoints.harnesses.gemini import GeminiAdapter
from checkpoints.models import Checkpoint, Injection, Session, Trigger
from hooks import install
from hooks.install_harnesses import install_gemini, uninstall_harness
from tests.test_hook_client import TOKEN, recording_server

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gemini"
HOOK_URL = "/api/hooks/gemini/"
SESSION = "c2f8a4d1-7e39-4b06-9a5c-1d3e8f7b2a64"
PROJECT = "/home/alice/projects/webapp"
TASK = "Add rate limiting to POST /api/login (5 attempts / 15 min per IP)."


def fixture(name: str, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    data.update(overrides)
    return data


def send(client: Any, body: dict[str, Any] | str) -> Any:
    data = body if isinstance(body, str) else json.dumps(body)
    return client.post(HOOK_URL, data=data, content_type="application/json")


def reply_with(context: str, event: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": context}}


@pytest.fixture
def hook(client_for, owner):
    return client_for(owner, "ingest")


def test_every_fixture_payload_through_the_endpoint(hook):
    start = send(hook, fixture("hook_session_start"))
    assert start.status_code == 200
    assert start.json() == {}
    session = Session.objects.get(session_key=SESSION)
    assert session.harness == "gemini"
    assert session.project == PROJECT
    assert session.transcript_path.endswith("chats/session-2026-08-18T09-12-c2f8a4d1.json")

    assert send(hook, fixture("hook_before_agent")).json() == {}
    session.refresh_from_db()
    assert session.prompt_count == 1
    assert session.recent_prompts == [TASK]

    # Observe only: the emergency checkpoint is written, nothing is injected.
    assert send(hook, fixture("hook_pre_compress_auto")).json() == {}
    checkpoint = Checkpoint.objects.get(session=session)
    assert checkpoint.trigger == Trigger.PRE_COMPACTION
    assert checkpoint.recent_prompts == [TASK]
    assert not Injection.objects.exists()

    assert send(hook, fixture("hook_session_end")).json() == {}
    session.refresh_from_db()
    assert session.ended_at is not None
    assert session.end_reason == "exit"
    assert session.ignored_event_count == 0


def test_a_new_gemini_session_in_the_same_cwd_recovers_the_task(hook):
    send(hook, fixture("hook_before_agent"))
    send(hook, fixture("hook_pre_compress_auto"))
    send(hook, fixture("hook_session_end"))
    reply = send(hook, fixture("hook_session_start", session_id="gemini-second")).json()
    injection = Injection.objects.get(session__session_key="gemini-second")
    assert reply == reply_with(injection.content, "SessionStart")
    assert injection.content.startswith("## Session Recovery Context")
    assert TASK in injection.content
    assert len(injection.content) < GeminiAdapter.context_cap_chars


def test_a_first_prompt_without_session_start_carries_the_recovery(hook):
    send(hook, fixture("hook_before_agent"))
    send(hook, fixture("hook_session_end"))
    reply = send(hook, fixture("hook_before_agent", session_id="gemini-third", prompt="go on"))
    injection = Injection.objects.get(session__session_key="gemini-third")
    assert reply.json() == reply_with(injection.content, "BeforeAgent")
    assert TASK in injection.content


def test_clear_notes_and_unknown_events(hook):
    send(hook, fixture("hook_before_agent"))
    send(hook, fixture("hook_session_end"))
    cleared = send(hook, fixture("hook_session_start", session_id="g-clear", source="clear"))
    assert cleared.json() == {}
    send(hook, fixture("hook_before_agent", session_id="g-clear", prompt="# use uv, never pip"))
    assert Session.objects.get(session_key="g-clear").recent_remembers == ["use uv, never pip"]
    other = fixture("hook_before_agent", session_id="g-clear", hook_event_name="AfterAgent")
    assert send(hook, other).json() == {}
    assert Session.objects.get(session_key="g-clear").ignored_event_count == 1


@pytest.mark.parametrize(
    "body",
    [
        "{",
        '"text"',
        {"session_id": SESSION},
        {"hook_event_name": "SessionStart"},
        {"hook_event_name": "BeforeAgent", "session_id": SESSION},
        {"hook_event_name": "BeforeAgent", "session_id": SESSION, "prompt": ["x"]},
        {"hook_event_name": "SessionStart", "session_id": "a/b"},
        {"hook_event_name": "SessionStart", "session_id": SESSION, "signet": "x"},
    ],
)
def test_bad_payloads_get_a_400_json_error(hook, body):
    response = send(hook, body)
    assert response.status_code == 400
    assert set(response.json()) == {"error", "detail"}
    assert not Session.objects.exists()


# --- installer ----------------------------------------------------------------------------------


def signet_events(settings_file: Path) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for event, groups in json.loads(settings_file.read_text())["hooks"].items():
        for group in groups:
            found.setdefault(event, []).extend(
                h for h in group["hooks"] if install.is_signet_handler(h)
            )
    return {event: handlers for event, handlers in found.items() if handlers}


def test_install_merges_keeps_foreign_settings_and_is_idempotent(tmp_path):
    settings_file = tmp_path / "settings.json"
    foreign = json.loads((FIXTURES / "settings.json").read_text())
    foreign["theme"] = "GitHub"
    foreign["general"] = {"vimMode": True}
    settings_file.write_text(json.dumps(foreign, indent=2))

    result = install_gemini(settings_file, interpreter=sys.executable)
    assert result.changed
    assert result.backup_path is not None
    data = json.loads(settings_file.read_text())
    assert data["theme"] == "GitHub"
    assert data["general"] == {"vimMode": True}
    for event, groups in foreign["hooks"].items():
        assert data["hooks"][event][: len(groups)] == groups
    handlers = signet_events(settings_file)
    assert sorted(handlers) == ["BeforeAgent", "PreCompress", "SessionEnd", "SessionStart"]
    start = handlers["SessionStart"][0]
    assert start["timeout"] == 10_000  # milliseconds
    assert start["name"] == "signet-SessionStart"
    assert start["command"].endswith("--token-env SIGNET_TOKEN gemini")
    assert handlers["PreCompress"][0]["timeout"] == 30_000
    assert handlers["PreCompress"][0]["command"].endswith("--timeout 25 gemini")

    before = settings_file.read_bytes()
    assert not install_gemini(settings_file, interpreter=sys.executable).changed
    assert settings_file.read_bytes() == before
    assert len(list(tmp_path.glob("settings.json.signet-backup-*"))) == 1

    assert uninstall_harness(settings_file).changed
    assert json.loads(settings_file.read_text()) == foreign


def test_install_refuses_a_file_it_cannot_read_as_json(tmp_path):
    settings_file = tmp_path / "settings.json"
    settings_file.write_text("{\n  // Gemini tolerates comments; we do not rewrite them\n}\n")
    with pytest.raises(install.InstallError):
        install_gemini(settings_file, interpreter=sys.executable)
    assert "// Gemini" in settings_file.read_text()


def test_installed_command_prints_json_only(tmp_path):
    settings_file = tmp_path / "settings.json"
    install_gemini(settings_file, url="http://127.0.0.1:1", interpreter=sys.executable)
    command = signet_events(settings_file)["PreCompress"][0]["command"]
    env = {key: value for key, value in os.environ.items() if not key.startswith("SIGNET_")}
    env.update(HOME=str(tmp_path), SIGNET_TOKEN=TOKEN, SIGNET_OUTBOX=str(tmp_path / "o.jsonl"))
    with recording_server((200, b"{}")) as (url, received):
        command = command.replace("http://127.0.0.1:1", url)
        body = (FIXTURES / "hook_pre_compress_auto.json").read_bytes()
        proc = subprocess.run(  # noqa: S602 (the installed command line, as the harness runs it)
            command, shell=True, input=body, capture_output=True, env=env, timeout=15, check=False
        )
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == {}
    assert received[0].path == "/api/hooks/gemini/"
    assert received[0].body["hook_event_name"] == "PreCompress"


def test_install_hooks_command_for_gemini(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    out = tmp_path / "out.txt"
    with out.open("w") as stdout:
        call_command("install_hooks", "gemini", "--python", sys.executable, stdout=stdout)
    settings_file = tmp_path / ".gemini" / "settings.json"
    assert "BeforeAgent" in signet_events(settings_file)
    assert "Gemini CLI must see the token" in out.read_text()
    with out.open("w") as stdout:
        call_command("install_hooks", "gemini", "--uninstall", stdout=stdout)
    assert json.loads(settings_file.read_text()) == {}
    with pytest.raises(Exception, match="claude-code only"):
        call_command("install_hooks", "gemini", "--with-mcp", stdout=out.open("w"))
