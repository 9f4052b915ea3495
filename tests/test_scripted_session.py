"""A Claude Code session scripted through the hooks as ``install_hooks`` installs them: the
settings file it writes is read back and each hook run as Claude Code runs it (the command
hook as a process with the payload on stdin, the http hooks as POSTs with the token header
expanded), against the real service. After ``compact`` the agent must get, once, what it
needs to carry on."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections

from checkpoints.models import Injection, Session
from checkpoints.services.tokens import token_create
from tests.factories import UserFactory
from tests.hookutil import payload
from tests.test_hook_client_e2e import Service, free_port

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SESSION = "3f2b8c1e-5d4a-4e7b-9c2f-8a1d6e0b7c42"
CWD = "/home/alice/projects/webapp"
BRANCH = "feat/login-rate-limit"


@pytest.fixture
def service(transactional_db: Any) -> Iterator[Service]:
    service = Service(free_port())
    service.start()
    yield service
    service.stop()
    connections.close_all()


class ClaudeCode:
    """Runs the hooks of a settings file the way Claude Code does, for one session."""

    def __init__(self, settings_file: Path, token: str, home: Path) -> None:
        self.hooks = json.loads(settings_file.read_text())["hooks"]
        self.env = {**os.environ, "SIGNET_TOKEN": token, "SIGNET_OUTBOX": str(home / "outbox")}
        self.token = token

    def fire(self, body: dict[str, Any]) -> str:
        """Run every hook registered for the event; the additionalContext it got back."""
        context = ""
        for group in self.hooks.get(body["hook_event_name"], []):
            for hook in group["hooks"]:
                reply = self._run(hook, body)
                output = reply.get("hookSpecificOutput") or {}
                context += output.get("additionalContext", "")
        return context

    def _run(self, hook: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        if hook["type"] == "command":
            done = subprocess.run(  # noqa: S602 (the installed command line, as Claude Code runs it)
                hook["command"],
                shell=True,
                input=data,
                env=self.env,
                capture_output=True,
                timeout=hook.get("timeout", 60),
                check=True,
            )
            reply: dict[str, Any] = json.loads(done.stdout or b"{}")
            return reply
        headers = {
            name: value.replace("$SIGNET_TOKEN", self.token)
            for name, value in hook.get("headers", {}).items()
        }
        request = urllib.request.Request(  # noqa: S310 (the installed http hook's own URL)
            hook["url"], data=data, headers={**headers, "Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=hook.get("timeout", 30)) as response:  # noqa: S310
            text = response.read()
        reply = json.loads(text or b"{}")
        return reply


def transcript(path: Path) -> Path:
    """The session's transcript as the harness keeps it, with its TodoWrite list."""
    todos = [
        {"content": "Add the limiter middleware", "status": "completed",
         "activeForm": "Adding the limiter middleware"},
        {"content": "Move the limiter store to Redis", "status": "in_progress",
         "activeForm": "Moving the limiter store to Redis"},
        {"content": "Run the auth tests against Redis", "status": "pending",
         "activeForm": "Running the auth tests"},
    ]  # fmt: skip
    lines = [
        {"type": "user", "sessionId": SESSION, "cwd": CWD, "gitBranch": BRANCH,
         "message": {"role": "user", "content": "Add rate limiting to POST /api/login"},
         "uuid": "u1", "timestamp": "2026-11-22T09:00:00.000Z"},
        {"type": "assistant", "sessionId": SESSION, "cwd": CWD, "gitBranch": BRANCH,
         "message": {"role": "assistant", "model": "claude-sonnet-4-6", "content": [
             {"type": "tool_use", "id": "t1", "name": "TodoWrite", "input": {"todos": todos}}],
             "usage": {"input_tokens": 3, "cache_read_input_tokens": 20000, "output_tokens": 50}},
         "uuid": "a1", "timestamp": "2026-11-22T09:00:05.000Z"},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_after_compact_the_agent_gets_everything_once(service, tmp_path, settings):
    owner = UserFactory(username="alice")
    _, token = token_create(owner=owner, name="laptop", scopes=["ingest", "read", "write"])
    settings_file = tmp_path / "settings.json"
    call_command(
        "install_hooks", "claude-code", "--settings-file", str(settings_file),
        "--url", service.url, "--python", sys.executable, "--no-mcp", stdout=io.StringIO(),
    )  # fmt: skip
    claude = ClaudeCode(settings_file, token, tmp_path)
    log = transcript(tmp_path / f"{SESSION}.jsonl")

    def event(name: str, **fields: Any) -> dict[str, Any]:
        return payload(name, session_id=SESSION, cwd=CWD, transcript_path=str(log), **fields)

    assert claude.fire(event("session_start_startup")) == ""  # nothing to recover yet
    claude.fire(event("user_prompt_submit", prompt="Add rate limiting to POST /api/login"))
    claude.fire(event("user_prompt_submit", prompt="# limiter keys are login:<ip> in Redis db 3"))
    claude.fire(event("post_tool_use_edit"))
    claude.fire(event("post_tool_use_write"))
    # The agent's own checkpoint (what its MCP tool sends): decisions and next steps.
    agent = urllib.request.Request(  # noqa: S310
        f"{service.url}/api/checkpoints/",
        data=json.dumps({
            "session_key": SESSION, "trigger": "agent",
            "current_task": "Rate-limit POST /api/login",
            "decisions": ["Fixed window of 15 minutes, 5 attempts per IP"],
            "next_steps": ["Return 429 with Retry-After"],
            "narrative": "Limiter works in memory; Redis next.",
        }).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(agent, timeout=10) as response:  # noqa: S310
        assert response.status == 201
    claude.fire(event("user_prompt_submit", prompt="now switch the store"))
    claude.fire(event("user_prompt_submit", prompt="keep the old one behind a flag"))
    claude.fire(event("user_prompt_submit", prompt="Use Redis, not memcached."))
    claude.fire(event("stop"))

    contexts = [
        claude.fire(event("pre_compact_auto")),
        claude.fire(event("session_start_compact")),
        claude.fire(event("post_compact_manual")),
        claude.fire(event("user_prompt_submit", prompt="go on")),
    ]

    injected = [context for context in contexts if context]
    assert len(injected) == 1, contexts
    assert contexts[1] == injected[0]  # at SessionStart(compact)
    text = injected[0]
    assert text.startswith("## Session Recovery Context")
    assert "Move the limiter store to Redis" in text  # the task: the active todo
    assert "Run the auth tests against Redis" in text  # the next step
    assert "### Goal\nAdd rate limiting to POST /api/login" in text  # the opening request
    assert "Fixed window of 15 minutes, 5 attempts per IP" in text  # the agent's decision
    assert "Use Redis, not memcached." in text  # the user's
    assert "- src/routes/auth.ts" in text  # an edited file, relative to the project
    assert "limiter keys are login:<ip> in Redis db 3" in text  # the remembered note
    assert len(text) <= 2000
    assert Injection.objects.count() == 1
    assert Session.objects.get().compaction_count == 1
