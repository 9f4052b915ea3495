"""Write (or remove) Signet's hooks for Codex CLI and Gemini CLI.

Both harnesses run hooks as commands only, so every event runs the hook client
(``signet_hook.py``), written as in ``hooks/install.py``: a real interpreter by its absolute
path, ``-I -S``, the hook imported as a module. The merge is the Claude Code installer's:
foreign hooks and settings stay in place, a second run changes no byte and writes no second
backup, the file is backed up before a change and replaced atomically, and Signet's own
entries (found by the script's name) are replaced, so re-running it upgrades an install.

- Codex: ``~/.codex/hooks.json`` (``$CODEX_HOME/hooks.json`` when that is set), the
  Claude-style shape, ``timeout`` in seconds. Codex versions without hooks run the legacy
  ``notify`` program instead: ``codex_notify_argv`` is the ``notify = [...]`` line for
  ``config.toml``, which this module does not write (it would post a second Stop per turn
  where hooks run too).
- Gemini: ``~/.gemini/settings.json``, ``hooks.<Event>[{hooks: [{type, name, command,
  timeout}]}]`` with ``timeout`` in milliseconds.

Only the ``$NAME`` of the token's environment variable is written, never its value.
Standard library only, like ``hooks/install.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hooks.install import (
    DEFAULT_TOKEN_ENV,
    DEFAULT_URL,
    FALLBACK_INTERPRETER,
    HOOK_BOOTSTRAP,
    HOOK_SCRIPT,
    InstallResult,
    default_interpreter,
    hook_command,
    hooks_merge,
    uninstall_claude_code,
    validate_token_env,
    validate_url,
)

DEFAULT_GEMINI_SETTINGS = "~/.gemini/settings.json"

# (event, timeout in seconds) in file order. PreCompact writes the emergency checkpoint the
# next session depends on: time for a slow server. The rest answer within the client's own
# default deadline (4 s) plus its start-up.
CODEX_EVENTS: tuple[tuple[str, int], ...] = (
    ("SessionStart", 10),
    ("UserPromptSubmit", 10),
    ("PreCompact", 30),
    ("PostCompact", 10),
    ("Stop", 10),
    ("SessionEnd", 10),
)
# (event, timeout in milliseconds). PreCompress is observe-only and fired asynchronously;
# SessionEnd is not waited for: the timeouts bound the hook, not the agent.
GEMINI_EVENTS: tuple[tuple[str, int], ...] = (
    ("SessionStart", 10_000),
    ("BeforeAgent", 10_000),
    ("PreCompress", 30_000),
    ("SessionEnd", 10_000),
)
# What the hook client itself may spend under the harness's timeout (its watchdog adds a
# second): most of the budget where the emergency checkpoint is written.
CLIENT_TIMEOUTS = {"PreCompact": 25, "PreCompress": 25}


def default_codex_hooks() -> str:
    """Codex's user hooks file: in ``$CODEX_HOME`` when set, else ``~/.codex``."""
    home = os.environ.get("CODEX_HOME", "").strip()
    return str(Path(home) / "hooks.json") if home else "~/.codex/hooks.json"


def _hook_words(
    *, url: str, token_env: str, hook_script: Path, interpreter: str
) -> tuple[str, list[str]]:
    """The hook client's command line before its harness: as one shell string, and as argv."""
    command = hook_command(
        url=url, token_env=token_env, hook_script=hook_script, interpreter=interpreter
    )
    argv = [interpreter, "-I", "-S", "-c", HOOK_BOOTSTRAP, str(hook_script)]
    return command, [*argv, "--url", url, "--token-env", token_env]


def codex_entries(
    *, url: str, token_env: str, hook_script: Path, interpreter: str = FALLBACK_INTERPRETER
) -> list[tuple[str, dict[str, Any]]]:
    """Signet's Codex hooks as ``(event, handler)``, in file order."""
    command, _ = _hook_words(
        url=url, token_env=token_env, hook_script=hook_script, interpreter=interpreter
    )
    entries = []
    for event, timeout in CODEX_EVENTS:
        extra = f" --timeout {CLIENT_TIMEOUTS[event]}" if event in CLIENT_TIMEOUTS else ""
        handler = {"type": "command", "command": f"{command}{extra} codex", "timeout": timeout}
        entries.append((event, handler))
    return entries


def codex_notify_argv(
    *, url: str, token_env: str, hook_script: Path = HOOK_SCRIPT, interpreter: str | None = None
) -> list[str]:
    """The ``notify`` program for Codex's ``config.toml``: Codex appends the JSON to it."""
    python = default_interpreter() if interpreter is None else interpreter
    _, argv = _hook_words(
        url=validate_url(url),
        token_env=validate_token_env(token_env),
        hook_script=hook_script,
        interpreter=python,
    )
    return [*argv, "--notify", "codex"]


def gemini_entries(
    *, url: str, token_env: str, hook_script: Path, interpreter: str = FALLBACK_INTERPRETER
) -> list[tuple[str, dict[str, Any]]]:
    """Signet's Gemini CLI hooks as ``(event, handler)``, in settings order."""
    command, _ = _hook_words(
        url=url, token_env=token_env, hook_script=hook_script, interpreter=interpreter
    )
    entries = []
    for event, timeout in GEMINI_EVENTS:
        extra = f" --timeout {CLIENT_TIMEOUTS[event]}" if event in CLIENT_TIMEOUTS else ""
        handler = {
            "type": "command",
            "name": f"signet-{event}",
            "command": f"{command}{extra} gemini",
            "timeout": timeout,
        }
        entries.append((event, handler))
    return entries


def _install(
    settings_path: Path,
    *,
    harness: str,
    url: str,
    token_env: str,
    hook_script: Path,
    interpreter: str | None,
) -> InstallResult:
    build = codex_entries if harness == "codex" else gemini_entries

    def entries(**words: Any) -> list[tuple[str, str | None, dict[str, Any]]]:
        return [(event, None, handler) for event, handler in build(**words)]

    return hooks_merge(
        settings_path,
        entries=entries,
        url=url,
        token_env=token_env,
        hook_script=hook_script,
        interpreter=interpreter,
    )


def install_codex(
    settings_path: Path,
    *,
    url: str = DEFAULT_URL,
    token_env: str = DEFAULT_TOKEN_ENV,
    hook_script: Path = HOOK_SCRIPT,
    interpreter: str | None = None,
) -> InstallResult:
    """Merge Signet's Codex hooks into ``settings_path`` (a hooks.json, created if missing)."""
    return _install(
        settings_path,
        harness="codex",
        url=url,
        token_env=token_env,
        hook_script=hook_script,
        interpreter=interpreter,
    )


def install_gemini(
    settings_path: Path,
    *,
    url: str = DEFAULT_URL,
    token_env: str = DEFAULT_TOKEN_ENV,
    hook_script: Path = HOOK_SCRIPT,
    interpreter: str | None = None,
) -> InstallResult:
    """Merge Signet's Gemini CLI hooks into ``settings_path`` (created if missing)."""
    return _install(
        settings_path,
        harness="gemini",
        url=url,
        token_env=token_env,
        hook_script=hook_script,
        interpreter=interpreter,
    )


def uninstall_harness(settings_path: Path) -> InstallResult:
    """Remove only Signet's hooks from a Codex or Gemini file (same shape as Claude Code's)."""
    return uninstall_claude_code(settings_path)
