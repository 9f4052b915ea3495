"""Register (or remove) Signet's MCP server in Claude Code's user-scope configuration: the
``mcpServers`` object of ``~/.claude.json``.

The entry points Claude Code at the service's own MCP endpoint (streamable HTTP at
``/mcp/``), so nothing but Claude Code runs on the agent's machine and nothing there opens a
database:

    "signet": {"type": "http", "url": "http://host:8000/mcp/?cwd=${PWD:-}",
               "headers": {"Authorization": "Bearer ${SIGNET_TOKEN}"}}

Claude Code expands ``${NAME}`` (and ``${NAME:-default}``) in an MCP server's ``url`` and
``headers`` from its own environment when it connects; a bare ``$NAME`` is sent as it is.
So only the name of the token's variable is written, never its value. The launch folder
(``$PWD``, which the shell exports) goes in the query rather than a header: Claude Code
percent-encodes a URL, while a header holding a character outside Latin-1 makes it drop the
server. The service reads ``cwd`` to the end of the query string (a folder name may hold
``&``), and uses it to find the calling session as the hooks named it.

An older install's stdio entry (``manage.py mcp_server``) is Signet's too, and is upgraded in
place. Same guarantees as ``hooks.install``, whose helpers this reuses: every other key and
server is kept, a second run changes no byte and writes no backup, a backup is written before
any change, the write is atomic. An entry named ``signet`` that is not Signet's is never
overwritten. Standard library only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hooks.install import (
    DEFAULT_TOKEN_ENV,
    DEFAULT_URL,
    InstallError,
    InstallResult,
    _load,
    _save,
    _target,
    validate_token_env,
    validate_url,
)

DEFAULT_CLAUDE_JSON = "~/.claude.json"
SERVER_NAME = "signet"
MCP_PATH = "/mcp/"
# Last in the query: the service takes it to the end of the string.
CWD_QUERY = "cwd=${PWD:-}"
# What an older install registered: ``manage.py mcp_server`` over stdio.
STDIO_COMMAND = "mcp_server"
BEARER_FROM_ENV = re.compile(r"^Bearer \$\{[A-Za-z_][A-Za-z0-9_]*\}$")


def mcp_server_entry(
    *, url: str = DEFAULT_URL, token_env: str = DEFAULT_TOKEN_ENV
) -> dict[str, Any]:
    """Claude Code's ``http`` entry for the service's MCP endpoint at ``url``."""
    return {
        "type": "http",
        "url": f"{validate_url(url)}{MCP_PATH}?{CWD_QUERY}",
        "headers": {"Authorization": f"Bearer ${{{validate_token_env(token_env)}}}"},
    }


def _is_stdio_server(entry: dict[str, Any]) -> bool:
    args = entry.get("args")
    if not isinstance(args, list) or len(args) < 2:
        return False
    return str(args[0]).endswith("manage.py") and args[1] == STDIO_COMMAND


def _is_http_server(entry: dict[str, Any]) -> bool:
    url, headers = entry.get("url"), entry.get("headers")
    if entry.get("type") != "http" or not isinstance(url, str) or not isinstance(headers, dict):
        return False
    authorization = headers.get("Authorization")
    return (
        urlsplit(url).path.endswith(MCP_PATH)
        and isinstance(authorization, str)
        and BEARER_FROM_ENV.match(authorization) is not None
    )


def is_signet_server(entry: Any) -> bool:
    """Whether an ``mcpServers`` entry is one this installer wrote: the service's ``/mcp/``
    with a bearer token from an environment variable, or an older install's stdio server."""
    return isinstance(entry, dict) and (_is_http_server(entry) or _is_stdio_server(entry))


def _servers(settings: dict[str, Any], path: Path) -> dict[str, Any]:
    servers = settings.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise InstallError(f'"mcpServers" in {path} is not an object; nothing was changed')
    return servers


def mcp_install(
    config_path: Path, *, url: str = DEFAULT_URL, token_env: str = DEFAULT_TOKEN_ENV
) -> InstallResult:
    """Add (or update in place) the ``signet`` server in ``config_path``'s ``mcpServers``."""
    entry = mcp_server_entry(url=url, token_env=token_env)
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
    result.removed = [SERVER_NAME] if current is not None and current != entry else []
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
