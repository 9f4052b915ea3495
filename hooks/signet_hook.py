#!/usr/bin/env python3
"""Forward one harness hook event to Signet Continuity; never break the agent.

Usage (Claude Code runs it as a ``command`` hook, the payload JSON on stdin)::

    python3 -S hooks/signet_hook.py [--url URL] [--token-env NAME] [--timeout SECONDS]
                                    [--outbox PATH] claude-code

(The installer writes it as an import of this module, through ``cli()``, so that its cached
bytecode is used: see ``hooks/install.py``.) With ``--notify`` it is Codex's legacy ``notify``
program instead: the payload is its last argument (``... --notify codex '{json}'``).

It POSTs the payload to ``{url}/api/hooks/{harness}/`` with the bearer token read from the
environment variable named by ``--token-env``, and prints the server's JSON reply (what the
harness expects on stdout, e.g. ``{"hookSpecificOutput": {...}}``) or nothing at all.
It adds a ``signet`` object of what only this machine can know: the project's real path, git
top-level, branch and head, with PreCompact the facts of the transcript's tail and with
Stop its context usage (``transcripts/claude_code.py``; Codex's PreCompact and Gemini's
PreCompress: ``transcripts/codex.py``, ``gemini.py``): the server never opens a file a
request names. With every Claude Code event it also sends what the transcript gained since
the session's previous one (``transcripts/sync.py``): what Claude Code's own ``http`` hooks
carried, which an outage loses.

Fail-open: whatever happens (server down, bad input, missing token, a bug here), the exit
code is 0, stdout holds a JSON object or nothing, and stderr at most one short line.
Events that could not be delivered go to an outbox (one JSON line each, with the time they
were queued) and are replayed, oldest first with their original idempotency key, by the next
run, before its own event; while the server cannot take them, that event queues behind them.
A server that let a hook wait out its deadline without an answer (hung, not refusing) is
marked so for a minute, and the hooks that run meanwhile queue their events without waiting.

Standard library only and Python 3.9+: it runs with whatever interpreter the machine has
(the installer names a real one by its absolute path, with ``-S``: no site-packages needed).

It runs before every session starts, so its own start-up is most of its cost. The common
path imports only os, time and C modules (_socket, _thread, _json): the json, socket,
threading, argparse, uuid and urllib modules each pull in enum, re, functools or email,
which take longer than the request itself. Plain ``http://`` is spoken over a socket here;
https, proxies, --help, the outbox and git helpers import what they need when they run.
"""

from __future__ import annotations

import _socket
import _thread
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import IO, Any, NoReturn

    StrPath = str | os.PathLike[str]

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TOKEN_ENV = "SIGNET_TOKEN"  # noqa: S105 (the variable's name, not a secret)
DEFAULT_TIMEOUT = 4.0
MAX_ENV_TIMEOUT = 8.0
DEFAULT_OUTBOX = "~/.signet/outbox.jsonl"
USER_AGENT = "signet-hook/1"

# The outbox only grows while the server is unreachable; these keep a long outage from
# filling the disk (PostToolUse payloads carry whole file contents). The oldest go first.
OUTBOX_MAX_ENTRIES = 1000
OUTBOX_MAX_BYTES = 32 * 1024 * 1024
# Claude Code caps hook output at 10,000 characters; anything far larger is not a reply.
MAX_RESPONSE_BYTES = 1024 * 1024
# What a misbehaving server can make the client buffer before the body (as http.client).
MAX_HEADER_LINE = 65536
MAX_HEADERS = 100
# Below this much time left, a request cannot finish: stop instead of half-sending.
MIN_REQUEST_SECONDS = 0.2
# The watchdog fires this long after the deadline: a last resort for what socket timeouts
# do not bound, never the normal way out.
WATCHDOG_GRACE_SECONDS = 1.0
# Replaying the outbox (before the live event) may use this share of the time left, or,
# while the server answers, up to REPLAY_SECONDS: each answer gives the next request the
# hook's whole timeout again, and the live event its whole timeout after the replay.
REPLAY_SHARE = 0.5
REPLAY_SECONDS = 2.0
# A replayed request that got no answer in time (or a proxy's 502 or 504: it gave up
# waiting) may still be carried out: the live event is then queued behind it, not sent.
_IN_FLIGHT = (None, 502, 504)
# ...at most this many times for one entry, which then no longer holds the others back.
MAX_REPLAY_STALLS = 3
# Outbox appends wait at most this long for another hook's brief rewrite to finish.
APPEND_LOCK_WAIT_SECONDS = 1.0
# A server that let a hook wait out its deadline without an answer is taken for hung this
# long: the hooks that run meanwhile queue their events at once instead of waiting in turn
# (the marker is ``<outbox>.down``, holding the endpoint). A refused connection costs no
# wait, so it marks nothing: the next hook tries again and finds the server as soon as it
# is back.
DOWN_SECONDS = 60.0
# ...only a request that was given this long, though: one sent with a sliver of the deadline
# left (after a long replay) proves nothing.
HUNG_SECONDS = 0.25
# A body takes time to send and to read on the server's side beyond the wait for an answer:
# a big edit's (Claude Code's PostToolUse of a Write carries the file twice) gets a second
# more per this many bytes, up to BODY_MAX_EXTRA_SECONDS, before the server counts as hung.
BODY_BYTES_PER_SECOND = 2 * 1024 * 1024
BODY_MAX_EXTRA_SECONDS = 10.0
# The session start right after a compaction (Claude-style ``SessionStart`` with ``source``
# ``compact``) carries the recovery the agent needs most: it may wait this long, as the
# PreCompact before it may. A hung server already marked by that PreCompact costs it nothing.
COMPACT_START_SECONDS = 2.0
GIT_MAX_LEVELS = 64
PACKED_REFS_MAX_BYTES = 1024 * 1024

# Character sets instead of regular expressions: importing re costs more than the request.
_HARNESS_FIRST = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_HARNESS_CHARS = _HARNESS_FIRST | frozenset("_-")
_SHA_CHARS = frozenset("0123456789abcdef")
_KEY_PUNCTUATION = frozenset("._:@+=~-")
_JSON_SPACE = " \t\n\r"  # what the json package skips around a document


class HookError(Exception):
    """A problem worth one line on stderr; the hook still exits 0."""


class Options:
    """What the command line and the environment decided."""

    __slots__ = ("harness", "outbox", "timeout", "token_env", "url")

    def __init__(
        self, *, url: str, harness: str, token_env: str, timeout: float, outbox: str
    ) -> None:
        self.url = url
        self.harness = harness
        self.token_env = token_env
        self.timeout = timeout
        self.outbox = outbox

    @property
    def endpoint(self) -> str:
        return f"{self.url}/api/hooks/{self.harness}/"


class Delivery:
    """The outcome of one POST: ``status`` is None when no HTTP answer came back, and
    ``timed_out`` says the client waited out its time for one."""

    __slots__ = ("body", "error", "status", "timed_out")

    def __init__(
        self, status: int | None, body: bytes = b"", error: str = "", *, timed_out: bool = False
    ) -> None:
        self.status = status
        self.body = body
        self.error = error
        self.timed_out = timed_out

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


# --- JSON -----------------------------------------------------------------------------------
# The json package's own C accelerator, driven with json.loads/json.dumps' defaults: the
# same documents in, the same text out, without the package's import of re. Anything it
# does not take goes to the json package, so every result and every error is json's.


_JSON_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _JSONDefaults:
    """json.loads' decoder settings, as the attributes the C scanner reads."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _JSON_CONSTANTS.__getitem__


def _scan(data: bytes) -> tuple[Any] | None:
    try:
        import _json

        text = data.decode("utf-8")
        start = len(text) - len(text.lstrip(_JSON_SPACE))
        # The context is duck-typed: the scanner only reads the attributes above.
        value, end = _json.make_scanner(_JSONDefaults)(text, start)  # type: ignore[arg-type]
    except Exception:
        return None  # not a verdict: json.loads decides (other encodings, BOMs, errors)
    return None if text[end:].strip(_JSON_SPACE) else (value,)


def _loads(data: bytes) -> Any:
    """``json.loads(data)``."""
    scanned = _scan(data)
    if scanned is not None:
        return scanned[0]
    import json

    return json.loads(data)


def _not_serializable(value: object) -> NoReturn:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _dumps(value: Any, *, compact: bool = False) -> str:
    """``json.dumps(value)``, or with ``separators=(",", ":")`` when ``compact``."""
    item_separator, key_separator = (",", ":") if compact else (", ", ": ")
    try:
        import _json

        encode = _json.make_encoder(
            {},  # markers: detect cycles, as check_circular does
            _not_serializable,
            _json.encode_basestring_ascii,
            None,
            key_separator,
            item_separator,
            False,  # sort_keys
            False,  # skipkeys
            True,  # allow_nan
        )
        chunks = encode(value, 0)
    except Exception:
        import json

        return json.dumps(value, separators=(item_separator, key_separator))
    return "".join(chunks)


# --- command line ---------------------------------------------------------------------------

_OPTION_NAMES = {
    "--url": "url",
    "--token-env": "token_env",
    "--timeout": "timeout",
    "--outbox": "outbox",
}


def _split_argv(argv: list[str]) -> dict[str, str] | None:
    """The options and the harness of a plain command line; None for anything else.

    Only the forms the installer writes (and ``--option=value``) are read here; --help,
    abbreviations, ``--`` and every mistake go to argparse, which decides them.
    """
    found: dict[str, str] = {}
    args = iter(argv)
    for arg in args:
        if not arg.startswith("-"):
            if "harness" in found:
                return None
            found["harness"] = arg
            continue
        name, equals, value = arg.partition("=")
        dest = _OPTION_NAMES.get(name)
        if dest is None:
            return None
        if not equals:
            following = next(args, None)
            if following is None or following.startswith("-"):
                return None
            value = following
        found[dest] = value
    return found if "harness" in found else None


def _argparse(argv: list[str]) -> dict[str, str | None]:
    import argparse

    class Parser(argparse.ArgumentParser):
        # argparse exits with code 2 on a bad option: Claude Code reports that as an error.
        def error(self, message: str) -> NoReturn:
            raise HookError(f"usage: {message}")

    parser = Parser(
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
        help=(
            f"Wait for the server, seconds (env SIGNET_HOOK_TIMEOUT, at most {MAX_ENV_TIMEOUT:g}; "
            f"{DEFAULT_TIMEOUT})."
        ),
    )
    parser.add_argument("--outbox", help=f"Outbox file (env SIGNET_OUTBOX; {DEFAULT_OUTBOX}).")
    return vars(parser.parse_args(argv))


def _is_harness(name: str) -> bool:
    # ^[a-z0-9][a-z0-9_-]{0,63}$, and no trailing newline either.
    return 0 < len(name) <= 64 and name[0] in _HARNESS_FIRST and _HARNESS_CHARS.issuperset(name)


def _split_url(url: str) -> tuple[str, str, str] | None:
    """``(scheme, netloc, rest)`` of a plain URL; None for one that urlsplit must judge.

    Plain: ASCII, printable, no spaces, ``scheme://`` and no IPv6 brackets. For these
    urlsplit gives the same scheme (lowercased) and netloc.
    """
    scheme, separator, rest = url.partition("://")
    if not separator or not url.isascii() or not url.isprintable() or " " in url:
        return None
    end = len(rest)
    for mark in "/?#":
        found = rest.find(mark)
        if 0 <= found < end:
            end = found
    netloc = rest[:end]
    if "[" in netloc or "]" in netloc:
        return None
    return scheme.lower(), netloc, rest[end:]


def _is_http_url(url: str) -> bool:
    parts = _split_url(url)
    if parts is not None:
        return parts[0] in ("http", "https") and bool(parts[1])
    from urllib.parse import urlsplit

    split = urlsplit(url)
    return split.scheme in ("http", "https") and bool(split.netloc)


def parse_args(argv: list[str] | None) -> Options:
    """Options from ``argv``, with ``SIGNET_*`` environment variables as fallbacks."""
    if argv is None:
        argv = sys.argv[1:]
    args: Mapping[str, str | None] | None = _split_argv(argv)
    if args is None:
        args = _argparse(argv)

    harness = args.get("harness") or ""
    if not _is_harness(harness):
        raise HookError(f"invalid harness name {harness!r}")
    url = (args.get("url") or os.environ.get("SIGNET_URL") or DEFAULT_URL).rstrip("/")
    if not _is_http_url(url):
        raise HookError(f"--url must be an http(s) URL, not {url!r}")
    token_env = args.get("token_env")
    raw_timeout = args.get("timeout") or os.environ.get("SIGNET_HOOK_TIMEOUT") or ""
    try:
        timeout = float(raw_timeout) if raw_timeout else DEFAULT_TIMEOUT
    except ValueError:
        timeout = DEFAULT_TIMEOUT
    if not 0 < timeout <= 600:
        timeout = DEFAULT_TIMEOUT
    if not args.get("timeout"):
        # The installed hooks' own budgets are 10 s at least: a deadline from the environment
        # must leave the watchdog its grace inside them, or the harness kills the hook first.
        timeout = min(timeout, MAX_ENV_TIMEOUT)
    outbox = os.path.expanduser(
        args.get("outbox") or os.environ.get("SIGNET_OUTBOX") or DEFAULT_OUTBOX
    )
    return Options(
        url=url,
        harness=harness,
        token_env=DEFAULT_TOKEN_ENV if token_env is None else token_env,
        timeout=timeout,
        outbox=outbox,
    )


def read_payload(stream: IO[bytes]) -> dict[str, Any]:
    """The hook payload: a JSON object, or HookError."""
    try:
        payload = _loads(stream.read())
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
        raise HookError("stdin is not JSON") from exc
    if not isinstance(payload, dict):
        raise HookError("stdin is not a JSON object")
    return payload


# --- what only the client machine can know ------------------------------------------------


def _read_text(path: str, limit: int = 4096) -> str:
    with open(path, "rb") as handle:
        return handle.read(limit).decode("utf-8", "replace").strip()


def _is_sha(text: str) -> bool:
    return len(text) in (40, 64) and _SHA_CHARS.issuperset(text)


def find_git_root(start: str) -> tuple[str, str] | None:
    """``(worktree root, git dir)`` of the repository holding ``start``, without running git."""
    current = start
    for _ in range(GIT_MAX_LEVELS):
        dot_git = os.path.join(current, ".git")
        if os.path.isdir(dot_git):
            return current, dot_git
        if os.path.isfile(dot_git):
            # Worktrees and submodules: ".git" is a file "gitdir: <path>", relative to it.
            content = _read_text(dot_git)
            if content.startswith("gitdir:"):
                git_dir = content[len("gitdir:") :].strip()
                return current, os.path.realpath(os.path.join(current, git_dir))
            return None
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent
    return None


def _common_dir(git_dir: str) -> str:
    # A linked worktree keeps its own HEAD but shares refs with the main repository, named
    # by its "commondir" file.
    commondir = os.path.join(git_dir, "commondir")
    if os.path.isfile(commondir):
        return os.path.realpath(os.path.join(git_dir, _read_text(commondir)))
    return git_dir


def _resolve_ref(git_dir: str, ref: str) -> str | None:
    if ".." in ref.split("/"):
        return None
    common = _common_dir(git_dir)
    for base in dict.fromkeys((git_dir, common)):
        ref_file = os.path.join(base, ref)
        if os.path.isfile(ref_file):
            sha = _read_text(ref_file, 128)
            return sha if _is_sha(sha) else None
    packed = os.path.join(common, "packed-refs")
    if os.path.isfile(packed) and os.path.getsize(packed) <= PACKED_REFS_MAX_BYTES:
        with open(packed, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
        for line in lines:
            sha, _, name = line.partition(" ")
            if name.strip() == ref and _is_sha(sha):
                return sha
    return None


def git_state(git_dir: str) -> dict[str, str]:
    """``git_branch`` and ``git_head`` from HEAD; a field that cannot be read is left out."""
    head = _read_text(os.path.join(git_dir, "HEAD"), 512)
    if head.startswith("ref:"):
        ref = head[len("ref:") :].strip()
        state = {"git_branch": ref[len("refs/heads/") :] if ref.startswith("refs/heads/") else ref}
        sha = _resolve_ref(git_dir, ref)
        if sha:
            state["git_head"] = sha
        return state
    if _is_sha(head):
        return {"git_branch": "", "git_head": head}
    return {}


def is_session_key(text: str) -> bool:
    """Whether the server takes ``text`` as a session key: 1 to 255 letters, digits and
    ``. _ : @ + = ~ -``, starting with a letter or digit (its credential check aside)."""
    return (
        0 < len(text) <= 255
        and text[0].isalnum()
        and all(char.isalnum() or char in _KEY_PUNCTUATION for char in text)
    )


def client_context(payload: dict[str, Any]) -> dict[str, str]:
    """The ``signet`` object: the normalised project path and git state of the payload's cwd.

    Cheap file reads only (no git subprocess: the hook is on the agent's hot path). Every
    field is best-effort; one that fails is simply absent.
    """
    context: dict[str, str] = {}
    # Handoff (``manage.py handoff``): the session this one continues, possibly another
    # harness's. Held to the server's rule for session keys, which refuses the whole event
    # for a bad one: a mistyped variable must not cost the session its events.
    previous = os.environ.get("SIGNET_PREVIOUS_SESSION_KEY", "").strip()
    if is_session_key(previous):
        context["previous_session_key"] = previous
    cwd = payload.get("cwd")
    if not isinstance(cwd, str) or not cwd:
        return context
    try:
        project = os.path.realpath(cwd)
        context["project_normalized"] = project
        found = find_git_root(project)
        if found is not None:
            root, git_dir = found
            context["git_root"] = root
            context.update(git_state(git_dir))
    except (OSError, ValueError):
        pass  # best-effort: keep whatever was found before the failure
    return context


def transcript_extract(payload: dict[str, Any]) -> dict[str, Any] | None:
    """What the tail of the payload's Claude Code transcript says, as JSON values, or None.

    Read here, on the agent's machine, because the server never opens a file a request names.
    Only PreCompact sends it, once per compaction; it reads at most the transcript's last
    2 MiB, parsing each line with this client's JSON decoder (json's import is most of its
    cost).
    """
    path = payload.get("transcript_path")
    if payload.get("hook_event_name") != "PreCompact" or not isinstance(path, str) or not path:
        return None
    if __package__:  # imported as hooks.signet_hook (the tests, the installer's checks)
        from .transcripts.claude_code import read_transcript
        from .transcripts.tasks import task_list_dir
    else:  # the installed command: this file's folder is on sys.path, not its parent
        from transcripts.claude_code import read_transcript  # type: ignore[import-not-found,no-redef]
        from transcripts.tasks import task_list_dir  # type: ignore[import-not-found,no-redef]
    session_id = payload.get("session_id")
    tasks_dir = task_list_dir(session_id) if isinstance(session_id, str) and session_id else None
    facts = read_transcript(path, loads=_loads, tasks_dir=tasks_dir)
    return None if facts is None else facts.as_payload()


def _compaction_transcript(payload: dict[str, Any], event: str) -> str | None:
    """The payload's ``transcript_path`` if it is the harness's pre-compaction ``event``."""
    path = payload.get("transcript_path")
    if payload.get("hook_event_name") != event or not isinstance(path, str) or not path:
        return None
    return path


def codex_transcript_extract(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The facts of the tail of the payload's Codex rollout (``transcripts/codex.py``), in
    the shape ``transcript_extract`` sends; only PreCompact sends them."""
    path = _compaction_transcript(payload, "PreCompact")
    if path is None:
        return None
    if __package__:
        from .transcripts.codex import read_rollout
    else:
        from transcripts.codex import read_rollout  # type: ignore[import-not-found,no-redef]
    return read_rollout(path, loads=_loads)


def gemini_transcript_extract(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The facts of the tail of the payload's Gemini chat recording
    (``transcripts/gemini.py``); only PreCompress sends them (Gemini fires it every turn)."""
    path = _compaction_transcript(payload, "PreCompress")
    if path is None:
        return None
    if __package__:
        from .transcripts.gemini import read_chat
    else:
        from transcripts.gemini import read_chat  # type: ignore[import-not-found,no-redef]
    return read_chat(path, loads=_loads)


def usage_extract(payload: dict[str, Any]) -> dict[str, Any] | None:
    """``{"context_tokens": N, "model": "..."}`` of the last response in the payload's Claude
    Code transcript, or None: sent as ``signet.usage`` so the server can remind the agent of
    its context pressure. Only Stop sends it; it runs after every turn, so only the last
    256 KiB are read, and only the lines that can hold a usage are parsed. Stop often runs
    before Claude Code has written the turn's last response: it waits for it, briefly
    (``read_usage_after``), which the readers after it profit from too.

    A Stop that does not say what the response was (Claude Code before 2.1 sends no
    ``last_assistant_message``) is given it here, from the transcript, clipped as the
    transcript reader clips it, once the response is there (``read_answer``).
    """
    path = payload.get("transcript_path")
    if payload.get("hook_event_name") != "Stop" or not isinstance(path, str) or not path:
        return None
    # Modules every Claude Code hook loads anyway (the catch-up, ``transcripts/sync.py``).
    if __package__:
        from .transcripts.claude_code import message_text
        from .transcripts.usage import read_answer, read_usage_after
    else:
        from transcripts.claude_code import message_text  # type: ignore[no-redef]
        from transcripts.usage import (  # type: ignore[import-not-found,no-redef]
            read_answer,
            read_usage_after,
        )
    response, prompt_id = payload.get("last_assistant_message"), payload.get("prompt_id")
    if response is None:
        usage, text = read_answer(path, loads=_loads)
        if text:
            payload["last_assistant_message"] = message_text(text)
        return usage
    return read_usage_after(
        path,
        response=response if isinstance(response, str) else "",
        prompt_id=prompt_id if isinstance(prompt_id, str) else "",
        loads=_loads,
    )


def tasks_extract(payload: dict[str, Any]) -> dict[str, Any] | None:
    """``{"current_task": ..., "todos": [...]}``: the session's task list as Claude Code keeps
    it in its task files (``transcripts/tasks.py``), sent with Stop as ``signet.tasks`` so
    that the periodic checkpoints know the task in progress; None when the session has no
    task list (no Task tool used yet, or ``TodoWrite`` instead)."""
    session_id = payload.get("session_id")
    if payload.get("hook_event_name") != "Stop" or not isinstance(session_id, str):
        return None
    if not session_id:
        return None
    if __package__:
        from .transcripts import tasks as reader
    else:
        import transcripts.tasks as reader  # type: ignore[import-not-found,no-redef]
    found = reader.read_task_files(reader.task_list_dir(session_id), loads=_loads)
    return None if found is None else reader.tasks_payload(found)


def transcript_sync(options: Options, payload: dict[str, Any]) -> Any:
    """For a Claude Code event: put into ``signet.sync`` what the transcript gained since the
    session's last command hook (``transcripts/sync.py``: the prompts, edits and compactions
    Claude Code's ``http`` hooks post once, lost in an outage; the branch and the agent's
    newest text), and return what keeps the new cursor once the event is delivered or queued
    (``.commit()``); None otherwise.
    """
    if options.harness != "claude-code":
        return None
    if __package__:
        from .transcripts.sync import sync_collect
    else:
        from transcripts.sync import sync_collect  # type: ignore[import-not-found,no-redef]
    state_dir = os.path.join(os.path.dirname(options.outbox) or ".", "sync")
    sync = sync_collect(payload, state_dir=state_dir, loads=_loads, dumps=_dumps)
    found = None if sync is None else sync.payload()
    if found is not None:
        payload["signet"]["sync"] = found
    return sync


def catch_up_collect(options: Options, payload: dict[str, Any]) -> list[tuple[dict[str, Any], Any]]:
    """At a new Claude Code session's start (``startup``): the catch-up of each other session
    of its project folder whose transcript grew since its last event (``sync.sync_stale``: a
    session killed mid-turn sends nothing of its last lines), as ``(payload, sync)`` pairs.
    Each payload is that session's own ``SignetSync`` event: nothing happened, it only
    carries ``signet.sync``; ``sync.commit()`` moves its cursor once it is delivered or
    queued. Sent before the start itself, whose project flush then writes them."""
    if (
        options.harness != "claude-code"
        or payload.get("hook_event_name") != "SessionStart"
        or payload.get("source") != "startup"
    ):
        return []
    if __package__:
        from .transcripts import sync as reader
    else:
        import transcripts.sync as reader  # type: ignore[no-redef]
    state_dir = os.path.join(os.path.dirname(options.outbox) or ".", "sync")
    # Where the project is, as the new session's own event says (not its branch: the other
    # session's lines carry their own).
    project = {
        name: value
        for name, value in payload.get("signet", {}).items()
        if name in ("project_normalized", "git_root")
    }
    found = []
    for session_id, path in reader.sync_stale(payload, state_dir=state_dir, loads=_loads):
        other: dict[str, Any] = {
            "hook_event_name": CATCH_UP_EVENT,
            "session_id": session_id,
            "transcript_path": path,
        }
        if isinstance(payload.get("cwd"), str):
            other["cwd"] = payload["cwd"]
        sync = reader.sync_collect(other, state_dir=state_dir, loads=_loads, dumps=_dumps)
        if sync is None:
            continue
        body = sync.payload()
        if body is None:  # only lines with nothing to send (or one still being written)
            sync.commit()
            continue
        other["signet"] = {**project, "sync": body}
        found.append((other, sync))
    return found


# The event a catch-up is sent as (``checkpoints/harnesses/claude_code.py``), and the part of
# the start's time its catch-ups may take at most; the start itself has the rest.
CATCH_UP_EVENT = "SignetSync"
CATCH_UP_SHARE = 0.5


# Refusals of the payload itself: the same events would be refused again, and the session's
# next events with them. Any other refusal (a token, a URL) keeps them for when it is fixed.
SYNC_REFUSED = (400, 413, 422)


# What each harness's client reads on this machine: (``signet`` field, reader of the payload).
# A reader returns None when its event is not one it reads, or the file cannot be read.
CLIENT_READERS: dict[str, tuple[tuple[str, Callable[[dict[str, Any]], Any]], ...]] = {
    "claude-code": (
        ("transcript", transcript_extract),
        ("usage", usage_extract),  # first of Stop's: it waits for the transcript
        ("tasks", tasks_extract),
    ),
    "codex": (("transcript", codex_transcript_extract),),
    "gemini": (("transcript", gemini_transcript_extract),),
}


# --- HTTP -----------------------------------------------------------------------------------


class _ProtocolError(Exception):
    """The answer is not HTTP this client can read; the text names the fault."""


def _is_local(host: str) -> bool:
    host = host.lower()
    return host in ("localhost", "::1") or host.startswith("127.")


def _http_target(url: str) -> tuple[str, int, str, str] | None:
    """``(host, port, Host header, request target)`` when the socket client can send to ``url``.

    None leaves the request to urllib: https, a proxy to go through, and URL forms this
    small client has no need to get right (userinfo, IPv6 literals, odd ports, fragments).
    """
    parts = _split_url(url)
    if parts is None or parts[0] != "http":
        return None
    _, netloc, target = parts
    if "@" in netloc or "#" in target or not target.startswith("/"):
        return None
    host, _, port_text = netloc.partition(":")
    if not port_text:
        port = 80
    elif port_text.isdigit() and int(port_text) <= 65535:
        port = int(port_text)
    else:
        return None
    if not host:
        return None
    # urllib sends through http_proxy (in any case, minus no_proxy) to all but the local
    # service; a request that may need one goes to urllib, which knows the rules.
    if not _is_local(host) and any(
        value and name.lower() == "http_proxy" for name, value in os.environ.items()
    ):
        return None
    return host, port, netloc, target


# What a socket raises when its time runs out (two classes before Python 3.10).
_TIMEOUTS = (TimeoutError, _socket.timeout)


def _time_left(end: float) -> float:
    left = end - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def _addresses(host: str, port: int) -> list[tuple[int, int, int, str, tuple[str, int]]]:
    try:
        _socket.inet_pton(_socket.AF_INET, host)
    except OSError:
        # A name. The look-up takes no timeout: a stuck resolver is what the watchdog is for.
        return _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM)  # type: ignore[return-value]
    # An IPv4 literal needs no resolver; the C library's first look-up in a process (even of
    # a literal) costs about as much as the whole request.
    return [(_socket.AF_INET, _socket.SOCK_STREAM, 0, "", (host, port))]


def _connect(host: str, port: int, end: float) -> _socket.socket:
    """A TCP connection to the first of ``host``'s addresses that accepts one."""
    error: OSError = ConnectionError(f"no address for {host}")
    for family, kind, proto, _, address in _addresses(host, port):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(_time_left(end))
            sock.connect(address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        # The request goes out in one write; its tail must not wait for a delayed ACK.
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        return sock
    raise error


class _Reader:
    """Buffered reads from a socket, every ``recv`` bounded by the time left until ``end``.

    Bounding each read by what is left (not by a fixed timeout) also stops a server that
    trickles its answer a byte at a time.
    """

    def __init__(self, sock: _socket.socket, end: float) -> None:
        self.sock = sock
        self.end = end
        self.buffer = bytearray()
        self.closed = False

    def _fill(self) -> bool:
        if self.closed:
            return False
        self.sock.settimeout(_time_left(self.end))
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        self.closed = not chunk
        return bool(chunk)

    def line(self) -> bytes | None:
        """The next line with its CRLF (or bare LF); None if the connection ends first."""
        searched = 0
        while True:
            end = self.buffer.find(b"\n", searched)
            if end >= MAX_HEADER_LINE:
                raise _ProtocolError("LineTooLong")
            if end >= 0:
                line = bytes(self.buffer[: end + 1])
                del self.buffer[: end + 1]
                return line
            if len(self.buffer) > MAX_HEADER_LINE:
                raise _ProtocolError("LineTooLong")
            searched = len(self.buffer)
            if not self._fill():
                return None

    def read(self, size: int) -> bytes:
        """``size`` bytes, or fewer if the connection ends first."""
        while len(self.buffer) < size and self._fill():
            pass
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data


def _read_status(reader: _Reader) -> int:
    line = reader.line()
    if line is None:
        raise _ProtocolError("RemoteDisconnected")
    version, _, rest = line.strip().partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/") or not code.isdigit() or rest[3:4] not in (b"", b" "):
        raise _ProtocolError("BadStatusLine")
    return int(code)


def _read_framing(reader: _Reader) -> tuple[int | None, bool] | None:
    """How the body is delimited, ``(Content-Length, chunked)``; None if the headers end
    with the connection."""
    length: int | None = None
    chunked = False
    for _ in range(MAX_HEADERS + 1):
        line = reader.line()
        if line is None:
            return None
        if line in (b"\r\n", b"\n"):
            return length, chunked
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        value = value.strip()
        if name == b"content-length":
            if not value.isdigit() or (length is not None and int(value) != length):
                raise _ProtocolError("InvalidContentLength")
            length = int(value)
        elif name == b"transfer-encoding":
            # Chunked is the last coding whenever it is used (RFC 9112, 6.1), and then
            # Content-Length, if any, does not count.
            chunked = value.lower().rsplit(b",", 1)[-1].strip() == b"chunked"
    raise _ProtocolError("TooManyHeaders")


def _is_hex(text: bytes) -> bool:
    return bool(text) and not text.translate(None, b"0123456789abcdefABCDEF")


def _read_chunked(reader: _Reader, limit: int) -> bytes | None:
    """A chunked body, read up to ``limit`` bytes; None if it is cut short or malformed."""
    body = bytearray()
    while len(body) < limit:
        line = reader.line()
        size_text = (line or b"").split(b";", 1)[0].strip()  # chunk extensions are ignored
        if not _is_hex(size_text):
            return None
        size = int(size_text, 16)
        if size == 0:
            return bytes(body)  # the trailers, if any, die with the connection
        want = min(size, limit - len(body))
        chunk = reader.read(want)
        if len(chunk) < want:
            return None
        body += chunk
        if len(body) < limit and reader.line() not in (b"\r\n", b"\n"):
            return None
    return bytes(body)


def _read_response(reader: _Reader) -> Delivery:
    while True:
        status = _read_status(reader)
        framing = _read_framing(reader)
        # Interim answers (100 Continue, 103 Early Hints) precede the real one.
        if not 100 <= status < 200 or status == 101:
            break
    if not 200 <= status < 300:
        return Delivery(status=status)  # only a 2xx reply's body is ever used
    if framing is None or status == 204:
        return Delivery(status=status)
    length, chunked = framing
    # One byte more than emit_reply accepts is enough to know the reply is too large.
    limit = MAX_RESPONSE_BYTES + 1
    if chunked:
        body = _read_chunked(reader, limit)
    elif length is None:
        body = reader.read(limit)  # delimited by the end of the connection
    else:
        body = reader.read(min(length, limit))
        if len(body) < min(length, limit):
            body = None
    # A reply cut short is delivered all the same (the server answered 2xx), but half a
    # reply must not reach the agent.
    return Delivery(status=status, body=b"" if body is None else body)


def _post_http(
    target: tuple[str, int, str, str], body: bytes, *, token: str, key: str, end: float
) -> Delivery:
    """One HTTP/1.1 POST over a fresh connection, closed after the answer."""
    host, port, host_header, path = target
    # run() refuses such a token, but a key comes back from the outbox file: neither may
    # ever split a header.
    if not token.isprintable() or not key.isprintable():
        return Delivery(status=None, error="the token or key is not a valid header value")
    head = (
        f"POST {path} HTTP/1.1\r\n"
        f"Host: {host_header}\r\n"
        "Accept-Encoding: identity\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Authorization: Bearer {token}\r\n"
        f"Idempotency-Key: {key}\r\n"
        f"User-Agent: {USER_AGENT}\r\n"
        "\r\n"
    ).encode("latin-1")
    sock = _connect(host, port, end)
    try:
        sock.settimeout(_time_left(end))
        sock.sendall(head + body)
        return _read_response(_Reader(sock, end))
    finally:
        sock.close()


def _post_urllib(url: str, body: bytes, *, token: str, key: str, timeout: float) -> Delivery:
    import urllib.error
    import urllib.request
    from urllib.parse import urlsplit

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        # A followed redirect would turn the POST into a GET without its body: report it.
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    handlers: list[urllib.request.BaseHandler] = [NoRedirect()]
    if _is_local(urlsplit(url).hostname or ""):
        # A corporate HTTP(S)_PROXY must not swallow requests to the local service.
        handlers.append(urllib.request.ProxyHandler({}))
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
        with urllib.request.build_opener(*handlers).open(request, timeout=timeout) as response:
            return Delivery(status=response.status, body=response.read(MAX_RESPONSE_BYTES + 1))
    except urllib.error.HTTPError as exc:
        exc.close()
        return Delivery(status=exc.code)
    except urllib.error.URLError as exc:
        return Delivery(
            status=None,
            error=f"server unreachable ({exc.reason})",
            timed_out=isinstance(exc.reason, _TIMEOUTS),
        )
    except (OSError, ValueError) as exc:  # timeouts, resets, http.client's protocol errors
        return Delivery(
            status=None,
            error=f"server unreachable ({type(exc).__name__})",
            timed_out=isinstance(exc, _TIMEOUTS),
        )


def post_event(url: str, body: bytes, *, token: str, key: str, timeout: float) -> Delivery:
    """POST one event within ``timeout`` seconds; never raises for network or HTTP failures.

    Redirects are not followed (the POST would become a bodiless GET): a 3xx is reported.
    """
    target = _http_target(url)
    if target is None:
        return _post_urllib(url, body, token=token, key=key, timeout=timeout)
    try:
        return _post_http(target, body, token=token, key=key, end=time.monotonic() + timeout)
    except _ProtocolError as exc:
        return Delivery(status=None, error=f"server unreachable ({exc})")
    except (OSError, ValueError) as exc:  # refused, reset, timed out, unresolvable
        return Delivery(
            status=None,
            error=f"server unreachable ({str(exc) or type(exc).__name__})",
            timed_out=isinstance(exc, _TIMEOUTS),
        )


def emit_reply(body: bytes, stdout: IO[bytes]) -> None:
    """Print the server's reply if it is a JSON object, the only stdout the harness wants."""
    if not body.strip() or len(body) > MAX_RESPONSE_BYTES:
        return
    try:
        reply = _loads(body)
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


class _Locked:
    """``with _Locked(path, wait=s) as held``: an exclusive lock on ``path`` if it can be
    had within ``wait`` seconds (``held`` says whether). Closing the descriptor releases it.
    """

    def __init__(self, path: str, *, wait: float) -> None:
        self.path = path
        self.wait = wait
        self.fd = -1

    def __enter__(self) -> bool:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            return _try_lock(self.fd, self.wait)
        except BaseException:
            os.close(self.fd)
            raise

    def __exit__(self, *exc_info: object) -> None:
        os.close(self.fd)


def _try_lock(fd: int, wait: float) -> bool:
    if sys.platform == "win32":
        # No fcntl: run unlocked. Replays may then overlap, which the idempotency keys make
        # harmless; a rewrite racing an append may lose that one queued event.
        return True
    import fcntl

    give_up = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            if time.monotonic() >= give_up:
                return False
            time.sleep(0.01)


def _ensure_dir(directory: str) -> None:
    if not os.path.isdir(directory):
        os.makedirs(directory, exist_ok=True)
        # The outbox holds prompts and file contents: private to the user.
        os.chmod(directory, 0o700)


def _read_lines(outbox: str) -> list[bytes]:
    try:
        with open(outbox, "rb") as handle:
            return handle.read().splitlines(keepends=True)
    except FileNotFoundError:
        return []


def _parse_entry(line: bytes) -> dict[str, Any] | None:
    try:
        entry = _loads(line)
    except ValueError:
        return None  # a line cut short by a killed process: dropped at the next rewrite
    if (
        isinstance(entry, dict)
        and isinstance(entry.get("key"), str)
        # A key no header can carry would fail before it is sent, at every replay.
        and entry["key"].isascii()
        and entry["key"].isprintable()
        and isinstance(entry.get("url"), str)
        and isinstance(entry.get("body"), dict)
        and isinstance(entry.get("stalls", 0), int)
    ):
        return entry
    return None


def _rewrite(outbox: str, lines: list[bytes]) -> None:
    import tempfile

    directory, name = os.path.split(outbox)
    # Temp file + rename: a reader (or a crash) never sees a half-written outbox.
    fd, temp = tempfile.mkstemp(dir=directory or ".", prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.writelines(lines)
        os.replace(temp, outbox)
    except BaseException:
        try:  # noqa: SIM105 (contextlib takes longer to import than the request)
            os.unlink(temp)
        except OSError:
            pass
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


def outbox_append(outbox: StrPath, entry: dict[str, Any]) -> None:
    """Queue one undelivered event, keeping the outbox bounded (the oldest go first)."""
    path = os.fspath(outbox)
    _ensure_dir(os.path.dirname(path) or ".")
    line = _dumps(entry, compact=True).encode("ascii") + b"\n"
    with _Locked(path + ".lock", wait=APPEND_LOCK_WAIT_SECONDS):
        # Go on even without the lock (another hook kept it): appending risks losing this
        # event to a concurrent rewrite; giving up loses it for certain.
        lines = _read_lines(path)
        if len(lines) >= OUTBOX_MAX_ENTRIES or sum(map(len, lines)) + len(line) > OUTBOX_MAX_BYTES:
            _rewrite(path, _bounded([*lines, line]))
            return
        if lines and not lines[-1].endswith(b"\n"):
            line = b"\n" + line  # never glue onto a line that a killed process cut short
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(line)


def outbox_replay(
    outbox: StrPath,
    *,
    url: str,
    token: str,
    deadline: Deadline,
    share: Deadline | None = None,
    patience: float | None = None,
    on_answer: Callable[[], None] | None = None,
) -> Delivery | None:
    """Resend queued events for ``url``, oldest first: the first within ``deadline``, the
    others while ``share`` (the time the replay may take) lasts, each within ``patience``
    seconds after the server's last answer (``on_answer`` is told of each), or ``deadline``.

    Each keeps its original idempotency key, so one the server already has is not counted
    twice. Delivered and permanently refused entries leave the outbox; the rest stay.

    Returns the answer the replay stopped on when a request got no answer in time (or a
    proxy's 502 or 504, which gave up waiting), else None. Such a request may still be
    carried out later (the server does not see the client give up), so nothing newer may be
    sent after it: the caller queues its live event behind it instead. An entry that held
    events back ``MAX_REPLAY_STALLS`` times no longer does (whatever it does to the server,
    the agent's events must not queue behind it for ever). Another hook replaying holds this
    one back until it is done, or returns its own verdict: still replaying at the deadline.
    """
    path = os.fspath(outbox)
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return None
    if share is None:
        share = deadline
    with _Locked(path + ".replay.lock", wait=deadline.remaining()) as replaying:
        if not replaying:  # what it sent may be in flight: the same as no answer
            return Delivery(status=None, error="another hook was still replaying the outbox")
        # Reading is safe even without this lock (rewrites are atomic renames); it only
        # avoids reading while an append is half-written.
        with _Locked(path + ".lock", wait=min(1.0, deadline.remaining())):
            entries = [entry for entry in map(_parse_entry, _read_lines(path)) if entry]
        done: set[str] = set()
        stalled: Delivery | None = None
        stalled_key = ""
        sent = 0
        for entry in entries:
            # Entries for another server wait for a hook that reaches that server.
            if entry["url"] != url:
                continue
            if deadline.remaining() < MIN_REQUEST_SECONDS or (
                sent and share.remaining() < MIN_REQUEST_SECONDS
            ):
                break
            sent += 1
            # The first request may take all the time there is: it is the one that finds
            # out whether the server answers at all (a server just restarted takes longer).
            timeout = deadline.remaining()
            result = post_event(
                url, _dumps(entry["body"]).encode("ascii"), token=token, key=entry["key"],
                timeout=timeout,
            )  # fmt: skip
            result.timed_out = result.timed_out and timeout >= HUNG_SECONDS
            if result.status is not None and patience is not None:
                deadline = Deadline(patience)
                if on_answer is not None:
                    on_answer()
            if result.delivered or not result.retryable:
                done.add(entry["key"])
            elif result.status in _IN_FLIGHT:
                if entry.get("stalls", 0) < MAX_REPLAY_STALLS:
                    stalled = result
                    stalled_key = entry["key"]
                elif result.timed_out:
                    stalled = result  # not this entry: the server answers nothing now
                break
            elif result.status in (429, 503):
                break  # the server went away or asks to slow down; a 500 may be this entry's
        if done or stalled is not None:
            with _Locked(path + ".lock", wait=min(1.0, deadline.remaining())) as locked:
                # Without the lock, leave the file alone: the entries are resent next time
                # and the server ignores their keys.
                if locked:
                    kept = []
                    for line in _read_lines(path):
                        parsed = _parse_entry(line)
                        if parsed is not None and parsed["key"] in done:
                            continue
                        if (
                            parsed is not None
                            and stalled is not None
                            and (parsed["key"] == stalled_key)
                        ):
                            parsed["stalls"] = parsed.get("stalls", 0) + 1
                            line = _dumps(parsed, compact=True).encode("ascii") + b"\n"
                        kept.append(line)
                    _rewrite(path, _bounded(kept))
        return stalled


# --- a server that does not answer ---------------------------------------------------------


def _down_marker(outbox: str) -> str:
    return outbox + ".down"


def server_marked_down(outbox: str, endpoint: str) -> bool | None:
    """Whether a hook found ``endpoint`` hung less than ``DOWN_SECONDS`` ago: True, False
    for an older mark (to clear once the server answers), None for no mark of this server."""
    marker = _down_marker(outbox)
    try:
        with open(marker, "rb") as handle:
            if handle.read(4096) != endpoint.encode("utf-8", "replace"):
                return None
            age = time.time() - os.fstat(handle.fileno()).st_mtime
    except OSError:
        return None
    return -DOWN_SECONDS < age < DOWN_SECONDS  # else stale, or from a clock set back


def server_mark_down(outbox: str, endpoint: str) -> None:
    """Record that ``endpoint`` let this hook wait without an answer; best-effort."""
    marker = _down_marker(outbox)
    temp = f"{marker}.{os.getpid()}.tmp"
    try:
        _ensure_dir(os.path.dirname(marker) or ".")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(endpoint.encode("utf-8", "replace"))
        os.replace(temp, marker)  # a reader never sees half a URL
    except OSError:
        try:  # noqa: SIM105 (contextlib takes longer to import than the request)
            os.unlink(temp)
        except OSError:
            pass


def server_clear_down(outbox: str) -> None:
    """The server answered: the hooks may wait for it again."""
    try:  # noqa: SIM105 (contextlib takes longer to import than the request)
        os.unlink(_down_marker(outbox))
    except OSError:
        pass


# --- main -----------------------------------------------------------------------------------


def _warn(message: str) -> None:
    try:
        sys.stderr.write(f"signet-hook: {message}\n")
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):  # no stderr, or a closed one
        pass


class Watchdog:
    """Exit 0 at a hard deadline, whatever the main thread is stuck in.

    The socket client bounds every read by the deadline, but nothing bounds a DNS look-up,
    nor urllib's reads for https; Claude Code must never wait on this hook. A thread, not
    SIGALRM: a signal handler only runs once the blocking C call returns. If the live event
    is still in flight, it is queued first (``on_expiry``). A bare ``_thread``: the threading
    module's import costs more than the rest of the start-up.
    """

    def __init__(self, seconds: float) -> None:
        self.on_expiry: Callable[[], None] | None = None
        self.end = time.monotonic() + seconds
        _thread.start_new_thread(self._run, ())

    def extend(self, seconds: float) -> None:
        """Fire no earlier than ``seconds`` from now: the server answered, the hook goes on."""
        self.end = max(self.end, time.monotonic() + seconds)

    def _run(self) -> None:
        while True:
            left = self.end - time.monotonic()
            if left <= 0:
                break
            time.sleep(left)
        try:
            if self.on_expiry is not None:
                self.on_expiry()
        finally:
            # Whatever the queueing did (even raise), the process ends here.
            try:  # noqa: SIM105 (contextlib takes longer to import than the request)
                os.write(2, b"signet-hook: deadline reached\n")
            except OSError:
                pass
            os._exit(0)


def _new_key() -> str:
    """A random UUID, version 4, as 32 hex digits: ``uuid.uuid4().hex`` without its import."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # the RFC 4122 variant
    return raw.hex()


def outbox_entry(options: Options, key: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The outbox line for an undelivered event."""
    from datetime import datetime, timezone

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
    if argv is None:
        argv = sys.argv[1:]
    # ``--notify``: run as Codex's legacy ``notify`` program, which gets the payload as its
    # last argument (appended by Codex), not on stdin.
    notify = "--notify" in argv[:-1]
    if notify:
        argv, argument = [arg for arg in argv[:-1] if arg != "--notify"], argv[-1]
    options = parse_args(argv)
    guard = Watchdog(options.timeout + WATCHDOG_GRACE_SECONDS) if watchdog else None
    if notify:
        import io  # already loaded by the interpreter: costs nothing

        payload = read_payload(io.BytesIO(os.fsencode(argument)))
    elif stdin.isatty():
        return "no payload on stdin"
    else:
        payload = read_payload(stdin)
    token = os.environ.get(options.token_env, "").strip()
    if not token:
        # Not queued: without a token the server can only refuse it, like any 401.
        return f"${options.token_env} is not set; event not sent"
    if not token.isprintable():
        return f"${options.token_env} holds characters a header cannot carry; event not sent"

    signet = payload.get("signet")
    payload["signet"] = {**(signet if isinstance(signet, dict) else {}), **client_context(payload)}
    for field, extract in CLIENT_READERS.get(options.harness, ()):
        try:
            found = extract(payload)
        except Exception:  # a reader bug must not cost the event itself
            found = None
        if found is not None:
            payload["signet"][field] = found
    try:
        sync = transcript_sync(options, payload)
    except Exception:  # a reader bug must not cost the event itself
        sync = None
    try:
        catch_ups = catch_up_collect(options, payload)
    except Exception:  # a reader bug must not cost the event itself
        catch_ups = []
    key = _new_key()

    def catch_up_queue() -> None:
        # Before the start's own event: the outbox replays in order.
        while catch_ups:
            other, other_sync = catch_ups.pop(0)
            outbox_append(options.outbox, outbox_entry(options, _new_key(), other))
            other_sync.commit()

    def queue() -> None:
        catch_up_queue()
        outbox_append(options.outbox, outbox_entry(options, key, payload))
        if sync is not None:
            sync.commit()  # the outbox carries what it found now

    marked = server_marked_down(options.outbox, options.endpoint)
    if marked:
        # Another hook waited out its deadline on this server a moment ago: this one would
        # only wait as long. The outbox carries the event, replayed once the mark is stale.
        queue()
        return f"the server did not answer a moment ago; event queued in {options.outbox}"

    def queue_hung() -> None:
        # The watchdog: stuck in a request past the deadline, so the next hooks need not be.
        server_mark_down(options.outbox, options.endpoint)
        queue()

    body = _dumps(payload).encode("ascii")
    # The timeout is the wait for the server: the reading above (Stop waits for the
    # transcript to hold the turn's last response) does not count against it.
    patience = options.timeout + min(len(body) / BODY_BYTES_PER_SECOND, BODY_MAX_EXTRA_SECONDS)
    if payload.get("hook_event_name") == "SessionStart" and payload.get("source") == "compact":
        patience = max(patience, COMPACT_START_SECONDS)
    deadline = Deadline(patience)
    if guard is not None:
        guard.extend(patience + WATCHDOG_GRACE_SECONDS)
        guard.on_expiry = queue_hung
    # Queued events first, oldest first, so that the server sees the session in the order
    # it happened. The first may take all the time left (it finds out whether the server
    # answers at all); while the server answers, the others go on for REPLAY_SECONDS.
    answered = []

    def on_answer() -> None:
        answered.append(True)
        if guard is not None:
            guard.extend(patience + WATCHDOG_GRACE_SECONDS)

    stalled = outbox_replay(
        options.outbox,
        url=options.endpoint,
        token=token,
        deadline=deadline,
        share=Deadline(max(deadline.remaining() * REPLAY_SHARE, REPLAY_SECONDS)),
        patience=options.timeout,
        on_answer=on_answer,
    )
    if stalled is not None:
        # Sent now, the live event could overtake a queued one the server takes later: it
        # joins the queue behind them, and the agent goes on without waiting any longer.
        # (The watchdog stays armed while it is queued: at worst a line twice, one key.)
        if stalled.timed_out:
            server_mark_down(options.outbox, options.endpoint)
        queue()
        if guard is not None:
            guard.on_expiry = None
        return f"{stalled.describe()} on replaying the outbox; event queued in {options.outbox}"
    if catch_ups:
        # The other sessions' catch-ups, each as its own event, within a share of the time
        # left: what cannot be sent in it is queued, and the start goes on.
        share = Deadline(deadline.remaining() * CATCH_UP_SHARE)
        while catch_ups and share.remaining() > 0:
            other, other_sync = catch_ups[0]
            other_key = _new_key()
            sent = post_event(
                options.endpoint,
                _dumps(other).encode("ascii"),
                token=token,
                key=other_key,
                timeout=share.remaining(),
            )
            if sent.status is not None:
                on_answer()
            if not sent.delivered and sent.retryable:
                break  # queued below, with the ones after it
            catch_ups.pop(0)
            if sent.delivered or sent.status in SYNC_REFUSED:
                other_sync.commit()
        catch_up_queue()
    # After answers to the replay the server is known to be up: the whole timeout again.
    timeout = patience if answered else deadline.remaining()
    if answered and guard is not None:
        guard.extend(timeout + WATCHDOG_GRACE_SECONDS)
    result = post_event(options.endpoint, body, token=token, key=key, timeout=timeout)
    if sync is not None and (result.delivered or result.status in SYNC_REFUSED):
        sync.commit()
    if guard is not None:
        guard.on_expiry = None
    if result.status is not None and marked is not None:
        server_clear_down(options.outbox)
    if result.delivered:
        emit_reply(result.body, stdout)
        return ""
    if not result.retryable:
        return f"the server refused the event ({result.describe()}); not queued"
    if result.timed_out and timeout >= HUNG_SECONDS:
        server_mark_down(options.outbox, options.endpoint)
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


def cli() -> NoReturn:
    """Run as the harness's command: ``main`` with the watchdog armed, then exit 0 at once.

    The interpreter's shutdown (module teardown, a last collection) would add a tenth to the
    hook's time; nothing is left open but the standard streams, flushed here.
    """
    main(watchdog=True)
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 (contextlib takes longer to import than the request)
            stream.flush()
        except (AttributeError, OSError, ValueError):  # no stream, or a closed one
            pass
    os._exit(0)


if __name__ == "__main__":
    cli()
