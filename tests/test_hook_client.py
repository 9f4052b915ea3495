"""The command hook, ``hooks/signet_hook.py``, as Claude Code runs it: a real process.

The HTTP peer here is a small recording server standing in for Signet, so that delivery,
failure and replay can be driven exactly; the real endpoint has its own end-to-end test.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from hooks import signet_hook

PROJECT_DIR = Path(__file__).resolve().parent.parent
HOOK = PROJECT_DIR / "hooks" / "signet_hook.py"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "claude_code"
SESSION_START = (FIXTURES / "session_start_startup.json").read_bytes()
PROMPT = (FIXTURES / "user_prompt_submit.json").read_bytes()
TOKEN = "sgt_test_token"
REPLY = b'{"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "hi"}}'


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@contextmanager
def recording_server(*responses: tuple[int, bytes]) -> Iterator[tuple[str, list[Received]]]:
    """A one-thread HTTP server answering POSTs with ``responses`` in turn (then 200, empty)."""
    queue = list(responses)
    received: list[Received] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append(Received(self.path, dict(self.headers), json.loads(body)))
            status, reply = queue.pop(0) if queue else (200, b"")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    # A short poll interval: shutdown() waits for the loop to notice, 0.5 s by default.
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def run_hook(env: dict[str, str], payload: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, str(HOOK), *args, "claude-code"],
        input=payload,
        capture_output=True,
        env=env,
        cwd=PROJECT_DIR,
        timeout=15,
        check=False,
    )


def outbox_entries(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def outbox(tmp_path: Path) -> Path:
    return tmp_path / "spool" / "outbox.jsonl"


@pytest.fixture
def env(tmp_path: Path, outbox: Path) -> dict[str, str]:
    """A clean environment: HOME is the test's folder, never the real one."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("SIGNET_")}
    clean.update(HOME=str(tmp_path), SIGNET_TOKEN=TOKEN, SIGNET_OUTBOX=str(outbox))
    return clean


def test_server_down_exits_0_silently_and_queues_the_event_once(env, tmp_path):
    del env["SIGNET_OUTBOX"]  # the default, under $HOME
    started = time.monotonic()

    proc = run_hook(env, SESSION_START, "--url", closed_port_url())

    assert proc.returncode == 0
    assert proc.stdout == b""
    assert len(proc.stderr.splitlines()) == 1
    assert b"Traceback" not in proc.stderr
    assert time.monotonic() - started < 10
    outbox = tmp_path / ".signet" / "outbox.jsonl"
    entries = outbox_entries(outbox)
    assert len(entries) == 1
    entry = entries[0]
    assert sorted(entry) == ["body", "harness", "key", "queued_at", "url"]
    assert len(entry["key"]) == 32
    int(entry["key"], 16)
    assert entry["url"].endswith("/api/hooks/claude-code/")
    assert entry["harness"] == "claude-code"
    payload = json.loads(SESSION_START)
    assert {k: v for k, v in entry["body"].items() if k != "signet"} == payload
    assert entry["body"]["signet"]["queued_at"] == entry["queued_at"]
    assert entry["body"]["signet"]["project_normalized"] == payload["cwd"]
    assert TOKEN not in outbox.read_text()
    assert outbox.stat().st_mode & 0o777 == 0o600
    assert outbox.parent.stat().st_mode & 0o777 == 0o700


def test_a_server_that_never_answers_is_cut_off_by_the_deadline(env, outbox):
    with socket.socket() as listener:
        # Listening but never accepting: the connection opens, the reply never comes.
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()

        proc = run_hook(env, PROMPT, "--url", url, "--timeout", "0.5")

        elapsed = time.monotonic() - started
    assert proc.returncode == 0
    assert proc.stdout == b""
    assert elapsed < 5
    assert len(outbox_entries(outbox)) == 1


def test_a_trickling_server_is_cut_off_by_the_watchdog_and_the_event_queued(env, outbox):
    # One byte every 50 ms never trips a socket timeout: only the watchdog ends this.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while not stop.wait(0.05):
                try:
                    conn.sendall(b"a")
                except OSError:
                    return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    started = time.monotonic()
    try:
        proc = run_hook(env, PROMPT, "--url", url, "--timeout", "0.5")
    finally:
        stop.set()
        listener.close()
        thread.join(5)

    assert proc.returncode == 0
    assert proc.stdout == b""
    assert proc.stderr == b"signet-hook: deadline reached\n"
    assert 1.4 < time.monotonic() - started < 5
    assert len(outbox_entries(outbox)) == 1


@pytest.mark.parametrize("stdin", [b"", b"not json {", b"[1, 2]", b"\xff\xfe"])
def test_garbage_stdin_exits_0_with_nothing_on_stdout(env, outbox, stdin):
    proc = run_hook(env, stdin, "--url", closed_port_url())

    assert proc.returncode == 0
    assert proc.stdout == b""
    assert proc.stderr.startswith(b"signet-hook: stdin is not")
    assert not outbox.exists()


def test_bad_options_exit_0(env):
    proc = run_hook(env, PROMPT, "--url", "ftp://nowhere", "--bogus")

    assert proc.returncode == 0
    assert proc.stdout == b""
    assert len(proc.stderr.splitlines()) == 1


def test_missing_token_exits_0_and_is_not_queued(env, outbox):
    # A missing token is a configuration error like a 401: queued events could never be
    # delivered with it, so nothing is sent and nothing is kept.
    del env["SIGNET_TOKEN"]
    with recording_server() as (url, received):
        proc = run_hook(env, PROMPT, "--url", url)

    assert proc.returncode == 0
    assert proc.stdout == b""
    assert b"SIGNET_TOKEN is not set" in proc.stderr
    assert received == []
    assert not outbox.exists()


def test_delivery_prints_the_reply_exactly_and_sends_the_headers(env, outbox):
    env["OTHER_TOKEN"] = "sgt_other"
    with recording_server((200, REPLY)) as (url, received):
        proc = run_hook(env, SESSION_START, "--url", url + "/", "--token-env", "OTHER_TOKEN")

    assert proc.returncode == 0
    assert proc.stdout == REPLY
    assert proc.stderr == b""
    assert len(received) == 1
    request = received[0]
    assert request.path == "/api/hooks/claude-code/"
    assert request.headers["Authorization"] == "Bearer sgt_other"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["User-Agent"] == "signet-hook/1"
    assert len(request.headers["Idempotency-Key"]) == 32
    assert request.body["hook_event_name"] == "SessionStart"
    assert request.body["signet"] == {"project_normalized": "/home/alice/projects/webapp"}
    assert not outbox.exists()


def test_url_comes_from_the_environment_when_no_option(env):
    with recording_server((200, b"{}")) as (url, received):
        env["SIGNET_URL"] = url
        proc = run_hook(env, PROMPT)

    assert proc.stdout == b"{}"
    assert len(received) == 1


@pytest.mark.parametrize("reply", [b"", b"[1]", b"not json", b'"text"'])
def test_a_reply_that_is_not_a_json_object_prints_nothing(env, reply):
    with recording_server((200, reply)) as (url, _):
        proc = run_hook(env, PROMPT, "--url", url)

    assert proc.returncode == 0
    assert proc.stdout == b""


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_a_refused_event_is_not_queued(env, outbox, status):
    with recording_server((status, b'{"detail": "no"}')) as (url, received):
        proc = run_hook(env, PROMPT, "--url", url)

    assert proc.returncode == 0
    assert proc.stdout == b""
    assert f"HTTP {status}".encode() in proc.stderr
    assert len(received) == 1
    assert not outbox.exists()


@pytest.mark.parametrize("status", [429, 500, 503])
def test_an_overloaded_or_failing_server_gets_the_event_queued(env, outbox, status):
    with recording_server((status, b'{"hookSpecificOutput": {}}')) as (url, received):
        proc = run_hook(env, PROMPT, "--url", url)

    assert proc.returncode == 0
    assert proc.stdout == b""
    entries = outbox_entries(outbox)
    assert len(entries) == 1
    assert entries[0]["key"] == received[0].headers["Idempotency-Key"]


def test_queued_events_are_replayed_once_with_their_original_keys(env, outbox):
    with recording_server((503, b""), (503, b""), (200, REPLY)) as (url, received):
        run_hook(env, PROMPT, "--url", url)
        run_hook(env, PROMPT, "--url", url)
        queued = [entry["key"] for entry in outbox_entries(outbox)]
        assert len(queued) == 2

        proc = run_hook(env, SESSION_START, "--url", url)
        assert outbox.read_bytes() == b""

        again = run_hook(env, PROMPT, "--url", url)

    assert proc.stdout == REPLY  # only the live event's reply; replays print nothing
    assert again.stdout == b""
    keys = [request.headers["Idempotency-Key"] for request in received]
    assert keys[:2] == queued
    live = keys[2]
    assert keys[3:5] == queued  # replayed in order, after the live event
    assert len(keys) == 6  # the fourth run replays nothing
    assert live not in queued
    assert received[3].body["signet"]["queued_at"]
    assert received[3].body["prompt"] == json.loads(PROMPT)["prompt"]


def write_outbox(outbox: Path, *entries: dict[str, Any]) -> None:
    outbox.parent.mkdir(parents=True, exist_ok=True)
    outbox.write_text("".join(json.dumps(entry) + "\n" for entry in entries))


def queued(key: str, url: str) -> dict[str, Any]:
    return {
        "key": key,
        "url": f"{url}/api/hooks/claude-code/",
        "harness": "claude-code",
        "body": {"hook_event_name": "Stop", "n": key},
        "queued_at": "2026-01-01T00:00:00+00:00",
    }


def test_replay_drops_delivered_and_refused_and_keeps_the_rest(env, outbox):
    other = queued("k-other", "http://elsewhere.invalid")
    with recording_server((200, b""), (200, b""), (400, b""), (500, b""), (503, b"")) as (
        url,
        received,
    ):
        write_outbox(
            outbox,
            queued("k1", url),
            other,
            queued("k2", url),
            queued("k3", url),
            queued("k4", url),
            queued("k5", url),
        )
        outbox.write_bytes(outbox.read_bytes() + b'{"cut short\n')

        proc = run_hook(env, PROMPT, "--url", url)

    assert proc.returncode == 0
    sent = [request.headers["Idempotency-Key"] for request in received[1:]]
    # k3 got a 500: kept, and the next is tried; k4 got a 503: the server is struggling,
    # so k5 waits for the next time.
    assert sent == ["k1", "k2", "k3", "k4"]
    assert [entry["key"] for entry in outbox_entries(outbox)] == ["k-other", "k3", "k4", "k5"]


def test_replay_is_skipped_while_another_hook_holds_the_replay_lock(env, outbox):
    with recording_server() as (url, received):
        write_outbox(outbox, queued("k1", url))
        with open(f"{outbox}.replay.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            proc = run_hook(env, PROMPT, "--url", url)

    assert proc.returncode == 0
    assert len(received) == 1  # the live event only
    assert [entry["key"] for entry in outbox_entries(outbox)] == ["k1"]


def test_the_outbox_keeps_only_the_newest_entries(outbox, monkeypatch):
    monkeypatch.setattr(signet_hook, "OUTBOX_MAX_ENTRIES", 3)
    outbox.parent.mkdir()
    outbox.write_bytes(b'{"half a line')  # a killed writer's leftover

    for n in range(5):
        signet_hook.outbox_append(outbox, queued(f"k{n}", "http://x"))

    assert [entry["key"] for entry in outbox_entries(outbox)] == ["k2", "k3", "k4"]


def test_run_in_process_reports_one_line(outbox, monkeypatch, tmp_path):
    monkeypatch.setenv("SIGNET_TOKEN", TOKEN)
    stdout = io.BytesIO()

    message = signet_hook.run(
        ["--url", closed_port_url(), "--outbox", str(outbox), "claude-code"],
        stdin=io.BytesIO(PROMPT),
        stdout=stdout,
        watchdog=False,
    )

    assert "server unreachable" in message
    assert "queued" in message
    assert stdout.getvalue() == b""
    assert len(outbox_entries(outbox)) == 1


# --- the "signet" fields -------------------------------------------------------------------

SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER_SHA = "fedcba9876543210fedcba9876543210fedcba98"


def make_repo(root: Path, head: str) -> Path:
    git = root / ".git"
    (git / "refs" / "heads" / "feature").mkdir(parents=True)
    (git / "HEAD").write_text(head + "\n")
    (git / "refs" / "heads" / "feature" / "x").write_text(SHA + "\n")
    (git / "packed-refs").write_text(
        f"# pack-refs with: peeled fully-peeled sorted\n{OTHER_SHA} refs/heads/main\n"
    )
    sub = root / "src" / "pkg"
    sub.mkdir(parents=True)
    return sub


def test_git_fields_from_a_branch_ref(tmp_path):
    sub = make_repo(tmp_path / "repo", "ref: refs/heads/feature/x")
    link = tmp_path / "link"
    link.symlink_to(sub)

    context = signet_hook.client_context({"cwd": str(link)})

    assert context == {
        "project_normalized": str(sub.resolve()),
        "git_root": str((tmp_path / "repo").resolve()),
        "git_branch": "feature/x",
        "git_head": SHA,
    }


def test_git_fields_from_packed_refs_detached_and_unborn(tmp_path):
    sub = make_repo(tmp_path / "packed", "ref: refs/heads/main")
    assert signet_hook.client_context({"cwd": str(sub)})["git_head"] == OTHER_SHA

    sub = make_repo(tmp_path / "detached", SHA)
    context = signet_hook.client_context({"cwd": str(sub)})
    assert (context["git_branch"], context["git_head"]) == ("", SHA)

    sub = make_repo(tmp_path / "unborn", "ref: refs/heads/new")
    context = signet_hook.client_context({"cwd": str(sub)})
    assert context["git_branch"] == "new"
    assert "git_head" not in context


def test_git_fields_in_a_linked_worktree(tmp_path):
    make_repo(tmp_path / "main", "ref: refs/heads/main")
    private = tmp_path / "main" / ".git" / "worktrees" / "wt"
    private.mkdir(parents=True)
    (private / "HEAD").write_text("ref: refs/heads/feature/x\n")
    (private / "commondir").write_text("../..\n")
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {private}\n")

    context = signet_hook.client_context({"cwd": str(worktree)})

    assert context["git_root"] == str(worktree.resolve())
    assert context["git_branch"] == "feature/x"
    assert context["git_head"] == SHA


def test_no_git_and_no_cwd_leave_the_fields_out(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()

    assert signet_hook.client_context({"cwd": str(plain)}) == {
        "project_normalized": str(plain.resolve())
    }
    assert signet_hook.client_context({}) == {}
    assert signet_hook.client_context({"cwd": 42}) == {}


def test_git_fields_travel_in_the_posted_payload(env, tmp_path):
    sub = make_repo(tmp_path / "repo", "ref: refs/heads/feature/x")
    payload = json.loads(PROMPT)
    payload["cwd"] = str(sub)

    with recording_server((200, b"{}")) as (url, received):
        run_hook(env, json.dumps(payload).encode(), "--url", url)

    assert received[0].body["signet"] == {
        "project_normalized": str(sub.resolve()),
        "git_root": str((tmp_path / "repo").resolve()),
        "git_branch": "feature/x",
        "git_head": SHA,
    }
