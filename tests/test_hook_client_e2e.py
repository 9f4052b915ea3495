"""The command hook against the real service: fail-open while it is down, and every queued
event replayed exactly once when it is back.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from django.conf import settings
from django.core.wsgi import get_wsgi_application
from django.db import connections

from checkpoints.models import HookDelivery, Session
from checkpoints.services.tokens import token_create
from tests.factories import UserFactory
from tests.hookutil import FIXTURES

pytestmark = pytest.mark.slow

HOOK = Path(__file__).resolve().parent.parent / "hooks" / "signet_hook.py"


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class Service:
    """The real Django application on a fixed port, which a test can stop and start again."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._server: _ThreadingServer | None = None

    def start(self) -> None:
        # As signet_site/wsgi.py does: the URLconf imported before the first request, which
        # a hook waits on for half a second only before taking the server for hung.
        import_module(settings.ROOT_URLCONF)
        self._server = make_server(
            "127.0.0.1",
            self.port,
            get_wsgi_application(),
            server_class=_ThreadingServer,
            handler_class=_QuietHandler,
        )
        assert self._server is not None
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def service(transactional_db) -> Iterator[Service]:
    service = Service(free_port())
    yield service
    service.stop()
    connections.close_all()


def run_hook(
    url: str, token: str, outbox: Path, body: dict[str, Any]
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "SIGNET_TOKEN": token}
    return subprocess.run(
        [sys.executable, str(HOOK), "--url", url, "--outbox", str(outbox), "claude-code"],
        input=json.dumps(body).encode(),
        env=env,
        capture_output=True,
        timeout=30,
        check=False,
    )


def fixture_payload(name: str, **overrides: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    body.update(overrides)
    return body


def outbox_keys(outbox: Path) -> list[str]:
    if not outbox.exists():
        return []
    return [json.loads(line)["key"] for line in outbox.read_text().splitlines() if line]


def test_down_service_fails_open_and_the_outbox_replays_exactly_once(service, tmp_path):
    owner = UserFactory(username="alice")
    _, token = token_create(owner=owner, name="hook", scopes=["ingest"])
    outbox = tmp_path / "outbox.jsonl"

    # Service down: the agent sees exit 0 and no output; both events wait in the outbox.
    for number in (1, 2):
        body = fixture_payload(
            "user_prompt_submit", prompt=f"queued prompt {number}", prompt_id=f"p-{number}"
        )
        result = run_hook(service.url, token, outbox, body)
        assert result.returncode == 0
        assert result.stdout == b""
    queued = outbox_keys(outbox)
    assert len(queued) == 2
    assert not Session.objects.exists()

    # Back up: the next event is delivered, then the queue is replayed and emptied.
    service.start()
    result = run_hook(service.url, token, outbox, fixture_payload("session_start_startup"))
    assert result.returncode == 0
    assert json.loads(result.stdout or b"{}") == {}
    assert outbox_keys(outbox) == []
    session = Session.objects.get()
    assert session.prompt_count == 2
    assert session.recent_prompts == ["queued prompt 1", "queued prompt 2"]
    assert set(HookDelivery.objects.values_list("key", flat=True)) >= set(queued)

    # The same entries replayed again (a crash after delivery, before the rewrite) count 0.
    lines = [
        json.dumps({"key": key, "url": f"{service.url}/api/hooks/claude-code/",
                    "harness": "claude-code",
                    "body": fixture_payload("user_prompt_submit", prompt="dup"),
                    "queued_at": "2026-01-01T00:00:00+00:00"})
        for key in queued
    ]  # fmt: skip
    outbox.write_text("\n".join(lines) + "\n")
    result = run_hook(service.url, token, outbox, fixture_payload("stop"))
    assert result.returncode == 0
    assert outbox_keys(outbox) == []
    session.refresh_from_db()
    assert session.prompt_count == 2
    assert "dup" not in session.recent_prompts


def test_the_hook_returns_the_recovery_context_claude_code_expects(service, tmp_path):
    owner = UserFactory(username="alice")
    _, token = token_create(owner=owner, name="hook", scopes=["ingest"])
    service.start()
    outbox = tmp_path / "outbox.jsonl"
    run_hook(service.url, token, outbox, fixture_payload("user_prompt_submit"))
    run_hook(service.url, token, outbox, fixture_payload("pre_compact_auto"))
    result = run_hook(service.url, token, outbox, fixture_payload("session_start_compact"))
    reply = json.loads(result.stdout)
    assert reply["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert (
        "Add rate limiting to POST /api/login" in reply["hookSpecificOutput"]["additionalContext"]
    )
