#!/usr/bin/env python3
"""Forward one harness hook event to Signet Continuity; never break the agent.

Usage (Claude Code runs it as a ``command`` hook, the payload JSON on stdin)::

    python3 hooks/signet_hook.py [--url URL] [--token-env NAME] [--timeout SECONDS]
                                 [--outbox PATH] claude-code

It POSTs the payload to ``{url}/api/hooks/{harness}/`` with the bearer token read from the
environment variable named by ``--token-env``, and prints the server's JSON reply (what the
harness expects on stdout, e.g. ``{"hookSpecificOutput": {...}}``) or nothing at all.

Fail-open: whatever happens (server down, bad input, missing token, a bug here), the exit
code is 0, stdout holds a JSON object or nothing, and stderr at most one short line.
Events that could not be delivered go to an outbox (one JSON line each) and are replayed,
with their original idempotency key, after the next successful delivery.

Standard library only and Python 3.9+: it runs with whatever ``python3`` the machine has.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, NoReturn

if sys.platform != "win32":
    import fcntl

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TOKEN_ENV = "SIGNET_TOKEN"  # noqa: S105 (the variable's name, not a secret)
DEFAULT_TIMEOUT = 4.0
DEFAULT_OUTBOX = "~/.signet/outbox.jsonl"
USER_AGENT = "signet-hook/1"

# The outbox only grows while the server is unreachable; these keep a long outage from
# filling the disk (PostToolUse payloads carry whole file contents). The oldest go first.
OUTBOX_MAX_ENTRIES = 1000
OUTBOX_MAX_BYTES = 32 * 1024 * 1024
# Claude Code caps hook output at 10,000 characters; anything far larger is not a reply.
MAX_RESPONSE_BYTES = 1024 * 1024
# Below this much time left, a request cannot finish: stop instead of half-sending.
MIN_REQUEST_SECONDS = 0.2
# The watchdog fires this long after the deadline: a last resort for what socket timeouts
# do not bound, never the normal way out.
WATCHDOG_GRACE_SECONDS = 1.0
# Outbox appends wait at most this long for another hook's brief rewrite to finish.
APPEND_LOCK_WAIT_SECONDS = 1.0
GIT_MAX_LEVELS = 64
PACKED_REFS_MAX_BYTES = 1024 * 1024

HARNESS_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
SHA_RE = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


class HookError(Exception):
    """A problem worth one line on stderr; the hook still exits 0."""


class _Parser(argparse.ArgumentParser):
    # argparse exits with code 2 on a bad option, which Claude Code reports as a hook error.
    def error(self, message: str) -> NoReturn:
        raise HookError(f"usage: {message}")


@dataclass(frozen=True)
class Options:
    """What the command line and the environment decided."""

    url: str
    harness: str
    token_env: str
    timeout: float
    outbox: Path

    @property
    def endpoint(self) -> str:
        return f"{self.url}/api/hooks/{self.harness}/"


@dataclass(frozen=True)
class Delivery:
    """The outcome of one POST: ``status`` is None when no HTTP answer came back."""

    status: int | None
    body: bytes = b""
    error: str = ""

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def retryable(self) -> bool:
        # Connection errors, timeouts, overload and server errors may pass later. Any other
        # answer (a 4xx such as 400 or 401, or a redirect) would fail the same way forever,
        # so such an event is dropped rather than queued.
        return self.status is None or self.status == 429 or self.status >= 500

    def describe(self) -> str:
        return self.error if self.status is None else f"HTTP {self.status}"


class Deadline:
    """The overall time budget of this run, shared by every request it makes."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(0.0, self.end - time.monotonic())


def parse_args(argv: list[str] | None) -> Options:
    """Options from ``argv``, with ``SIGNET_*`` environment variables as fallbacks."""
    parser = _Parser(
        prog="signet_hook.py", description="Forward one harness hook event to Signet Continuity."
    )
    parser.add_argument("harness", help="Harness name, e.g. claude-code.")
    parser.add_argument("--url", help=f"Server base URL (env SIGNET_URL; {DEFAULT_URL}).")
    parser.add_argument(
        "--token-env",
        default=DEFAULT_TOKEN_ENV,
        help=f"Environment variable holding the bearer token ({DEFAULT_TOKEN_ENV}).",
    )
    parser.add_argument(
        "--timeout",
        help=f"Overall deadline in seconds (env SIGNET_HOOK_TIMEOUT; {DEFAULT_TIMEOUT}).",
    )
    parser.add_argument("--outbox", help=f"Outbox file (env SIGNET_OUTBOX; {DEFAULT_OUTBOX}).")
    args = parser.parse_args(argv)

    if not HARNESS_RE.match(args.harness):
        raise HookError(f"invalid harness name {args.harness!r}")
    url = (args.url or os.environ.get("SIGNET_URL") or DEFAULT_URL).rstrip("/")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise HookError(f"--url must be an http(s) URL, not {url!r}")
    raw_timeout = args.timeout or os.environ.get("SIGNET_HOOK_TIMEOUT") or ""
    try:
        timeout = float(raw_timeout) if raw_timeout else DEFAULT_TIMEOUT
    except ValueError:
        timeout = DEFAULT_TIMEOUT
    if not 0 < timeout <= 600:
        timeout = DEFAULT_TIMEOUT
    outbox = Path(
        os.path.expanduser(args.outbox or os.environ.get("SIGNET_OUTBOX") or DEFAULT_OUTBOX)
    )
    return Options(
        url=url, harness=args.harness, token_env=args.token_env, timeout=timeout, outbox=outbox
    )


def read_payload(stream: IO[bytes]) -> dict[str, Any]:
    """The hook payload: a JSON object, or HookError."""
    try:
        payload = json.loads(stream.read())
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
        raise HookError("stdin is not JSON") from exc
    if not isinstance(payload, dict):
        raise HookError("stdin is not a JSON object")
    return payload


# --- what only the client machine can know ------------------------------------------------


def _read_text(path: Path, limit: int = 4096) -> str:
    with path.open("rb") as handle:
        return handle.read(limit).decode("utf-8", "replace").strip()


def find_git_root(start: str) -> tuple[Path, Path] | None:
    """``(worktree root, git dir)`` of the repository holding ``start``, without running git."""
    current = Path(start)
    for _ in range(GIT_MAX_LEVELS):
        dot_git = current / ".git"
        if dot_git.is_dir():
            return current, dot_git
        if dot_git.is_file():
            # Worktrees and submodules: ".git" is a file "gitdir: <path>", relative to it.
            content = _read_text(dot_git)
            if content.startswith("gitdir:"):
                git_dir = Path(content[len("gitdir:") :].strip())
                return current, (current / git_dir).resolve()
            return None
        if current.parent == current:
            return None
        current = current.parent
    return None


def _common_dir(git_dir: Path) -> Path:
    # A linked worktree keeps its own HEAD but shares refs with the main repository, named
    # by its "commondir" file.
    commondir = git_dir / "commondir"
    if commondir.is_file():
        return (git_dir / _read_text(commondir)).resolve()
    return git_dir


def _resolve_ref(git_dir: Path, ref: str) -> str | None:
    if ".." in ref.split("/"):
        return None
    common = _common_dir(git_dir)
    for base in dict.fromkeys((git_dir, common)):
        ref_file = base / ref
        if ref_file.is_file():
            sha = _read_text(ref_file, 128)
            return sha if SHA_RE.match(sha) else None
    packed = common / "packed-refs"
    if packed.is_file() and packed.stat().st_size <= PACKED_REFS_MAX_BYTES:
        for line in packed.read_text("utf-8", "replace").splitlines():
            sha, _, name = line.partition(" ")
            if name.strip() == ref and SHA_RE.match(sha):
                return sha
    return None


def git_state(git_dir: Path) -> dict[str, str]:
    """``git_branch`` and ``git_head`` from HEAD; a field that cannot be read is left out."""
    head = _read_text(git_dir / "HEAD", 512)
    if head.startswith("ref:"):
        ref = head[len("ref:") :].strip()
        state = {"git_branch": ref[len("refs/heads/") :] if ref.startswith("refs/heads/") else ref}
        sha = _resolve_ref(git_dir, ref)
        if sha:
            state["git_head"] = sha
        return state
    if SHA_RE.match(head):
        return {"git_branch": "", "git_head": head}
    return {}


def client_context(payload: dict[str, Any]) -> dict[str, str]:
    """The ``signet`` object: the normalised project path and git state of the payload's cwd.

    Cheap file reads only (no git subprocess: the hook is on the agent's hot path). Every
    field is best-effort; one that fails is simply absent.
    """
    context: dict[str, str] = {}
    cwd = payload.get("cwd")
    if not isinstance(cwd, str) or not cwd:
        return context
    try:
        project = os.path.realpath(cwd)
        context["project_normalized"] = project
        found = find_git_root(project)
        if found is not None:
            root, git_dir = found
            context["git_root"] = str(root)
            context.update(git_state(git_dir))
    except (OSError, ValueError):
        pass  # best-effort: keep whatever was found before the failure
    return context


# --- HTTP -----------------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A followed redirect would turn the POST into a GET without its body: report the 3xx.
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _opener(url: str) -> urllib.request.OpenerDirector:
    handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
    host = urllib.parse.urlsplit(url).hostname or ""
    if host in ("localhost", "::1") or host.startswith("127."):
        # A corporate HTTP(S)_PROXY must not swallow requests to the local service.
        handlers.append(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(*handlers)


def post_event(url: str, body: bytes, *, token: str, key: str, timeout: float) -> Delivery:
    """POST one event; never raises for network or HTTP failures."""
    request = urllib.request.Request(  # noqa: S310 (the scheme was checked: http or https)
        url,
        data=body,
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Idempotency-Key": key,
            "User-Agent": USER_AGENT,
        },
    )
    try:
        with _opener(url).open(request, timeout=timeout) as response:
            return Delivery(status=response.status, body=response.read(MAX_RESPONSE_BYTES + 1))
    except urllib.error.HTTPError as exc:
        exc.close()
        return Delivery(status=exc.code)
    except urllib.error.URLError as exc:
        return Delivery(status=None, error=f"server unreachable ({exc.reason})")
    except (OSError, ValueError) as exc:  # timeouts, resets, http.client's protocol errors
        return Delivery(status=None, error=f"server unreachable ({type(exc).__name__})")


def emit_reply(body: bytes, stdout: IO[bytes]) -> None:
    """Print the server's reply if it is a JSON object, the only stdout the harness wants."""
    if not body.strip() or len(body) > MAX_RESPONSE_BYTES:
        return
    try:
        reply = json.loads(body)
    except ValueError:
        return
    if isinstance(reply, dict):
        stdout.write(body)
        # Flushed now: the replay that follows may be cut short by the watchdog's _exit.
        stdout.flush()


# --- outbox ---------------------------------------------------------------------------------
# Two sibling lock files. "<outbox>.lock" guards every read-modify-write of the file and is
# held for milliseconds; "<outbox>.replay.lock" is held for a whole replay, so that only one
# hook sends queued events at a time while others can still append their own.


def _lock_path(outbox: Path, suffix: str) -> Path:
    return outbox.with_name(outbox.name + suffix)


@contextlib.contextmanager
def _locked(path: Path, *, wait: float) -> Iterator[bool]:
    """Hold an exclusive lock on ``path`` if it can be had within ``wait`` seconds.

    Yields whether the lock is held; closing the descriptor releases it.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        yield _try_lock(fd, wait)
    finally:
        os.close(fd)


def _try_lock(fd: int, wait: float) -> bool:
    if sys.platform == "win32":
        # No fcntl: run unlocked. Replays may then overlap, which the idempotency keys make
        # harmless; a rewrite racing an append may lose that one queued event.
        return True
    give_up = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            if time.monotonic() >= give_up:
                return False
            time.sleep(0.01)


def _ensure_dir(directory: Path) -> None:
    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        # The outbox holds prompts and file contents: private to the user.
        directory.chmod(0o700)


def _read_lines(outbox: Path) -> list[bytes]:
    try:
        return outbox.read_bytes().splitlines(keepends=True)
    except FileNotFoundError:
        return []


def _parse_entry(line: bytes) -> dict[str, Any] | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None  # a line cut short by a killed process: dropped at the next rewrite
    if (
        isinstance(entry, dict)
        and isinstance(entry.get("key"), str)
        and isinstance(entry.get("url"), str)
        and isinstance(entry.get("body"), dict)
    ):
        return entry
    return None


def _rewrite(outbox: Path, lines: list[bytes]) -> None:
    # Temp file + rename: a reader (or a crash) never sees a half-written outbox.
    fd, temp = tempfile.mkstemp(dir=outbox.parent, prefix=f".{outbox.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.writelines(lines)
        os.replace(temp, outbox)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _bounded(lines: list[bytes]) -> list[bytes]:
    """The newest lines within both caps, corrupt ones left out."""
    kept: list[bytes] = []
    size = 0
    for line in reversed(lines):
        if _parse_entry(line) is None:
            continue
        size += len(line)
        if len(kept) >= OUTBOX_MAX_ENTRIES or size > OUTBOX_MAX_BYTES:
            break
        kept.append(line if line.endswith(b"\n") else line + b"\n")
    kept.reverse()
    return kept


def outbox_append(outbox: Path, entry: dict[str, Any]) -> None:
    """Queue one undelivered event, keeping the outbox bounded (the oldest go first)."""
    _ensure_dir(outbox.parent)
    line = json.dumps(entry, separators=(",", ":")).encode("ascii") + b"\n"
    with _locked(_lock_path(outbox, ".lock"), wait=APPEND_LOCK_WAIT_SECONDS):
        # Go on even without the lock (another hook kept it): appending risks losing this
        # event to a concurrent rewrite; giving up loses it for certain.
        lines = _read_lines(outbox)
        if len(lines) >= OUTBOX_MAX_ENTRIES or sum(map(len, lines)) + len(line) > OUTBOX_MAX_BYTES:
            _rewrite(outbox, _bounded([*lines, line]))
            return
        if lines and not lines[-1].endswith(b"\n"):
            line = b"\n" + line  # never glue onto a line that a killed process cut short
        fd = os.open(outbox, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(line)


def outbox_replay(outbox: Path, *, url: str, token: str, deadline: Deadline) -> int:
    """Resend queued events for ``url``, oldest first, within the deadline.

    Each keeps its original idempotency key, so one the server already has is not counted
    twice. Delivered and permanently refused entries leave the outbox; the rest stay.
    Returns how many were delivered. Skipped when another hook is replaying.
    """
    if not outbox.is_file() or outbox.stat().st_size == 0:
        return 0
    with _locked(_lock_path(outbox, ".replay.lock"), wait=0) as replaying:
        if not replaying:
            return 0
        # Reading is safe even without this lock (rewrites are atomic renames); it only
        # avoids reading while an append is half-written.
        with _locked(_lock_path(outbox, ".lock"), wait=min(1.0, deadline.remaining())):
            entries = [entry for entry in map(_parse_entry, _read_lines(outbox)) if entry]
        done: set[str] = set()
        delivered = 0
        for entry in entries:
            # Entries for another server wait for a hook that reaches that server.
            if entry["url"] != url:
                continue
            if deadline.remaining() < MIN_REQUEST_SECONDS:
                break
            result = post_event(
                url,
                json.dumps(entry["body"]).encode("ascii"),
                token=token,
                key=entry["key"],
                timeout=deadline.remaining(),
            )
            if result.delivered:
                delivered += 1
                done.add(entry["key"])
            elif not result.retryable:
                done.add(entry["key"])
            elif result.status in (None, 429, 503):
                break  # the server went away or asks to slow down; a 500 may be this entry
        if done:
            with _locked(_lock_path(outbox, ".lock"), wait=min(1.0, deadline.remaining())) as ok:
                # Without the lock, leave the file alone: the entries are resent next time
                # and the server ignores their keys.
                if ok:
                    kept = [
                        line
                        for line in _read_lines(outbox)
                        if (parsed := _parse_entry(line)) is None or parsed["key"] not in done
                    ]
                    _rewrite(outbox, _bounded(kept))
        return delivered


# --- main -----------------------------------------------------------------------------------


def _warn(message: str) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(f"signet-hook: {message}\n")
        sys.stderr.flush()


class Watchdog:
    """Exit 0 at a hard deadline, whatever the main thread is stuck in.

    Socket timeouts bound each read, not a server that trickles bytes, and nothing bounds a
    DNS look-up; Claude Code must never wait on this hook. A thread, not SIGALRM: a signal
    handler only runs once the blocking C call returns. If the live event is still in
    flight, it is queued first (``on_expiry``).
    """

    def __init__(self, seconds: float) -> None:
        self.on_expiry: Callable[[], None] | None = None
        timer = threading.Timer(seconds, self._expire)
        timer.daemon = True
        timer.start()

    def _expire(self) -> None:
        callback = self.on_expiry
        if callback is not None:
            with contextlib.suppress(Exception):
                callback()
        with contextlib.suppress(OSError):
            os.write(2, b"signet-hook: deadline reached\n")
        os._exit(0)


def outbox_entry(options: Options, key: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The outbox line for an undelivered event."""
    queued_at = datetime.now(timezone.utc).isoformat(timespec="seconds")  # noqa: UP017 (3.9+)
    # The time it happened travels with the event: a replay may come hours later.
    body = {**payload, "signet": {**payload.get("signet", {}), "queued_at": queued_at}}
    return {
        "key": key,
        "url": options.endpoint,
        "harness": options.harness,
        "body": body,
        "queued_at": queued_at,
    }


def run(argv: list[str] | None, *, stdin: IO[bytes], stdout: IO[bytes], watchdog: bool) -> str:
    """Do the work; returns the one line to report on stderr ("" for none)."""
    options = parse_args(argv)
    deadline = Deadline(options.timeout)
    guard = Watchdog(options.timeout + WATCHDOG_GRACE_SECONDS) if watchdog else None
    if stdin.isatty():
        return "no payload on stdin"
    payload = read_payload(stdin)
    token = os.environ.get(options.token_env, "").strip()
    if not token:
        # Not queued: without a token the server can only refuse it, like any 401.
        return f"${options.token_env} is not set; event not sent"

    signet = payload.get("signet")
    payload["signet"] = {**(signet if isinstance(signet, dict) else {}), **client_context(payload)}
    key = uuid.uuid4().hex

    def queue() -> None:
        outbox_append(options.outbox, outbox_entry(options, key, payload))

    if guard is not None:
        guard.on_expiry = queue
    body = json.dumps(payload).encode("ascii")
    result = post_event(options.endpoint, body, token=token, key=key, timeout=deadline.remaining())
    if guard is not None:
        guard.on_expiry = None
    if result.delivered:
        emit_reply(result.body, stdout)
        outbox_replay(options.outbox, url=options.endpoint, token=token, deadline=deadline)
        return ""
    if not result.retryable:
        return f"the server refused the event ({result.describe()}); not queued"
    queue()
    return f"{result.describe()}; event queued in {options.outbox}"


def main(argv: list[str] | None = None, *, watchdog: bool = False) -> int:
    """Entry point; always 0 (fail-open). ``watchdog`` arms the hard stop (as a script)."""
    try:
        message = run(argv, stdin=sys.stdin.buffer, stdout=sys.stdout.buffer, watchdog=watchdog)
    except HookError as exc:
        message = str(exc)
    except SystemExit:
        message = ""  # --help
    except BaseException as exc:  # fail-open: not even a bug may reach the agent as an error
        message = f"internal error ({type(exc).__name__})"
    if message:
        _warn(message)
    return 0


if __name__ == "__main__":
    sys.exit(main(watchdog=True))
