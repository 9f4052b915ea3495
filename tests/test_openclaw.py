"""OpenClaw: the plugin's posts through the real endpoint, its installer, and the plugin itself
(``node --test hooks/openclaw/``) against a running service."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from checkpoints.models import Checkpoint, Session
from checkpoints.services.tokens import token_create
from hooks.install import InstallError
from hooks.install_openclaw import PLUGIN_FILES, PLUGIN_ID, install_openclaw, uninstall_openclaw
from tests.factories import UserFactory

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "openclaw" / "plugin"
PLUGIN = Path(__file__).resolve().parent.parent / "hooks" / "openclaw"
URL = "/api/hooks/openclaw/"
SESSION_ID = "7d2e9a41-3c6b-4f08-a5d1-92b4c7e60f3a"


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"plugin_hook_{name}.json").read_text())
    return data


def post(client: Any, body: Any) -> Any:
    return client.post(URL, data=json.dumps(body), content_type="application/json")


@pytest.mark.django_db
def test_every_fixture_through_the_endpoint(client_for, owner):
    hook = client_for(owner, "ingest")
    start = post(hook, fixture("session_start"))
    assert start.status_code == 200
    assert start.json() == {}
    session = Session.objects.get()
    assert session.session_key == SESSION_ID
    assert session.harness == "openclaw"

    prompt = {"hook": "before_prompt_build", "event": {"prompt": "fix the cron"},
              "ctx": fixture("session_start")["ctx"]}  # fmt: skip
    assert post(hook, prompt).json() == {}
    session.refresh_from_db()
    assert session.recent_prompts == ["fix the cron"]

    before = fixture("before_compaction")
    before["signet"] = {
        "transcript": {"current_task": "check why the backup cron failed", "todos": [],
                       "modified_files": ["scripts/backup.sh"], "context_tokens": 172300},
        "usage": {"context_tokens": 172300, "model": "claude-sonnet-4-6"},
    }  # fmt: skip
    assert post(hook, before).json() == {}
    checkpoint = Checkpoint.objects.get(session=session)
    assert checkpoint.trigger == "pre_compaction"
    session.refresh_from_db()
    assert session.modified_files == ["scripts/backup.sh"]

    after = fixture("after_compaction")
    after["signet"] = {"compact_summary": "## Goal\nFix the nightly backup cron."}
    assert post(hook, after).json() == {}
    session.refresh_from_db()
    assert session.compact_summary == "## Goal\nFix the nightly backup cron."
    assert session.compaction_count == 1

    recovered = post(hook, {**prompt, "event": {"prompt": "did it work?"}}).json()
    assert list(recovered) == ["prependContext"]
    assert recovered["prependContext"].startswith("## Session Recovery Context")
    assert "check why the backup cron failed" in recovered["prependContext"]
    assert len(recovered["prependContext"]) < 10_000

    assert post(hook, fixture("before_reset")).json() == {}
    session.refresh_from_db()
    assert session.ignored_event_count == 1

    assert post(hook, fixture("session_end")).json() == {}
    session.refresh_from_db()
    assert session.ended_at is not None
    assert session.end_reason == "daily"


@pytest.mark.django_db
def test_session_key_falls_back_to_the_session_key_slot(client_for, owner):
    hook = client_for(owner, "ingest")
    body = {"hook": "session_start", "event": {}, "ctx": {"sessionKey": "agent:main:main"}}
    assert post(hook, body).status_code == 200
    assert Session.objects.get().session_key == "agent:main:main"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"event": {}, "ctx": {"sessionId": "s1"}}, "'hook' is required."),
        ({"hook": "session_start", "ctx": {}}, "'ctx.sessionId' (or"),
        ({"hook": "session_start", "ctx": "s1"}, "'ctx' must be an object."),
        ({"hook": "session_start", "event": [], "ctx": {"sessionId": "s1"}},
         "'event' must be an object."),
        ({"hook": "session_start", "ctx": {"sessionId": "a/b"}}, "'ctx.sessionId' must be"),
        ({"hook": "before_prompt_build", "event": {"prompt": 3}, "ctx": {"sessionId": "s1"}},
         "'event.prompt' must be a string, not int."),
        ({"hook": "before_compaction", "ctx": {"sessionId": "s1"},
          "signet": {"transcript": {"todos": "x"}}}, "'signet.transcript.todos' must be"),
        ({"hook": "after_compaction", "ctx": {"sessionId": "s1"}, "signet": {"compact_summary": 1}},
         "'signet.compact_summary' must be a string"),
    ],
)  # fmt: skip
def test_bad_payloads_are_400(client_for, owner, body, detail):
    response = post(client_for(owner, "ingest"), body)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_payload"
    assert response.json()["detail"].startswith(detail)
    assert not Session.objects.exists()


def test_installer_is_idempotent_and_uninstalls(tmp_path):
    config = tmp_path / "openclaw.json"
    config.write_text(json.dumps({"agents": {"defaults": {"x": 1}}, "plugins": {"allow": ["a"]}}))
    first = install_openclaw(config, url="http://signet:8000/")
    plugin_dir = tmp_path / "extensions" / PLUGIN_ID
    assert first.plugin_dir == plugin_dir
    assert sorted(first.files_changed) == sorted(PLUGIN_FILES)
    assert first.backup_path is not None
    written = json.loads(config.read_text())
    assert written["agents"] == {"defaults": {"x": 1}}
    assert written["plugins"]["allow"] == ["a", PLUGIN_ID]
    assert written["plugins"]["entries"][PLUGIN_ID] == {
        "enabled": True,
        "config": {"url": "http://signet:8000", "tokenEnv": "SIGNET_TOKEN"},
    }
    assert not list(plugin_dir.glob("*.test.js"))
    manifest = json.loads((plugin_dir / "openclaw.plugin.json").read_text())
    assert manifest["id"] == PLUGIN_ID

    before = config.read_bytes()
    again = install_openclaw(config, url="http://signet:8000")
    assert not again.changed
    assert again.backup_path is None
    assert config.read_bytes() == before
    assert len(list(tmp_path.glob("openclaw.json.signet-backup-*"))) == 1

    removed = uninstall_openclaw(config)
    assert removed.changed
    assert not plugin_dir.exists()
    assert json.loads(config.read_text()) == {"agents": {"defaults": {"x": 1}},
                                              "plugins": {"allow": ["a"]}}  # fmt: skip
    assert not uninstall_openclaw(config).changed


def test_installer_leaves_json5_alone(tmp_path):
    config = tmp_path / "openclaw.json"
    config.write_text("{ // JSON5\n  agents: {} }\n")
    with pytest.raises(InstallError, match="not plain JSON"):
        install_openclaw(config)
    assert config.read_text() == "{ // JSON5\n  agents: {} }\n"
    assert not (tmp_path / "extensions").exists()


def test_install_hooks_command(tmp_path, capsys):
    config = tmp_path / "state" / "openclaw.json"
    call_command("install_hooks", "openclaw", "--settings-file", str(config))
    assert (tmp_path / "state" / "extensions" / PLUGIN_ID / "index.js").is_file()
    assert "Installed Signet's OpenClaw plugin" in capsys.readouterr().out
    call_command("install_hooks", "openclaw", "--settings-file", str(config))
    assert "already up to date" in capsys.readouterr().out
    call_command("install_hooks", "openclaw", "--settings-file", str(config), "--uninstall")
    assert "Removed Signet's OpenClaw plugin" in capsys.readouterr().out
    assert json.loads(config.read_text()) == {}


@pytest.mark.slow
def test_the_plugin_against_a_running_service(transactional_db):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH: the OpenClaw plugin's tests need Node.js 20+")
    from tests.test_hook_client_e2e import Service, free_port

    owner = UserFactory(username="alice")
    _, token = token_create(owner=owner, name="openclaw", scopes=["ingest"])
    service = Service(free_port())
    service.start()
    try:
        env = {**os.environ, "SIGNET_E2E_URL": service.url, "SIGNET_E2E_TOKEN": token}
        result = subprocess.run(
            [node, "--test", str(PLUGIN)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        service.stop()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "# skipped 0" in result.stdout
    session = Session.objects.get(session_key=SESSION_ID)
    assert session.harness == "openclaw"
    assert session.end_reason == "daily"
    checkpoint = Checkpoint.objects.get(session=session, trigger="pre_compaction")
    assert checkpoint.current_task == "can you check why the backup cron failed last night?"
    assert checkpoint.modified_files == ["scripts/backup.sh"]
    assert checkpoint.context_tokens == 172300
    assert session.compact_summary.startswith("## Goal\nFix the nightly backup cron.")
