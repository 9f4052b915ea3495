"""Install (or remove) Signet's OpenClaw plugin.

OpenClaw loads native plugins from ``<state dir>/extensions/<id>/`` (the state dir is the
folder of ``openclaw.json``, ``~/.openclaw`` by default): a folder with an
``openclaw.plugin.json`` manifest and the module its ``package.json`` names. The plugin's files
(``hooks/openclaw/``, tests left out) are copied there, and ``openclaw.json`` gets
``plugins.entries.signet-continuity = {enabled: true, config: {url, tokenEnv}}``, plus the id in
``plugins.allow`` when the user keeps an allowlist. Only the token variable's name is written,
never its value.

Idempotent: a second run changes no byte and writes no second backup; a changed
``openclaw.json`` is backed up first. Every other key of the file stays as it was. OpenClaw
accepts JSON5 in ``openclaw.json``; a file this cannot read as plain JSON is left alone and the
install stops before copying anything, saying what to add by hand.

Standard library only, so it can also run outside the Django project.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hooks.install import (
    DEFAULT_TOKEN_ENV,
    DEFAULT_URL,
    InstallError,
    _backup,
    _write_atomically,
    validate_token_env,
    validate_url,
)

PLUGIN_ID = "signet-continuity"
DEFAULT_OPENCLAW_CONFIG = "~/.openclaw/openclaw.json"
PLUGIN_SOURCE = Path(__file__).resolve().with_name("openclaw")
PLUGIN_FILES = ("openclaw.plugin.json", "package.json", "index.js", "transcript.js")


@dataclass
class OpenClawResult:
    """What an install or uninstall did: the plugin folder and ``openclaw.json``."""

    config_path: Path
    plugin_dir: Path
    files_changed: list[str] = field(default_factory=list)
    config_changed: bool = False
    backup_path: Path | None = None

    @property
    def changed(self) -> bool:
        return bool(self.files_changed) or self.config_changed

    def report(self, *, uninstall: bool, token_env: str = DEFAULT_TOKEN_ENV) -> list[str]:
        """What the command prints."""
        lines: list[str] = []
        if uninstall:
            if not self.changed:
                return [f"No Signet plugin in {self.plugin_dir} or {self.config_path}."]
            lines.append(f"Removed Signet's OpenClaw plugin ({self.plugin_dir})")
        elif not self.changed:
            lines.append(f"Signet's OpenClaw plugin in {self.plugin_dir} is already up to date.")
        else:
            lines.append(f"Installed Signet's OpenClaw plugin in {self.plugin_dir}")
            if self.config_changed:
                lines.append(f"  enabled in {self.config_path}")
        if self.backup_path is not None:
            lines.append(f"  backup: {self.backup_path}")
        if not uninstall:
            lines.append(
                f"Restart the gateway; it must see the token in its environment: export "
                f"{token_env}=... (create one with: python manage.py create_token --user NAME "
                "--scopes ingest,read)"
            )
        return lines


def _load(config_path: Path) -> tuple[dict[str, Any], bytes | None]:
    try:
        raw = config_path.read_bytes()
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        raise InstallError(f"cannot read {config_path}: {exc.strerror}") from exc
    if not raw.strip():
        return {}, raw
    try:
        config = json.loads(raw)
    except ValueError as exc:
        raise InstallError(
            f"{config_path} is not plain JSON ({exc}); nothing was changed. Add "
            f'plugins.entries["{PLUGIN_ID}"] = {{"enabled": true}} yourself, or run again '
            "once the file is plain JSON"
        ) from exc
    if not isinstance(config, dict):
        raise InstallError(f"{config_path} does not hold a JSON object; nothing was changed")
    plugins = config.get("plugins", {})
    if not isinstance(plugins, dict) or not isinstance(plugins.get("entries", {}), dict):
        raise InstallError(f'"plugins.entries" in {config_path} is not an object; nothing changed')
    return config, raw


def _save(config_path: Path, config: dict[str, Any], raw: bytes | None) -> tuple[bool, Path | None]:
    data = (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    if data == raw:
        return False, None
    backup = _backup(config_path, raw) if raw is not None else None
    _write_atomically(config_path, data)
    return True, backup


def _paths(config_path: Path) -> tuple[Path, Path]:
    # Written through a symlink (dotfiles), like the other installers.
    path = config_path.expanduser().resolve()
    return path, path.parent / "extensions" / PLUGIN_ID


def install_openclaw(
    config_path: Path,
    *,
    url: str = DEFAULT_URL,
    token_env: str = DEFAULT_TOKEN_ENV,
    source: Path = PLUGIN_SOURCE,
) -> OpenClawResult:
    """Copy the plugin next to ``config_path`` (under ``extensions/``) and enable it there."""
    url = validate_url(url)
    token_env = validate_token_env(token_env)
    path, plugin_dir = _paths(config_path)
    config, raw = _load(path)
    result = OpenClawResult(config_path=path, plugin_dir=plugin_dir)
    plugin_dir.mkdir(parents=True, exist_ok=True)
    for name in PLUGIN_FILES:
        data = (source / name).read_bytes()
        target = plugin_dir / name
        try:
            same = target.read_bytes() == data
        except OSError:
            same = False
        if not same:
            _write_atomically(target, data)
            target.chmod(0o644)
            result.files_changed.append(name)
    plugins: dict[str, Any] = config.setdefault("plugins", {})
    entries: dict[str, Any] = plugins.setdefault("entries", {})
    entry = entries.get(PLUGIN_ID)
    entry = dict(entry) if isinstance(entry, dict) else {}
    own = entry.get("config")
    entry["enabled"] = True
    entry["config"] = {**(own if isinstance(own, dict) else {}), "url": url, "tokenEnv": token_env}
    entries[PLUGIN_ID] = entry
    allow = plugins.get("allow")
    # An allowlist, when the user keeps one, loads nothing that is not on it.
    if isinstance(allow, list) and PLUGIN_ID not in allow:
        allow.append(PLUGIN_ID)
    result.config_changed, result.backup_path = _save(path, config, raw)
    return result


def uninstall_openclaw(config_path: Path) -> OpenClawResult:
    """Remove the plugin folder's files and the plugin's keys in ``config_path``."""
    path, plugin_dir = _paths(config_path)
    config, raw = _load(path)
    result = OpenClawResult(config_path=path, plugin_dir=plugin_dir)
    for name in PLUGIN_FILES:
        target = plugin_dir / name
        if target.is_file():
            target.unlink()
            result.files_changed.append(name)
    if plugin_dir.is_dir() and not any(plugin_dir.iterdir()):
        plugin_dir.rmdir()
    plugins = config.get("plugins")
    if raw is not None and isinstance(plugins, dict):
        entries = plugins.get("entries", {})
        removed = entries.pop(PLUGIN_ID, None) is not None
        allow = plugins.get("allow")
        if isinstance(allow, list) and PLUGIN_ID in allow:
            allow.remove(PLUGIN_ID)
            removed = True
        if removed:
            if "entries" in plugins and not entries:
                del plugins["entries"]
            if not plugins:
                del config["plugins"]
            result.config_changed, result.backup_path = _save(path, config, raw)
    return result
