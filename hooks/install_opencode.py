"""Copy (or remove) Signet's OpenCode plugin into OpenCode's plugin folder.

OpenCode has no hook settings: it loads every ``.js``/``.ts`` file in
``~/.config/opencode/plugins/`` at startup, so the install is one file, ``signet.js``, and no
configuration is written. The copy is ``hooks/opencode/signet.js`` with the server URL and the
name of the token's environment variable written into its two defaults (``SIGNET_URL`` still
overrides the URL at run time); never the token itself. A second run changes no byte; a file
it overwrites that differs is backed up first (as ``signet.js.signet-backup-<time>``, a name
OpenCode does not load); ``uninstall_opencode`` removes only a file that is Signet's plugin.

Standard library only, so it can also run outside the Django project.
"""

from __future__ import annotations

import json
from pathlib import Path

from hooks.install import (
    DEFAULT_TOKEN_ENV,
    DEFAULT_URL,
    InstallError,
    InstallResult,
    _backup,
    _write_atomically,
    validate_token_env,
    validate_url,
)

DEFAULT_OPENCODE_PLUGINS = "~/.config/opencode/plugins"
PLUGIN_SOURCE = Path(__file__).resolve().parent / "opencode" / "signet.js"
PLUGIN_NAME = "signet.js"
# The first line of the plugin: how a file in the folder is known to be Signet's.
MARKER = b"// Signet Continuity plugin for OpenCode"
EVENTS = [
    "session.created",
    "chat.message",
    "tool.execute.after",
    "experimental.session.compacting",
    "session.compacted",
    "session.idle",
    "session.deleted",
]
_URL_LINE = f"const DEFAULT_URL = {json.dumps(DEFAULT_URL)}\n"
_TOKEN_LINE = f"const TOKEN_ENV = {json.dumps(DEFAULT_TOKEN_ENV)}\n"


def plugin_source(*, url: str, token_env: str, source: Path = PLUGIN_SOURCE) -> bytes:
    """The plugin as installed: the source with ``url`` and ``token_env`` as its defaults."""
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise InstallError(f"cannot read the plugin {source}: {exc.strerror}") from exc
    if text.count(_URL_LINE) != 1 or text.count(_TOKEN_LINE) != 1:
        raise InstallError(f"{source} does not hold the expected DEFAULT_URL/TOKEN_ENV lines")
    text = text.replace(_URL_LINE, f"const DEFAULT_URL = {json.dumps(url)}\n")
    text = text.replace(_TOKEN_LINE, f"const TOKEN_ENV = {json.dumps(token_env)}\n")
    return text.encode("utf-8")


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InstallError(f"cannot read {path}: {exc.strerror}") from exc


def install_opencode(
    plugin_dir: Path, *, url: str = DEFAULT_URL, token_env: str = DEFAULT_TOKEN_ENV
) -> InstallResult:
    """Write Signet's plugin into ``plugin_dir`` (created if missing); idempotent."""
    data = plugin_source(url=validate_url(url), token_env=validate_token_env(token_env))
    target = plugin_dir.expanduser() / PLUGIN_NAME
    if target.is_symlink():
        target = target.resolve()  # a dotfiles link: write through it
    raw = _read(target)
    result = InstallResult(settings_path=target, changed=data != raw, created=raw is None)
    if result.changed:
        if raw is not None:
            result.backup_path = _backup(target, raw)
        _write_atomically(target, data)
    result.installed = list(EVENTS)
    return result


def uninstall_opencode(plugin_dir: Path) -> InstallResult:
    """Remove Signet's plugin from ``plugin_dir``; a foreign ``signet.js`` is left alone."""
    target = plugin_dir.expanduser() / PLUGIN_NAME
    raw = _read(target)
    if raw is None:
        return InstallResult(settings_path=target, changed=False)
    if not raw.startswith(MARKER):
        raise InstallError(f"{target} is not Signet's plugin; nothing was changed")
    target.unlink()
    return InstallResult(settings_path=target, changed=True, removed=list(EVENTS))
