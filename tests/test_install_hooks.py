"""The Claude Code settings installer: merging, idempotence, backups, uninstall."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from hooks import install
from hooks.install import InstallError, install_claude_code, uninstall_claude_code

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "claude_code" / "settings.json"
HOOK_SCRIPT = Path(install.__file__).resolve().with_name("signet_hook.py")
EVENTS = [
    "SessionStart",
    "UserPromptSubmit",
    "PostToolUse",
    "PreCompact",
    "PostCompact",
    "Stop",
    "SessionEnd",
]


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
    assert found["UserPromptSubmit"][0] == {
        "type": "http",
        "url": "http://signet.test:9000/api/hooks/claude-code/",
        "timeout": 5,
        "headers": {"Authorization": "Bearer $MY_TOKEN"},
        "allowedEnvVars": ["MY_TOKEN"],
        "_matcher": None,
    }
    assert found["PostToolUse"][0]["_matcher"] == "Edit|Write|MultiEdit|NotebookEdit"
    assert found["PreCompact"][0]["timeout"] == 30
    assert found["PostCompact"][0]["timeout"] == 10
    assert found["SessionEnd"][0]["timeout"] == 5
    assert found["SessionStart"][0] == {
        "type": "command",
        "command": f'python3 "{HOOK_SCRIPT}" --url http://signet.test:9000 '
        "--token-env MY_TOKEN claude-code",
        "timeout": 10,
        "_matcher": "startup|resume|clear|compact",
    }
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
    assert signet_handlers(settings)["Stop"][0]["url"] == (
        "http://127.0.0.1:8000/api/hooks/claude-code/"
    )
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
    assert stop[0]["hooks"][0]["url"] == "http://127.0.0.1:8000/api/hooks/claude-code/"
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
    assert found["Stop"][0]["url"] == "https://signet.example/api/hooks/claude-code/"
    assert found["Stop"][0]["headers"] == {"Authorization": "Bearer $ST"}
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
    assert "$SIGNET_TOKEN" in text


def test_writes_through_a_symlink(tmp_path):
    real = tmp_path / "dotfiles" / "settings.json"
    real.parent.mkdir()
    real.write_text("{}")
    link = tmp_path / "settings.json"
    link.symlink_to(real)

    install_claude_code(link)

    assert link.is_symlink()
    assert "hooks" in load(real)


def test_hook_script_path_with_shell_characters_is_quoted(tmp_path):
    script = tmp_path / 'we"ird $dir' / "signet_hook.py"

    install_claude_code(tmp_path / "s.json", hook_script=script)

    command = signet_handlers(load(tmp_path / "s.json"))["SessionStart"][0]["command"]
    assert command.startswith(f'python3 "{tmp_path}/we\\"ird \\$dir/signet_hook.py" --url ')


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
    assert "export TEAM_SIGNET=..." in out
    assert "create_token --user NAME --scopes ingest,read" in out
    assert signet_handlers(load(target))["Stop"][0]["url"] == (
        "http://10.0.0.5:8000/api/hooks/claude-code/"
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


def test_management_command_defaults_to_the_home_settings(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))

    call_command("install_hooks", "claude-code")

    assert list(load(tmp_path / ".claude" / "settings.json")["hooks"]) == EVENTS
