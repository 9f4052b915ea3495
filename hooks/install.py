"""Write (or remove) Signet's hooks in a harness's settings file.

Claude Code: ``command`` hooks running ``signet_hook.py`` for every event (the client reads
the transcript on the agent's machine, the server never opening a file a request names; it
queues what it cannot deliver, and queues at once while the server is known not to
answer). The merge
keeps every foreign hook and setting in place, is idempotent (a second run changes no byte and
writes no second backup) and replaces Signet's own entries, found by their URL path or script
name, so re-running it upgrades an older install.
Only the ``$NAME`` of the token's environment variable is written, never its value.

The SessionStart command runs at every session start, so the commands are written for a fast
start:

- a real interpreter by its absolute path: a ``python3`` found on PATH may be a version
  manager's shell-script shim, slower than the whole request;
- ``-S`` (no site-packages: the hook is stdlib-only) and ``-I`` (no ``PYTHON*`` variables, no
  current directory on ``sys.path``: the agent's project cannot stand in for a module);
- the hook imported as a module (``HOOK_BOOTSTRAP``) rather than run as a script: a script is
  compiled on every run, a third of the hook's time, while a module's bytecode is cached in
  ``__pycache__`` (written here, and checked against the source by Python at each import).

Standard library only, so it can also run outside the Django project.
"""

from __future__ import annotations

import contextlib
import json
import os
import py_compile
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TOKEN_ENV = "SIGNET_TOKEN"  # noqa: S105 (the variable's name, not a secret)
DEFAULT_CLAUDE_SETTINGS = "~/.claude/settings.json"
HOOK_SCRIPT = Path(__file__).resolve().with_name("signet_hook.py")

CLAUDE_CODE_PATH = "/api/hooks/claude-code/"
SCRIPT_NAME = "signet_hook.py"
# The command when no real interpreter can be named: whatever the shell finds then.
FALLBACK_INTERPRETER = "python3"
# Run with the hook's path as its first argument, which it takes off argv: the hook then
# sees the same argv as when run as a script.
HOOK_BOOTSTRAP = (
    f'import sys; sys.path.insert(0, sys.argv.pop(1).rpartition("{SCRIPT_NAME}")[0]); '
    "import signet_hook; signet_hook.cli()"
)

# (event, matcher or None for "every", timeout in seconds, handler type), in settings order.
# Every event is a ``command`` hook running the client, none an ``http`` hook that Claude
# Code posts itself: only the client can tell that the server just let a hook wait without
# an answer and queue at once (an http hook waits out its timeout at every prompt and edit,
# and loses the event), and only the client queues what it cannot deliver. The client also
# reads the transcript where it is (the server never opens a file a request names):
# PreCompact sends its facts, Stop the context usage of the turn's last response, and every
# event what the transcript gained since the last one (``transcripts/sync.py``).
# SessionStart could not be an http hook anyway. The timeouts here are Claude Code's last
# resort, past the client's own deadline and its watchdog's grace; SessionEnd's also raises
# Claude Code's shared SessionEnd budget.
CLAUDE_CODE_EVENTS: tuple[tuple[str, str | None, int, str], ...] = (
    ("SessionStart", "startup|resume|clear|compact", 10, "command"),
    ("UserPromptSubmit", None, 5, "command"),
    ("PostToolUse", "Edit|Write|MultiEdit|NotebookEdit", 15, "command"),
    ("PreCompact", None, 10, "command"),
    ("PostCompact", None, 10, "command"),
    ("Stop", None, 10, "command"),
    ("SessionEnd", None, 10, "command"),
)
# What the hook client itself may spend on each event, in seconds (after its own start). A
# healthy server answers within milliseconds; one that has not answered by then is taken for
# hung, and the hooks of the next minute queue without waiting, so a turn loses about one of
# these. PreCompact (the emergency checkpoint, the one the next session depends on) gets
# more, within a compaction's share.
CLIENT_TIMEOUTS = {
    "SessionStart": 0.8,
    "UserPromptSubmit": 0.8,
    "PostToolUse": 0.8,
    "PreCompact": 2.0,
    "PostCompact": 0.8,
    "Stop": 0.8,
    "SessionEnd": 0.8,
}

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class InstallError(Exception):
    """The settings file cannot be changed safely; nothing was written."""


@dataclass
class InstallResult:
    """What an install or uninstall did to one settings file."""

    settings_path: Path
    changed: bool
    created: bool = False
    backup_path: Path | None = None
    installed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    interpreter: str = ""


def validate_url(url: str) -> str:
    """The base URL without its trailing slash; InstallError unless it is http(s)://host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InstallError(f"the URL must look like http://host:port, not {url!r}")
    return url.rstrip("/")


def validate_token_env(name: str) -> str:
    """An environment variable name usable as ``$NAME`` in a header."""
    if not ENV_NAME_RE.match(name):
        raise InstallError(f"{name!r} is not an environment variable name")
    return name


def default_interpreter() -> str:
    """The real binary behind this interpreter, or ``python3`` if there is none to name.

    Resolving symlinks turns a virtualenv's ``python`` into its base interpreter, which runs
    the stdlib-only hook with ``-S`` just as well, and a shim's target into the binary.
    """
    if sys.executable:
        real = os.path.realpath(sys.executable)
        if os.path.isfile(real) and os.access(real, os.X_OK):
            return real
    return FALLBACK_INTERPRETER


def validate_interpreter(interpreter: str) -> str:
    """An interpreter the shell can run: a command name on PATH or an executable's path."""
    if not interpreter or shutil.which(interpreter) is None:
        raise InstallError(f"{interpreter!r} is not an executable (a Python 3.9+ interpreter)")
    return interpreter


def precompile_hook(hook_script: Path = HOOK_SCRIPT) -> None:
    """Cache the hook's bytecode for this interpreter, if its folder can be written.

    Done here as well as by the hook's first import, which cannot write it where the folder
    is read-only for the agent. Without it, the hook still runs, compiled on every start.
    """
    readers = sorted((hook_script.parent / "transcripts").glob("*.py"))
    for source in (hook_script, *readers):
        with contextlib.suppress(OSError, py_compile.PyCompileError):
            py_compile.compile(str(source), doraise=True)


def _double_quoted(text: str) -> str:
    # Inside "..." the shell still expands these four; escaped, the path is taken verbatim.
    return '"' + re.sub(r'(["\\$`])', r"\\\1", text) + '"'


def hook_command(*, url: str, token_env: str, hook_script: Path, interpreter: str) -> str:
    """The hook client's command line up to its harness argument, as a shell string."""
    if hook_script.name != SCRIPT_NAME:
        raise InstallError(f"the hook script must be named {SCRIPT_NAME}, not {hook_script.name}")
    python = interpreter if interpreter == FALLBACK_INTERPRETER else _double_quoted(interpreter)
    return (
        f"{python} -I -S -c {shlex.quote(HOOK_BOOTSTRAP)} {_double_quoted(str(hook_script))} "
        f"--url {shlex.quote(url)} --token-env {token_env}"
    )


def claude_code_entries(
    *, url: str, token_env: str, hook_script: Path, interpreter: str = FALLBACK_INTERPRETER
) -> list[tuple[str, str | None, dict[str, Any]]]:
    """Signet's hooks for Claude Code as ``(event, matcher, handler)``, in settings order."""
    command = hook_command(
        url=url, token_env=token_env, hook_script=hook_script, interpreter=interpreter
    )
    entries: list[tuple[str, str | None, dict[str, Any]]] = []
    for event, matcher, timeout, kind in CLAUDE_CODE_EVENTS:
        handler: dict[str, Any]
        if kind == "command":
            client_timeout = CLIENT_TIMEOUTS.get(event)
            extra = f" --timeout {client_timeout}" if client_timeout else ""
            handler = {
                "type": "command",
                "command": f"{command}{extra} claude-code",
                "timeout": timeout,
            }
        else:
            handler = {
                "type": "http",
                "url": f"{url}{CLAUDE_CODE_PATH}",
                "timeout": timeout,
                "headers": {"Authorization": f"Bearer ${token_env}"},
                "allowedEnvVars": [token_env],
            }
        entries.append((event, matcher, handler))
    return entries


def is_signet_handler(handler: Any) -> bool:
    """Whether a hook handler is one of Signet's (from any URL or install location)."""
    if not isinstance(handler, dict):
        return False
    url = handler.get("url")
    if handler.get("type") == "http" and isinstance(url, str):
        return urlsplit(url).path.endswith(CLAUDE_CODE_PATH)
    command = handler.get("command")
    args = handler.get("args")
    words = [command] + (args if isinstance(args, list) else [])
    return handler.get("type") == "command" and any(
        isinstance(word, str) and SCRIPT_NAME in word for word in words
    )


def _remove_signet(hooks: dict[str, Any]) -> dict[str, int]:
    """Take Signet's handlers out of ``hooks`` in place, dropping the groups this empties.

    Returns, per event touched, the index of the first group Signet's handlers were in, so
    that a reinstall puts them back at the same place (and the file does not change).
    """
    positions: dict[str, int] = {}
    for event, groups in hooks.items():
        kept_groups: list[Any] = []
        for group in groups:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(handlers, list) or not any(map(is_signet_handler, handlers)):
                kept_groups.append(group)
                continue
            positions.setdefault(event, len(kept_groups))
            foreign = [handler for handler in handlers if not is_signet_handler(handler)]
            if foreign:
                kept_groups.append({**group, "hooks": foreign})
        groups[:] = kept_groups
    return positions


def _load(settings_path: Path) -> tuple[dict[str, Any], bytes | None]:
    try:
        raw = settings_path.read_bytes()
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        raise InstallError(f"cannot read {settings_path}: {exc.strerror}") from exc
    if not raw.strip():
        return {}, raw
    try:
        settings = json.loads(raw)
    except ValueError as exc:
        raise InstallError(
            f"{settings_path} is not valid JSON ({exc}); fix it first, nothing was changed"
        ) from exc
    if not isinstance(settings, dict):
        raise InstallError(f"{settings_path} does not hold a JSON object; nothing was changed")
    hooks = settings.get("hooks", {})
    # Claude Code would reject these too; rewriting them could lose what the user meant.
    if not isinstance(hooks, dict) or not all(isinstance(g, list) for g in hooks.values()):
        raise InstallError(
            f'"hooks" in {settings_path} is not an object of lists; nothing was changed'
        )
    return settings, raw


def _mode_of(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        return 0o600


def _backup(settings_path: Path, raw: bytes) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for attempt in range(1000):
        suffix = f".signet-backup-{stamp}" + (f"-{attempt}" if attempt else "")
        backup = settings_path.with_name(settings_path.name + suffix)
        try:
            # O_EXCL: two runs in the same second must not overwrite the first backup. The
            # original's mode: a settings file kept private (~/.claude.json holds other
            # servers' secrets) must not leave a readable copy beside it.
            fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _mode_of(settings_path))
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
        return backup
    raise InstallError(f"too many backups of {settings_path} this second")


def _write_atomically(settings_path: Path, data: bytes) -> None:
    settings_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = settings_path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o600
    # Temp file in the same directory + os.replace: Claude Code reads either the old or the
    # new file, never half of one, even if this process dies midway.
    fd, temp = tempfile.mkstemp(dir=settings_path.parent, prefix=f".{settings_path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, settings_path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _dump(settings: dict[str, Any]) -> bytes:
    return (json.dumps(settings, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _save(settings_path: Path, settings: dict[str, Any], raw: bytes | None) -> InstallResult:
    data = _dump(settings)
    result = InstallResult(settings_path=settings_path, changed=data != raw, created=raw is None)
    if result.changed:
        if raw is not None:
            result.backup_path = _backup(settings_path, raw)
        _write_atomically(settings_path, data)
    return result


def _target(settings_path: Path) -> Path:
    # Settings files are often symlinks into a dotfiles repository: write through the link
    # rather than replacing it with a plain file.
    return settings_path.expanduser().resolve()


Entries = Callable[..., list[tuple[str, str | None, dict[str, Any]]]]


def hooks_merge(
    settings_path: Path,
    *,
    entries: Entries,
    url: str,
    token_env: str,
    hook_script: Path,
    interpreter: str | None,
) -> InstallResult:
    """Merge the hooks ``entries(url=…, token_env=…, hook_script=…, interpreter=…)`` lists as
    ``(event, matcher, handler)`` into a settings file of Claude Code's shape (``{"hooks":
    {Event: [{matcher?, hooks: [...]}]}}``, which Codex and Gemini CLI share): Signet's old
    entries are replaced in place, everything else is kept, events no longer used go."""
    url = validate_url(url)
    token_env = validate_token_env(token_env)
    python = default_interpreter() if interpreter is None else validate_interpreter(interpreter)
    path = _target(settings_path)
    settings, raw = _load(path)
    hooks: dict[str, Any] = settings.setdefault("hooks", {})
    positions = _remove_signet(hooks)
    wanted = entries(url=url, token_env=token_env, hook_script=hook_script, interpreter=python)
    for event, matcher, handler in wanted:
        group: dict[str, Any] = {"matcher": matcher} if matcher is not None else {}
        group["hooks"] = [handler]
        groups = hooks.setdefault(event, [])
        groups.insert(positions.get(event, len(groups)), group)
    wanted_events = {event for event, _, _ in wanted}
    # Events a former version installed that this one no longer uses.
    stale = [event for event in positions if event not in wanted_events and not hooks[event]]
    for event in stale:
        del hooks[event]
    result = _save(path, settings, raw)
    result.installed = [event for event, _, _ in wanted]
    result.removed = sorted(positions)
    result.interpreter = python
    precompile_hook(hook_script)
    return result


def install_claude_code(
    settings_path: Path,
    *,
    url: str = DEFAULT_URL,
    token_env: str = DEFAULT_TOKEN_ENV,
    hook_script: Path = HOOK_SCRIPT,
    interpreter: str | None = None,
) -> InstallResult:
    """Merge Signet's Claude Code hooks into ``settings_path`` (created if missing).

    ``interpreter`` runs the command hooks, written as given; by default the real binary
    behind the interpreter running this (see ``default_interpreter``).
    """
    return hooks_merge(
        settings_path,
        entries=claude_code_entries,
        url=url,
        token_env=token_env,
        hook_script=hook_script,
        interpreter=interpreter,
    )


def uninstall_claude_code(settings_path: Path) -> InstallResult:
    """Remove only Signet's hooks from ``settings_path``, dropping what that leaves empty."""
    path = _target(settings_path)
    settings, raw = _load(path)
    if raw is None:
        return InstallResult(settings_path=path, changed=False)
    hooks = settings.get("hooks")
    positions = _remove_signet(hooks) if isinstance(hooks, dict) else {}
    if isinstance(hooks, dict):
        for event in positions:
            if not hooks[event]:
                del hooks[event]
        if positions and not hooks:
            del settings["hooks"]
    result = _save(path, settings, raw) if positions else InstallResult(path, changed=False)
    result.removed = sorted(positions)
    return result
