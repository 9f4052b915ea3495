"""OpenCode: the plugin's bodies through the real endpoint, the plugin folder installer, and
the plugin itself (``node --test``) against a running server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connections

from checkpoints.harnesses import ADAPTERS
from checkpoints.harnesses.opencode import OpenCodeAdapter
from checkpoints.models import Checkpoint, Injection, Session, Trigger
from checkpoints.services.tokens import token_create
from hooks import install_opencode
from hooks.install import InstallError
from hooks.install_opencode import install_opencode as install
from hooks.install_opencode import uninstall_opencode as uninstall
from tests.factories import UserFactory
from tests.test_hook_client_e2e import Service, free_port

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "opencode"
HOOK_URL = "/api/hooks/opencode/"
PLUGIN_TEST = Path(__file__).resolve().parent.parent / "hooks" / "opencode" / "signet.test.js"
SESSION = "ses_4f9b2c1d7ffeB3xYq8KzR1mT0v"
PROJECT = "/home/alice/projects/webapp"


def body(name: str, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    data.update(overrides)
    return data


def post(client: Any, data: Any) -> Any:
    raw = data if isinstance(data, str) else json.dumps(data)
    return client.post(HOOK_URL, data=raw, content_type="application/json")


def injected(response: Any) -> str:
    """The reply's context, after checking it is exactly what the server recorded."""
    assert response.status_code == 200
    latest = Injection.objects.latest("id")
    assert response.json() == {"context": latest.content}
    return str(latest.content)


def test_the_adapter_is_registered():
    adapter = ADAPTERS["opencode"]
    assert isinstance(adapter, OpenCodeAdapter)
    assert adapter.context_cap_chars == 10_000
    assert adapter.event_in_path is False


@pytest.mark.django_db
def test_every_fixture_through_the_endpoint(client_for, owner):
    hook = client_for(owner, "ingest")

    assert post(hook, body("session_created")).json() == {}  # nothing to recover yet
    session = Session.objects.get()
    assert (session.session_key, session.harness) == (SESSION, "opencode")
    assert (session.project, session.git_root) == (PROJECT, PROJECT)

    assert post(hook, body("chat_message")).json() == {}
    session.refresh_from_db()
    assert session.prompt_count == 1
    assert session.recent_prompts == [
        "Add rate limiting to POST /api/login: max 5 attempts per IP per 15 minutes."
    ]

    assert post(hook, body("tool_execute_after_edit")).json() == {}
    assert post(hook, body("tool_execute_after_apply_patch")).json() == {}
    assert post(hook, body("file_edited")).json() == {}
    session.refresh_from_db()
    assert session.modified_files == [
        f"{PROJECT}/src/routes/auth.ts",
        f"{PROJECT}/src/lib/redis.ts",
        f"{PROJECT}/src/middleware/loginLimit.ts",
        f"{PROJECT}/src/middleware/rateLimit.ts",  # moved to the end by file.edited
    ]

    assert post(hook, body("session_idle")).json() == {}

    # Compaction: the compacting hook writes the emergency checkpoint, the context request
    # that follows gets the recovery context the plugin pushes into output.context.
    assert post(hook, body("session_compacting")).json() == {}
    checkpoint = Checkpoint.objects.get()
    assert checkpoint.trigger == Trigger.PRE_COMPACTION
    context = injected(post(hook, body("compaction_context")))
    assert context.startswith("## Session Recovery Context")
    assert "Add rate limiting to POST /api/login" in context
    assert "\n- src/routes/auth.ts" in context  # relative to the project
    assert len(context) < OpenCodeAdapter.context_cap_chars
    assert Injection.objects.get().source == "compact"

    assert post(hook, body("session_compacted")).json() == {}
    session.refresh_from_db()
    assert session.compaction_count == 1  # compacting, context and compacted: one cycle
    assert session.compaction_recovered
    assert not session.recovery_due

    # Events the plugin does not send are counted, not refused.
    assert post(hook, body("session_updated")).json() == {}
    assert post(hook, body("session_status_busy")).json() == {}
    session.refresh_from_db()
    assert session.ignored_event_count == 2

    # The v2 envelope (a top-level event id) reads the same: a second compaction.
    assert post(hook, body("session_compacted_v2_envelope")).json() == {}
    session.refresh_from_db()
    assert session.compaction_count == 2

    assert post(hook, body("session_deleted")).json() == {}
    session.refresh_from_db()
    assert session.ended_at is not None
    assert session.end_reason == "deleted"
    assert Session.objects.count() == 1


@pytest.mark.django_db
def test_a_new_session_recovers_the_last_one(client_for, owner):
    hook = client_for(owner, "ingest")
    post(hook, body("session_created"))
    post(hook, body("chat_message"))
    post(hook, body("tool_execute_after_edit"))
    post(hook, body("session_deleted"))

    created = body("session_created")
    created["event"]["properties"]["info"]["id"] = "ses_second"
    created["signet"]["previous_session_key"] = SESSION
    context = injected(post(hook, created))
    assert context.startswith("## Session Recovery Context")
    assert "Add rate limiting to POST /api/login" in context
    second = Session.objects.get(session_key="ses_second")
    assert second.previous_session is not None
    assert second.previous_session.session_key == SESSION
    # The recovery went with session.created: the first prompt does not get it again.
    prompt = body("chat_message")
    prompt["input"]["sessionID"] = "ses_second"
    assert post(hook, prompt).json() == {}


@pytest.mark.django_db
def test_a_first_prompt_without_session_created_gets_the_recovery(client_for, owner):
    hook = client_for(owner, "ingest")
    post(hook, body("chat_message"))
    post(hook, body("session_deleted"))
    prompt = body("chat_message")
    prompt["input"]["sessionID"] = "ses_late"
    assert injected(post(hook, prompt)).startswith("## Session Recovery Context")


@pytest.mark.django_db
def test_prompt_parts_and_notes(client_for, owner):
    hook = client_for(owner, "ingest")
    prompt = body("chat_message")
    prompt["output"]["parts"] = [
        {"type": "text", "text": "/remember the API uses pnpm"},
        {"type": "text", "text": "Called the Read tool", "synthetic": True},
        {"type": "file", "url": "file:///x"},
    ]
    assert post(hook, prompt).json() == {}
    session = Session.objects.get()
    assert session.recent_remembers == ["the API uses pnpm"]
    assert session.recent_prompts == ["/remember the API uses pnpm"]

    no_text = body("chat_message")
    no_text["output"] = {"parts": [{"type": "file", "url": "file:///x"}]}
    assert post(hook, no_text).json() == {}
    session.refresh_from_db()
    assert session.prompt_count == 2


@pytest.mark.django_db
def test_a_tool_that_changes_no_file_records_none(client_for, owner):
    hook = client_for(owner, "ingest")
    tool = body("tool_execute_after_edit")
    tool["input"] = {"tool": "bash", "sessionID": SESSION, "callID": "c", "args": {"command": "ls"}}
    assert post(hook, tool).json() == {}
    assert Session.objects.get().modified_files == []


BAD = [
    ({"directory": PROJECT}, "'hook' or 'event' is required."),
    ({"event": "session.idle"}, "'event' must be an object."),
    ({"event": {"properties": {"sessionID": SESSION}}}, "'event.type' is required."),
    ({"event": {"type": "session.idle", "properties": []}}, "'event.properties' must be"),
    ({"event": {"type": "session.idle", "properties": {}}}, "'session.idle' names no session"),
    (
        {"event": {"type": "file.edited", "properties": {"file": "/a"}}},
        "'file.edited' names no session",
    ),
    (
        {"event": {"type": "session.idle", "properties": {"sessionID": "a/b"}}},
        "'event.properties.sessionID' must be",
    ),
    ({"hook": "chat.message", "input": {}}, "'input.sessionID' is required."),
    ({"hook": "chat.message", "input": "x"}, "'input' must be an object."),
    ({"hook": 3, "input": {"sessionID": SESSION}}, "'hook' must be a string"),
    (
        {"hook": "chat.message", "input": {"sessionID": SESSION}, "output": {"parts": "hi"}},
        "'output.parts' must be a list of objects.",
    ),
    (
        {
            "hook": "chat.message",
            "input": {"sessionID": SESSION},
            "output": {"parts": [{"type": "text", "text": 5}]},
        },
        "'output.parts[].text' must be a string",
    ),
    (
        {"hook": "tool.execute.after", "input": {"sessionID": SESSION, "args": []}},
        "'input.args' must be an object.",
    ),
    ({"hook": "chat.message", "input": {"sessionID": SESSION}, "signet": []}, "'signet' must be"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("payload", "detail"), BAD)
def test_bad_payloads_are_refused(client_for, owner, payload, detail):
    response = post(client_for(owner, "ingest"), payload)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_payload"
    assert response.json()["detail"].startswith(detail)
    assert not Session.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("raw", ["", "[]", "{not json"])
def test_bad_bodies_are_refused(client_for, owner, raw):
    response = post(client_for(owner, "ingest"), raw)
    assert response.status_code == 400
    assert not Session.objects.exists()


@pytest.mark.django_db
def test_the_event_is_named_in_the_body_not_the_url(client_for, owner):
    hook = client_for(owner, "ingest")
    response = hook.post(
        "/api/hooks/opencode/session-idle/",
        data=json.dumps(body("session_idle")),
        content_type="application/json",
    )
    assert response.status_code == 404
    assert response.json()["error"] == "wrong_route"


# --- installer --------------------------------------------------------------------------


def test_install_is_idempotent_and_uninstall_removes_it(tmp_path):
    plugins = tmp_path / "plugins"
    first = install(plugins, url="http://signet.local:9000/", token_env="MY_SIGNET")
    target = plugins / "signet.js"
    assert (first.changed, first.created, first.backup_path) == (True, True, None)
    text = target.read_text()
    assert 'const DEFAULT_URL = "http://signet.local:9000"\n' in text
    assert 'const TOKEN_ENV = "MY_SIGNET"\n' in text
    assert text.startswith(install_opencode.MARKER.decode())
    source = install_opencode.PLUGIN_SOURCE.read_text()
    assert len(text.splitlines()) == len(source.splitlines())

    before = target.read_bytes(), target.stat().st_mtime_ns
    second = install(plugins, url="http://signet.local:9000", token_env="MY_SIGNET")
    assert (second.changed, second.backup_path) == (False, None)
    assert (target.read_bytes(), target.stat().st_mtime_ns) == before
    assert sorted(p.name for p in plugins.iterdir()) == ["signet.js"]

    removed = uninstall(plugins)
    assert removed.changed
    assert list(plugins.iterdir()) == []
    assert not uninstall(plugins).changed


def test_install_backs_up_what_it_overwrites(tmp_path):
    target = tmp_path / "signet.js"
    target.write_text("// an older copy someone edited\n")
    result = install(tmp_path)
    assert result.changed
    assert result.backup_path is not None
    assert result.backup_path.read_text() == "// an older copy someone edited\n"
    assert result.backup_path.name.startswith("signet.js.signet-backup-")
    assert target.read_bytes() == install_opencode.plugin_source(
        url="http://127.0.0.1:8000", token_env="SIGNET_TOKEN"
    )
    assert not install(tmp_path).changed


def test_uninstall_leaves_a_foreign_file(tmp_path):
    (tmp_path / "signet.js").write_text("export const Other = async () => ({})\n")
    with pytest.raises(InstallError, match="not Signet's plugin"):
        uninstall(tmp_path)
    assert (tmp_path / "signet.js").exists()


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [({"url": "ftp://x"}, "the URL must look like"), ({"token_env": "A-B"}, "not an environment")],
)
def test_install_refuses_bad_options(tmp_path, kwargs, problem):
    with pytest.raises(InstallError, match=problem):
        install(tmp_path, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_the_command(tmp_path, capsys):
    plugins = tmp_path / "opencode" / "plugins"
    call_command("install_hooks", "opencode", "--plugin-dir", str(plugins))
    assert "Wrote Signet's plugin" in capsys.readouterr().out
    call_command("install_hooks", "opencode", "--plugin-dir", str(plugins))
    assert "already up to date" in capsys.readouterr().out
    call_command("install_hooks", "opencode", "--plugin-dir", str(plugins), "--uninstall")
    assert "Removed Signet's plugin" in capsys.readouterr().out
    assert not (plugins / "signet.js").exists()
    (plugins / "signet.js").write_text("mine\n")
    with pytest.raises(CommandError, match="not Signet's plugin"):
        call_command("install_hooks", "opencode", "--plugin-dir", str(plugins), "--uninstall")


# --- the plugin against a running server -----------------------------------------------


@pytest.fixture
def live(transactional_db: Any) -> Iterator[Service]:
    service = Service(free_port())
    service.start()
    yield service
    service.stop()
    connections.close_all()


@pytest.mark.slow
def test_the_plugin_against_the_server(live):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the OpenCode plugin's tests need Node.js 20+")
    owner = UserFactory(username="alice")
    _, token = token_create(owner=owner, name="opencode", scopes=["ingest", "read"])
    env = {**os.environ, "SIGNET_E2E_URL": live.url, "SIGNET_E2E_TOKEN": token}
    result = subprocess.run(
        [node, "--test", str(PLUGIN_TEST)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "# SKIP" not in result.stdout  # the server tests ran
    assert "ok 1 - events are stored and the compaction gets the recovery context" in result.stdout
    first = Session.objects.get(session_key="ses_e2eFirst01")
    assert first.harness == "opencode"
    assert first.checkpoints.filter(trigger=Trigger.PRE_COMPACTION).exists()
    second = Session.objects.get(session_key="ses_e2eSecond02")
    assert second.injections.get().source == "startup"
    assert not Session.objects.filter(session_key="ses_e2eChild03").exists()
