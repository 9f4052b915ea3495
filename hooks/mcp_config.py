"""Register (or remove) Signet's stdio MCP server in Claude Code's user-scope configuration:
the ``mcpServers`` object of ``~/.claude.json``.

The entry runs this checkout's ``manage.py mcp_server`` with the Python that runs the
installer (a virtualenv's, which has the service's packages):

    "signet": {"type": "stdio", "command": "/…/.venv/bin/python",
               "args": ["/…/manage.py", "mcp_server", "--token-env", "SIGNET_TOKEN"]}

No token is written, and no ``env`` either: a stdio server without an ``env`` block inherits
Claude Code's environment, where the hooks already find ``$SIGNET_TOKEN``. Same guarantees
as ``hooks.install``, whose helpers this reuses: every other key and server is kept, a
second run changes no byte and writes no backup, a backup is written before any change, the
write is atomic. An entry named ``signet`` that is not Signet's is never overwritten.
Standard library only.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hooks.install import (
    DEFAULT_TOKEN_ENV,
    InstallError,
    InstallResult,
    _load,
    _save,
    _target,
    validate_token_env,
)

DEFAULT_CLAUDE_JSON = "~/.claude.json"
SERVER_NAME = "signet"
COMMAND_NAME = "mcp_server"
MANAGE_PY = Path(__file__).resolve().parent.parent / "manage.py"


def mcp_server_entry(
    *, interpreter: str, manage_py: Path = MANAGE_PY, token_env: str = DEFAULT_TOKEN_ENV
) -> dict[str, Any]:
    """Claude Code's stdio entry for Signet's MCP server."""
    return {
        "type": "stdio",
        "command": interpreter,
        "args": [str(manage_py), COMMAND_NAME, "--token-env", validate_token_env(token_env)],
    }


def is_signet_server(entry: Any) -> bool:
    """Whether an ``mcpServers`` entry runs Signet's ``manage.py mcp_server``."""
    if not isinstance(entry, dict):
        return False
    args = entry.get("args")
    if not isinstance(args, list) or len(args) < 2:
        return False
    return str(args[0]).endswith("manage.py") and args[1] == COMMAND_NAME


def _servers(settings: dict[str, Any], path: Path) -> dict[str, Any]:
    servers = settings.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise InstallError(f'"mcpServers" in {path} is not an object; nothing was changed')
    return servers


def mcp_install(
    config_path: Path,
    *,
    interpreter: str | None = None,
    manage_py: Path = MANAGE_PY,
    token_env: str = DEFAULT_TOKEN_ENV,
) -> InstallResult:
    """Add (or update in place) the ``signet`` server in ``config_path``'s ``mcpServers``."""
    python = interpreter or sys.executable
    if not python:
        raise InstallError("no Python interpreter to run the MCP server with; pass one")
    entry = mcp_server_entry(interpreter=python, manage_py=manage_py, token_env=token_env)
    path = _target(config_path)
    settings, raw = _load(path)
    servers = _servers(settings, path)
    current = servers.get(SERVER_NAME)
    if current is not None and not is_signet_server(current):
        raise InstallError(
            f'{path} already has an MCP server named "{SERVER_NAME}" that is not Signet\'s; '
            "nothing was changed"
        )
    servers[SERVER_NAME] = entry  # in place when it was there: the file keeps its order
    settings["mcpServers"] = servers
    result = _save(path, settings, raw)
    result.installed = [SERVER_NAME]
    result.removed = [SERVER_NAME] if current is not None else []
    result.interpreter = python
    return result


def mcp_uninstall(config_path: Path) -> InstallResult:
    """Remove the ``signet`` server from ``config_path`` if it is Signet's; keep the rest."""
    path = _target(config_path)
    settings, raw = _load(path)
    if raw is None:
        return InstallResult(settings_path=path, changed=False)
    servers = _servers(settings, path)
    if not is_signet_server(servers.get(SERVER_NAME)):
        return InstallResult(settings_path=path, changed=False)
    del servers[SERVER_NAME]
    result = _save(path, settings, raw)
    result.removed = [SERVER_NAME]
    return result
