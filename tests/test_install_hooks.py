"""The Claude Code settings installer: merging, idempotence, backups, uninstall."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from hooks import install
from hooks.install import InstallError, install_claude_code, uninstall_claude_code
from tests.test_hook_client import REPLY, SESSION_START, recording_server

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "claude_code" / "settings.json"
HOOK_SCRIPT = Path(install.__file__).resolve().with_name("signet_hook.py")
# The interpreter running the tests, a virtualenv's: the installer names the binary behind it.
REAL_PYTHON = os.path.realpath(sys.executable)
EVENTS = [
    "SessionStart",
    "UserPromptSubmit",
    "PostToolUse",
    "PreCompact",
    "PostCompact",
    "Stop",
    "SessionEnd",
]


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # install_hooks claude-code also writes ~/.claude.json and ~/.claude/CLAUDE.md.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def signet_handlers(settings: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Signet's handlers per event, with their group's matcher under ``_matcher``."""
    found: dict[str, list[dict[str, Any]]] = {}
    for event, groups in settings.get("hooks", {}).items():
        for group in groups:
            for handler in group["hooks"]:
                if install.is_signet_handler(handler):
                    found.setdefault(event, []).append(
                        {**handler, "_matcher": group.get("matcher")}
                    )
    return found


def foreign_only(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with Signet's handlers (and groups/events they leave empty) taken out."""
    copy: dict[str, Any] = json.loads(json.dumps(settings))
    hooks = {}
    for event, groups in copy.get("hooks", {}).items():
        kept = []
        for group in groups:
            group["hooks"] = [h for h in group["hooks"] if not install.is_signet_handler(h)]
            if group["hooks"]:
                kept.append(group)
        if kept:
            hooks[event] = kept
    copy["hooks"] = hooks
    return copy


def backups(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.signet-backup-*"))


def session_start_command(
    *,
    url: str,
    token_env: str,
    python: str = f'"{REAL_PYTHON}"',
    script: Path = HOOK_SCRIPT,
    timeout: float | None = None,
) -> str:
    client_timeout = f" --timeout {timeout}" if timeout else ""
    return (
        f"{python} -I -S -c {shlex.quote(install.HOOK_BOOTSTRAP)} "
        f'"{script}" --url {url} --token-env {token_env}{client_timeout} claude-code'
    )


def installed_command(settings_path: Path) -> str:
    command = signet_handlers(load(settings_path))["SessionStart"][0]["command"]
    assert isinstance(command, str)
    return command


def run_command(
    command: str, *, tmp_path: Path, payload: bytes = SESSION_START
) -> subprocess.CompletedProcess[bytes]:
    """``command`` as Claude Code runs it: through a shell, in the agent's project folder."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SIGNET_")}
    env.update(
        HOME=str(tmp_path), SIGNET_TOKEN="sgt_test", SIGNET_OUTBOX=str(tmp_path / "outbox.jsonl")
    )
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    return subprocess.run(
        ["/bin/sh", "-c", command],
        input=payload,
        capture_output=True,
        env=env,
        cwd=project,
        timeout=15,
        check=False,
    )


def copy_hook(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(HOOK_SCRIPT, directory / "signet_hook.py"))


@pytest.fixture
def settings_file(tmp_path: Path) -> Path:
    target = tmp_path / "claude" / "settings.json"
    target.parent.mkdir()
    shutil.copy(FIXTURE, target)
    return target


def test_install_into_fixture_adds_every_event_and_keeps_foreign_hooks(settings_file):
    original = load(settings_file)
    original["model"] = "opus"  # an unrelated setting
    settings_file.write_text(json.dumps(original, indent=2))

    result = install_claude_code(
        settings_file, url="http://signet.test:9000/", token_env="MY_TOKEN"
    )

    after = load(settings_file)
    assert result.changed
    assert not result.created
    assert result.installed == EVENTS
    assert result.backup_path is not None
    assert load(result.backup_path) == original
    assert foreign_only(after) == original  # every foreign hook, in its place; "model" kept
    assert list(after) == ["hooks", "model"]
    assert settings_file.read_text().endswith("}\n")
    assert settings_file.read_text() == json.dumps(after, indent=2) + "\n"

    found = signet_handlers(after)
    assert sorted(found) == sorted(EVENTS)
    assert all(len(handlers) == 1 for handlers in found.values())
    # Every event a command (the client can tell that the server just hung, and queue at
    # once), each with a short deadline of its own, PreCompact's longer.
    for event, matcher, timeout, client_timeout in (
        ("SessionStart", "startup|resume|clear|compact", 10, 0.8),
        ("UserPromptSubmit", None, 5, 0.8),
        ("PostToolUse", "Edit|Write|MultiEdit|NotebookEdit", 15, 0.8),
        ("PreCompact", None, 10, 2.0),
        ("PostCompact", None, 10, 0.8),
        ("Stop", None, 10, 0.8),
        ("SessionEnd", None, 10, 0.8),
    ):
        assert found[event][0] == {
            "type": "command",
            "command": session_start_command(
                url="http://signet.test:9000", token_env="MY_TOKEN", timeout=client_timeout
            ),
            "timeout": timeout,
            "_matcher": matcher,
        }
    assert result.interpreter == REAL_PYTHON
    # The foreign SessionStart group comes first, Signet's after it.
    assert after["hooks"]["SessionStart"][0] == original["hooks"]["SessionStart"][0]


def test_install_into_missing_file_creates_it_with_parents(tmp_path):
    target = tmp_path / "home" / ".claude" / "settings.json"

    result = install_claude_code(target)

    assert result.changed
    assert result.created
    assert result.backup_path is None
    settings = load(target)
    assert list(settings) == ["hooks"]
    assert list(settings["hooks"]) == EVENTS
    assert "--url http://127.0.0.1:8000 " in signet_handlers(settings)["PostCompact"][0]["command"]
    assert backups(target.parent) == []


def test_install_into_empty_file_treats_it_as_empty_object(tmp_path):
    target = tmp_path / "settings.json"
    target.write_text("  \n")

    result = install_claude_code(target)

    assert result.changed
    assert list(load(target)["hooks"]) == EVENTS
    assert result.backup_path is not None
    assert result.backup_path.read_text() == "  \n"


def test_install_is_idempotent(settings_file):
    install_claude_code(settings_file)
    first = settings_file.read_bytes()
    backups_after_first = backups(settings_file.parent)

    result = install_claude_code(settings_file)

    assert not result.changed
    assert result.backup_path is None
    assert settings_file.read_bytes() == first
    assert backups(settings_file.parent) == backups_after_first


def test_install_keeps_foreign_hooks_in_the_same_group_and_stays_idempotent(tmp_path):
    target = tmp_path / "settings.json"
    foreign = {"type": "command", "command": "echo hi"}
    mixed = {
        "hooks": {
            "Stop": [
                {
                    "hooks": [
                        {"type": "http", "url": "http://old:1/api/hooks/claude-code/"},
                        foreign,
                    ]
                },
                {"hooks": [{"type": "command", "command": "notify-send done"}]},
            ]
        }
    }
    target.write_text(json.dumps(mixed))

    install_claude_code(target)
    once = target.read_bytes()
    install_claude_code(target)

    assert target.read_bytes() == once
    stop = load(target)["hooks"]["Stop"]
    assert [len(group["hooks"]) for group in stop] == [1, 1, 1]
    assert install.is_signet_handler(stop[0]["hooks"][0])
    assert stop[0]["hooks"][0]["type"] == "command"  # the old http Stop, upgraded in place
    assert stop[1]["hooks"] == [foreign]
    assert stop[2] == mixed["hooks"]["Stop"][1]


def test_changing_url_or_token_env_replaces_instead_of_duplicating(settings_file):
    install_claude_code(settings_file, url="http://127.0.0.1:8000", token_env="SIGNET_TOKEN")

    result = install_claude_code(settings_file, url="https://signet.example", token_env="ST")

    after = load(settings_file)
    found = signet_handlers(after)
    assert result.changed
    assert result.removed == sorted(EVENTS)
    assert all(len(handlers) == 1 for handlers in found.values())
    assert "--url https://signet.example --token-env ST" in found["PostCompact"][0]["command"]
    assert "--url https://signet.example --token-env ST" in found["Stop"][0]["command"]
    assert "--url https://signet.example --token-env ST" in found["SessionStart"][0]["command"]
    assert "SIGNET_TOKEN" not in settings_file.read_text()
    assert len(backups(settings_file.parent)) == 2  # one per change, none overwritten


def test_a_stale_signet_event_is_removed_on_reinstall(tmp_path):
    target = tmp_path / "settings.json"
    old = {"type": "command", "command": "python3 /opt/old/signet_hook.py claude-code"}
    target.write_text(json.dumps({"hooks": {"Notification": [{"hooks": [old]}]}}))

    result = install_claude_code(target)

    assert "Notification" not in load(target)["hooks"]
    assert result.removed == ["Notification"]


def test_uninstall_restores_foreign_only_content(settings_file):
    original = load(settings_file)
    install_claude_code(settings_file, token_env="X_TOKEN")

    result = uninstall_claude_code(settings_file)

    assert result.changed
    assert result.removed == sorted(EVENTS)
    assert result.backup_path is not None
    assert signet_handlers(load(result.backup_path))  # the backup is the installed state
    assert load(settings_file) == original
    assert settings_file.read_text() == json.dumps(original, indent=2) + "\n"


def test_uninstall_of_a_signet_only_file_leaves_an_empty_object(tmp_path):
    target = tmp_path / "settings.json"
    install_claude_code(target)

    uninstall_claude_code(target)

    assert load(target) == {}
    again = uninstall_claude_code(target)
    assert not again.changed
    assert len(backups(tmp_path)) == 1


def test_uninstall_of_a_missing_file_changes_nothing(tmp_path):
    result = uninstall_claude_code(tmp_path / "settings.json")

    assert not result.changed
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "content",
    ['{"hooks": {', "[1, 2]", '{"hooks": []}', '{"hooks": null}', '{"hooks": {"Stop": {}}}'],
)
def test_unusable_json_is_refused_and_nothing_changes(tmp_path, content):
    target = tmp_path / "settings.json"
    target.write_text(content)

    with pytest.raises(InstallError, match="nothing was changed"):
        install_claude_code(target)
    with pytest.raises(InstallError, match="nothing was changed"):
        uninstall_claude_code(target)

    assert target.read_text() == content
    assert list(tmp_path.iterdir()) == [target]


def test_bad_url_or_token_env_is_refused(tmp_path):
    with pytest.raises(InstallError, match="URL"):
        install_claude_code(tmp_path / "s.json", url="signet.local:8000")
    with pytest.raises(InstallError, match="environment variable"):
        install_claude_code(tmp_path / "s.json", token_env="$(rm -rf ~)")
    assert list(tmp_path.iterdir()) == []


def test_the_token_value_is_never_written(tmp_path, monkeypatch):
    monkeypatch.setenv("SIGNET_TOKEN", "sgt_live_secret_value_123")
    target = tmp_path / "settings.json"

    call_command("install_hooks", "claude-code", "--settings-file", str(target))

    text = target.read_text()
    assert "sgt_live_secret_value_123" not in text
    assert "--token-env SIGNET_TOKEN" in text


def test_writes_through_a_symlink(tmp_path):
    real = tmp_path / "dotfiles" / "settings.json"
    real.parent.mkdir()
    real.write_text("{}")
    link = tmp_path / "settings.json"
    link.symlink_to(real)

    install_claude_code(link)

    assert link.is_symlink()
    assert "hooks" in load(real)


def test_paths_with_shell_characters_are_quoted_and_the_command_still_runs(tmp_path):
    script = copy_hook(tmp_path / 'we"ird $dir `x`')
    python = tmp_path / "py $HOME" / "python"
    python.parent.mkdir()
    python.symlink_to(sys.executable)

    with recording_server((200, REPLY)) as (url, received):
        install_claude_code(
            tmp_path / "s.json", url=url, hook_script=script, interpreter=str(python)
        )
        command = installed_command(tmp_path / "s.json")
        proc = run_command(command, tmp_path=tmp_path)

    assert command.startswith(f'"{tmp_path}/py \\$HOME/python" -I -S -c ')
    assert f' "{tmp_path}/we\\"ird \\$dir \\`x\\`/signet_hook.py" --url ' in command
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, REPLY, b"")
    assert len(received) == 1


def test_the_installed_command_delivers_and_no_module_of_the_project_can_stand_in(tmp_path):
    # The command runs in the agent's project folder; -I keeps that folder off sys.path, so
    # a module there never replaces the hook or what it imports (datetime: for the outbox).
    project = tmp_path / "project"
    project.mkdir()
    for decoy in ("signet_hook.py", "datetime.py", "os.py", "json.py"):
        (project / decoy).write_text("raise SystemExit('hijacked')\n")
    target = tmp_path / "settings.json"

    with recording_server((200, REPLY), (503, b"")) as (url, received):
        install_claude_code(target, url=url)
        delivered = run_command(installed_command(target), tmp_path=tmp_path)
        queued = run_command(installed_command(target), tmp_path=tmp_path)

    assert (delivered.returncode, delivered.stdout, delivered.stderr) == (0, REPLY, b"")
    assert received[0].path == "/api/hooks/claude-code/"
    assert received[0].headers["Authorization"] == "Bearer sgt_test"
    assert queued.returncode == 0
    assert queued.stderr.startswith(b"signet-hook: HTTP 503; event queued")
    assert len((tmp_path / "outbox.jsonl").read_text().splitlines()) == 1


def test_the_installed_command_fails_open_like_the_script(tmp_path):
    target = tmp_path / "settings.json"
    install_claude_code(target, url="http://127.0.0.1:9")  # nothing listens on port 9

    proc = run_command(installed_command(target), tmp_path=tmp_path)

    assert proc.returncode == 0
    assert proc.stdout == b""
    assert proc.stderr.startswith(b"signet-hook: server unreachable")
    assert len((tmp_path / "outbox.jsonl").read_text().splitlines()) == 1


def test_the_default_interpreter_is_the_real_binary_behind_this_one():
    assert install.default_interpreter() == REAL_PYTHON
    assert not os.path.islink(REAL_PYTHON)
    assert os.access(REAL_PYTHON, os.X_OK)


@pytest.mark.parametrize("executable", ["", "/nonexistent/bin/python3"])
def test_without_a_real_interpreter_the_command_falls_back_to_python3(
    tmp_path, monkeypatch, executable
):
    monkeypatch.setattr(sys, "executable", executable)

    result = install_claude_code(tmp_path / "s.json", url="http://127.0.0.1:8000")

    assert result.interpreter == "python3"
    assert installed_command(tmp_path / "s.json") == session_start_command(
        url="http://127.0.0.1:8000", token_env="SIGNET_TOKEN", python="python3", timeout=0.8
    )


def test_an_interpreter_that_is_not_there_is_refused(tmp_path):
    with pytest.raises(InstallError, match="not an executable"):
        install_claude_code(tmp_path / "s.json", interpreter=str(tmp_path / "python9"))
    assert list(tmp_path.iterdir()) == []


def test_a_hook_script_under_another_name_is_refused(tmp_path):
    with pytest.raises(InstallError, match=r"must be named signet_hook\.py"):
        install_claude_code(tmp_path / "s.json", hook_script=tmp_path / "hook.py")
    assert list(tmp_path.iterdir()) == []


def test_install_caches_the_hooks_bytecode_beside_it(tmp_path):
    script = copy_hook(tmp_path / "hooks")

    install_claude_code(tmp_path / "s.json", hook_script=script)

    assert Path(importlib.util.cache_from_source(str(script))).is_file()


def test_management_command_installs_and_uninstalls(tmp_path, capsys):
    target = tmp_path.resolve() / "settings.json"

    call_command(
        "install_hooks",
        "claude-code",
        "--settings-file",
        str(target),
        "--url",
        "http://10.0.0.5:8000",
        "--token-env",
        "TEAM_SIGNET",
    )
    out = capsys.readouterr().out
    assert f"Created {target}" in out
    assert "SessionStart, UserPromptSubmit, PostToolUse" in out
    assert f"All hooks run with: {REAL_PYTHON}" in out
    assert "export TEAM_SIGNET=..." in out
    assert "create_token --user NAME --scopes ingest,read,write" in out
    assert (
        "--url http://10.0.0.5:8000 " in signet_handlers(load(target))["PostCompact"][0]["command"]
    )

    call_command(
        "install_hooks",
        "claude-code",
        "--settings-file",
        str(target),
        "--url",
        "http://10.0.0.5:8000",
        "--token-env",
        "TEAM_SIGNET",
    )
    assert "already up to date" in capsys.readouterr().out

    call_command("install_hooks", "claude-code", "--settings-file", str(target), "--uninstall")
    out = capsys.readouterr().out
    assert f"Removed Signet's hooks from {target}" in out
    assert "backup: " in out
    assert load(target) == {}


def test_management_command_reports_invalid_json(tmp_path):
    target = tmp_path / "settings.json"
    target.write_text("{nope")

    with pytest.raises(CommandError, match="not valid JSON"):
        call_command("install_hooks", "claude-code", "--settings-file", str(target))

    assert target.read_text() == "{nope"


def test_management_command_takes_an_interpreter(tmp_path, capsys):
    target = tmp_path / "settings.json"

    call_command(
        "install_hooks", "claude-code", "--settings-file", str(target), "--python", sys.executable
    )

    assert installed_command(target).startswith(f'"{sys.executable}" -I -S -c ')
    assert f"All hooks run with: {sys.executable}" in capsys.readouterr().out
    with pytest.raises(CommandError, match="not an executable"):
        call_command(
            "install_hooks", "claude-code", "--settings-file", str(target), "--python", "nope9"
        )


def test_management_command_defaults_to_the_home_settings(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))

    call_command("install_hooks", "claude-code")

    assert list(load(tmp_path / ".claude" / "settings.json")["hooks"]) == EVENTS


@pytest.mark.parametrize(
    ("event", "timeout", "command_end"),
    [
        ("PreCompact", 10, "--timeout 2.0 claude-code"),
        ("Stop", 10, "--timeout 0.8 claude-code"),
        ("UserPromptSubmit", 5, "--timeout 0.8 claude-code"),
        ("PostToolUse", 15, "--timeout 0.8 claude-code"),
        ("PostCompact", 10, "--timeout 0.8 claude-code"),
    ],
)
def test_reinstall_upgrades_an_http_hook_to_the_command(tmp_path, event, timeout, command_end):
    """Earlier installs had PreCompact and Stop, later prompts, edits and PostCompact, as
    http hooks; running the installer again makes them commands."""
    target = tmp_path / "settings.json"
    install_claude_code(target)
    settings = load(target)
    old_handler = {
        "type": "http",
        "url": "http://127.0.0.1:8000/api/hooks/claude-code/",
        "timeout": timeout,
        "headers": {"Authorization": "Bearer $SIGNET_TOKEN"},
        "allowedEnvVars": ["SIGNET_TOKEN"],
    }
    settings["hooks"][event] = [{"hooks": [old_handler]}]
    target.write_text(json.dumps(settings, indent=2) + "\n")

    result = install_claude_code(target)

    assert result.changed
    found = signet_handlers(load(target))[event]
    assert len(found) == 1
    assert found[0]["type"] == "command"
    assert found[0]["timeout"] == timeout
    assert found[0]["command"].endswith(command_end)


def test_the_installed_precompact_command_sends_the_transcripts_facts(tmp_path):
    """The command reads the transcript where it is and posts its facts with the event."""
    target = tmp_path / "settings.json"
    with recording_server() as (url, received):
        install_claude_code(target, url=url)
        command = signet_handlers(load(target))["PreCompact"][0]["command"]
        transcript = Path(__file__).resolve().parent / "fixtures" / "claude_code"
        body = json.loads((transcript / "pre_compact_auto.json").read_text())
        body["transcript_path"] = str(transcript / "transcript.jsonl")
        done = run_command(command, tmp_path=tmp_path, payload=json.dumps(body).encode())
    assert done.returncode == 0
    assert done.stderr == b""
    facts = received[0].body["signet"]["transcript"]
    assert facts["current_task"] == "Continue: finish the Redis conversion and run the tests."
    assert facts["git_branch"] == "feat/login-rate-limit"
    assert facts["context_tokens"] == 21625
    assert any(path.endswith("rateLimit.ts") for path in facts["modified_files"])


def test_the_installed_stop_command_sends_the_context_usage(tmp_path):
    """The command reads the usage of the turn's last response where the transcript is."""
    target = tmp_path / "settings.json"
    with recording_server() as (url, received):
        install_claude_code(target, url=url)
        command = signet_handlers(load(target))["Stop"][0]["command"]
        fixtures = Path(__file__).resolve().parent / "fixtures" / "claude_code"
        body = json.loads((fixtures / "stop.json").read_text())
        body["transcript_path"] = str(fixtures / "transcript.jsonl")
        done = run_command(command, tmp_path=tmp_path, payload=json.dumps(body).encode())
    assert done.returncode == 0
    assert done.stderr == b""
    usage = received[0].body["signet"]["usage"]
    assert usage["context_tokens"] == 21625
    assert usage["model"].startswith("claude-")
    assert "transcript" not in received[0].body["signet"]


def test_a_backup_is_as_private_as_the_file_it_copies(tmp_path):
    target = tmp_path / "settings.json"
    target.write_text('{"model": "opus"}\n')
    target.chmod(0o600)
    result = install_claude_code(target)
    assert result.backup_path is not None
    assert result.backup_path.stat().st_mode & 0o777 == 0o600
