"""The command hook, ``hooks/signet_hook.py``, as Claude Code runs it: a real process.

The HTTP peer here is a small recording server standing in for Signet, so that delivery,
failure and replay can be driven exactly; the real endpoint has its own end-to-end test.
"""

from __future__ import annotations

import _socket
import fcntl
import io
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
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
def recording_server(
    *responses: tuple[int, bytes], delay: float = 0.0
) -> Iterator[tuple[str, list[Received]]]:
    """A one-thread HTTP server answering POSTs with ``responses`` in turn (then 200, empty),
    each ``delay`` seconds after it read the request."""
    queue = list(responses)
    received: list[Received] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append(Received(self.path, dict(self.headers), json.loads(body)))
            time.sleep(delay)
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


@contextmanager
def hanging_server() -> Iterator[tuple[str, Any]]:
    """Accepts connections and reads them, never answering (a server whose database hangs);
    yields its URL and a function counting the connections so far."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []

    def accept() -> None:
        with suppress(OSError):
            while True:
                conn, _ = listener.accept()
                held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", lambda: len(held)
    finally:
        with suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() under way
        listener.close()
        for conn in held:
            conn.close()
        thread.join(5)


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def run_command(
    env: dict[str, str], payload: bytes, command: list[str]
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        command,
        input=payload,
        capture_output=True,
        env=env,
        cwd=PROJECT_DIR,
        timeout=15,
        check=False,
    )


def run_hook(env: dict[str, str], payload: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    return run_command(env, payload, [sys.executable, str(HOOK), *args, "claude-code"])


def run_hook_listing_modules(
    env: dict[str, str], payload: bytes, url: str
) -> subprocess.CompletedProcess[bytes]:
    """The hook in a bare interpreter (no site), printing on stderr the modules it loaded."""
    code = (
        "import sys; sys.path.insert(0, sys.argv.pop(1)); import signet_hook; "
        "signet_hook.main(); sys.stderr.write(' '.join(sorted(sys.modules)))"
    )
    return run_command(
        env,
        payload,
        [sys.executable, "-I", "-S", "-c", code, str(HOOK.parent), "--url", url, "claude-code"],
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


def test_a_trickling_server_is_cut_off_at_the_deadline_and_the_event_queued(env, outbox):
    # One byte every 50 ms never trips a per-read timeout; each read is bounded by the time
    # left, so the client gives up at the deadline, well before the watchdog would.
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
    assert proc.stderr.startswith(b"signet-hook: server unreachable (timed out); event queued")
    assert time.monotonic() - started < 5
    assert len(outbox_entries(outbox)) == 1


def test_the_watchdog_queues_the_event_and_exits_0_when_the_request_hangs(env, outbox):
    # What no socket timeout bounds (a stuck DNS look-up, urllib's reads for https) is
    # stood in for by a request that sleeps; only the watchdog ends the run.
    code = (
        "import sys, time; sys.path.insert(0, sys.argv.pop(1)); import signet_hook; "
        "signet_hook.post_event = lambda *args, **kwargs: time.sleep(30); signet_hook.cli()"
    )
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code, str(HOOK.parent), "--timeout", "0.5", "claude-code"],
        input=PROMPT,
        capture_output=True,
        env=env,
        timeout=15,
        check=False,
    )

    assert proc.returncode == 0
    assert proc.stdout == b""
    assert proc.stderr == b"signet-hook: deadline reached\n"
    assert 1.4 < time.monotonic() - started < 10
    assert len(outbox_entries(outbox)) == 1
    # Stuck past its deadline: the next hooks of the minute need not be.
    endpoint = f"{signet_hook.DEFAULT_URL}/api/hooks/claude-code/"
    assert signet_hook.server_marked_down(str(outbox), endpoint)


def down_marker(outbox: Path) -> Path:
    return outbox.with_name(outbox.name + ".down")


def test_a_hook_that_waited_on_a_hung_server_spares_the_next_ones_the_wait(env, outbox):
    # Claude Code runs several hooks a turn: only the first may wait on a server that
    # accepts and never answers; those that follow within the minute queue at once.
    with hanging_server() as (url, accepted):
        first = run_hook(env, PROMPT, "--url", url, "--timeout", "0.5")
        later = [run_hook(env, PROMPT, "--url", url, "--timeout", "0.5") for _ in range(3)]

        assert accepted() == 1
    assert first.stderr.startswith(b"signet-hook: server unreachable (timed out); event queued")
    for proc in later:
        assert proc.returncode == 0
        assert proc.stdout == b""
        assert proc.stderr.startswith(b"signet-hook: the server did not answer a moment ago")
    entries = outbox_entries(outbox)
    assert len(entries) == 4  # every event kept, to be replayed
    assert len({entry["key"] for entry in entries}) == 4
    assert down_marker(outbox).read_text() == f"{url}/api/hooks/claude-code/"


@pytest.mark.parametrize(("source", "delivered"), [("compact", True), ("startup", False)])
def test_the_start_after_a_compaction_waits_longer_for_its_recovery(env, outbox, source, delivered):
    # A server that answers in 1.2 s: past a start's 0.8 s, within the 2 s the start right
    # after a compaction (the recovery the agent needs most) may wait, as PreCompact may.
    start = json.dumps({**json.loads((FIXTURES / "session_start_startup.json").read_bytes()),
                        "source": source}).encode()  # fmt: skip
    with recording_server((200, REPLY), delay=1.2) as (url, received):
        proc = run_hook(env, start, "--url", url, "--timeout", "0.8")

    assert len(received) == 1
    assert proc.returncode == 0
    assert (proc.stdout == REPLY) is delivered
    assert (outbox_entries(outbox) == []) is delivered
    assert down_marker(outbox).exists() is not delivered


def test_after_a_minute_the_hung_server_is_tried_again_and_the_events_replayed(env, outbox):
    with recording_server() as (url, received):
        # The server hung a moment ago (its mark), two events were queued meanwhile.
        endpoint = f"{url}/api/hooks/claude-code/"
        marker = down_marker(outbox)
        outbox.parent.mkdir(parents=True)
        marker.write_text(endpoint)
        write_outbox(outbox, queued("k1", url), queued("k2", url))
        queued_too = run_hook(env, PROMPT, "--url", url)
        assert received == []
        assert b"did not answer a moment ago" in queued_too.stderr
        stale = time.time() - signet_hook.DOWN_SECONDS - 1
        os.utime(marker, (stale, stale))

        proc = run_hook(env, PROMPT, "--url", url)

    assert proc.stderr == b""
    keys = [r.headers["Idempotency-Key"] for r in received]
    assert len(keys) == 4  # the three queued, oldest first, then the live one
    assert keys[:2] == ["k1", "k2"]
    assert outbox_entries(outbox) == []
    assert not marker.exists()


def test_a_hung_server_is_marked_even_on_an_entry_that_no_longer_holds_events_back(env, outbox):
    with hanging_server() as (url, accepted):
        write_outbox(outbox, {**queued("k1", url), "stalls": signet_hook.MAX_REPLAY_STALLS})
        run_hook(env, PROMPT, "--url", url, "--timeout", "0.5")
        run_hook(env, PROMPT, "--url", url, "--timeout", "0.5")

        assert accepted() == 1
    entries = outbox_entries(outbox)
    assert (len(entries), entries[0]["key"]) == (3, "k1")


def test_a_refused_connection_marks_nothing_the_next_hook_tries_again(env, outbox):
    run_hook(env, PROMPT, "--url", closed_port_url())

    assert not down_marker(outbox).exists()
    assert len(outbox_entries(outbox)) == 1


def test_a_replay_that_got_no_answer_marks_the_server_too(env, outbox):
    with hanging_server() as (url, accepted):
        write_outbox(outbox, queued("k1", url))
        run_hook(env, PROMPT, "--url", url, "--timeout", "1")
        run_hook(env, PROMPT, "--url", url, "--timeout", "1")

        assert accepted() == 1
    assert len(outbox_entries(outbox)) == 3


def test_a_mark_for_another_server_does_not_hold_this_one_back(env, outbox):
    outbox.parent.mkdir(parents=True)
    down_marker(outbox).write_text("http://127.0.0.1:9/api/hooks/claude-code/")
    with recording_server((200, REPLY)) as (url, received):
        proc = run_hook(env, PROMPT, "--url", url)

    assert proc.stdout == REPLY
    assert len(received) == 1
    assert down_marker(outbox).exists()  # that server's mark is that server's business


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


def test_a_token_that_cannot_be_a_header_is_not_sent_nor_queued(env, outbox):
    env["SIGNET_TOKEN"] = "sgt_a\r\nX-Injected: 1"
    with recording_server() as (url, received):
        proc = run_hook(env, PROMPT, "--url", url)

    assert proc.returncode == 0
    assert proc.stdout == b""
    assert b"SIGNET_TOKEN holds characters a header cannot carry" in proc.stderr
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
    # The first run's prompt is queued; the second replays it (refused again: the server
    # answered, so nothing of it is in flight) and queues its own; the third replays both,
    # then sends its own.
    busy = (503, b"")
    with recording_server(busy, busy, busy, (200, b""), (200, b""), (200, REPLY)) as (
        url,
        received,
    ):
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
    assert keys[:3] == [queued[0], queued[0], queued[1]]
    assert keys[3:5] == queued  # replayed in their order, before the live event
    live = keys[5]
    assert received[5].body["hook_event_name"] == "SessionStart"
    assert len(keys) == 7  # the fourth run replays nothing
    assert live not in queued
    assert received[3].body["signet"]["queued_at"]
    assert received[3].body["prompt"] == json.loads(PROMPT)["prompt"]
    assert "queued_at" not in received[5].body["signet"]


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
    sent = [request.headers["Idempotency-Key"] for request in received[:-1]]
    # Replays go before the live event. k3 was refused (400): dropped. k4 got a 500: kept,
    # and the next is tried; k5 got a 503: the server is struggling, so the replay stops.
    # Each was answered, so none can land after the live event, which is sent.
    assert sent == ["k1", "k2", "k3", "k4", "k5"]
    assert received[-1].body["hook_event_name"] == json.loads(PROMPT)["hook_event_name"]
    assert [entry["key"] for entry in outbox_entries(outbox)] == ["k-other", "k4", "k5"]


def test_a_replay_whose_requests_all_got_an_answer_lets_the_live_event_go(env, outbox):
    # k1's 500 may be its own fault: it stays queued, but it cannot land after the live
    # event any more, so the live event is sent.
    with recording_server((500, b""), (200, REPLY)) as (url, received):
        write_outbox(outbox, queued("k1", url))
        proc = run_hook(env, PROMPT, "--url", url)

    assert proc.stdout == REPLY
    assert len(received) == 2
    assert received[0].headers["Idempotency-Key"] == "k1"
    assert [entry["key"] for entry in outbox_entries(outbox)] == ["k1"]


def test_a_replay_with_no_answer_in_time_queues_the_live_event_behind_it(env, outbox):
    # The queued event's request may still be carried out after the client gave up on it:
    # the live event must not overtake it, so it is queued, not sent.
    with hanging_server() as (url, accepted):
        write_outbox(outbox, queued("k1", url))
        proc = run_hook(env, PROMPT, "--url", url, "--timeout", "1")

    assert proc.returncode == 0
    assert proc.stdout == b""
    assert accepted() == 1  # the replay's request only
    left = outbox_entries(outbox)
    assert len(left) == 2
    assert (left[0]["key"], left[0]["stalls"]) == ("k1", 1)
    assert left[1]["body"]["hook_event_name"] == json.loads(PROMPT)["hook_event_name"]


@pytest.mark.parametrize("status", [502, 504])
def test_a_proxy_that_gave_up_waiting_holds_the_live_event_back_too(env, outbox, status):
    with recording_server((status, b"")) as (url, received):
        write_outbox(outbox, queued("k1", url))
        proc = run_hook(env, PROMPT, "--url", url)

    assert f"HTTP {status} on replaying the outbox".encode() in proc.stderr
    assert len(received) == 1
    left = outbox_entries(outbox)
    assert (len(left), left[0]["key"], left[0]["stalls"]) == (2, "k1", 1)


def test_an_entry_that_held_events_back_three_times_no_longer_does(env, outbox):
    with recording_server((504, b""), (200, REPLY)) as (url, received):
        write_outbox(outbox, {**queued("k1", url), "stalls": signet_hook.MAX_REPLAY_STALLS})
        proc = run_hook(env, PROMPT, "--url", url)

    assert proc.stdout == REPLY  # the live event went
    assert len(received) == 2
    assert [entry["key"] for entry in outbox_entries(outbox)] == ["k1"]


def test_an_entry_whose_key_no_header_can_carry_is_dropped(env, outbox):
    with recording_server((200, b""), (200, REPLY)) as (url, received):
        write_outbox(outbox, queued("k\u20ac", url), queued("k2", url))
        proc = run_hook(env, PROMPT, "--url", url)

    assert proc.stdout == REPLY
    assert [request.headers["Idempotency-Key"] for request in received[:1]] == ["k2"]
    assert outbox_entries(outbox) == []


def test_a_hook_waits_for_another_hooks_replay_and_queues_behind_it_at_the_deadline(env, outbox):
    # What the other hook sent may be in flight: like a request with no answer, the live
    # event may not overtake it.
    with recording_server() as (url, received):
        write_outbox(outbox, queued("k1", url))
        with open(f"{outbox}.replay.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            proc = run_hook(env, PROMPT, "--url", url, "--timeout", "1")

    assert proc.returncode == 0
    assert b"another hook was still replaying" in proc.stderr
    assert received == []
    left = outbox_entries(outbox)
    assert [entry["key"] for entry in left[:1]] == ["k1"]
    assert len(left) == 2


def test_a_replay_that_another_hook_finishes_meanwhile_lets_the_live_event_go(env, outbox):
    with recording_server((200, REPLY)) as (url, received):
        write_outbox(outbox, queued("k1", url))
        lock = open(f"{outbox}.replay.lock", "w")  # noqa: SIM115 (released by the timer)
        fcntl.flock(lock, fcntl.LOCK_EX)

        def the_other_hook_is_done() -> None:
            outbox.write_bytes(b"")  # it delivered k1
            lock.close()

        timer = threading.Timer(0.3, the_other_hook_is_done)
        timer.start()
        proc = run_hook(env, PROMPT, "--url", url, "--timeout", "3")
        timer.join()

    assert proc.stdout == REPLY
    assert len(received) == 1  # the live event only: k1 was the other hook's
    assert outbox_entries(outbox) == []


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


# --- the socket client (plain http://) ------------------------------------------------------


@dataclass
class RawRequest:
    head: bytes
    body: bytes


@contextmanager
def raw_peer(reply: bytes) -> Iterator[tuple[str, list[RawRequest]]]:
    """A TCP peer for one request: it reads the request whole, writes ``reply`` verbatim and
    closes the connection, so that any answer, well-formed or not, can be played."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(10)  # a client that never connects must not hang the test
    requests: list[RawRequest] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            while len(body) < length:
                body += conn.recv(65536)
            requests.append(RawRequest(head, body))
            with suppress(OSError):  # a client that stopped reading early
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", requests
    finally:
        thread.join(10)
        listener.close()


def http_reply(status_line: str, body: bytes = b"", *headers: str) -> bytes:
    return "".join(f"{line}\r\n" for line in (status_line, *headers, "")).encode() + body


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


def post(url: str, *, timeout: float = 5.0) -> signet_hook.Delivery:
    return signet_hook.post_event(
        f"{url}/api/hooks/claude-code/", b'{"a": 1}', token=TOKEN, key="k" * 32, timeout=timeout
    )


@pytest.fixture(autouse=True)
def no_proxy_variables(monkeypatch):
    # A proxy variable from the machine running the tests would send requests to urllib.
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)


def test_the_socket_client_sends_one_complete_request():
    with raw_peer(http_reply("HTTP/1.1 200 OK", b"{}", "Content-Length: 2")) as (url, requests):
        result = post(url)

    assert (result.status, result.body) == (200, b"{}")
    request_line, *header_lines = requests[0].head.split(b"\r\n")
    assert request_line == b"POST /api/hooks/claude-code/ HTTP/1.1"
    assert dict(line.split(b": ", 1) for line in header_lines) == {
        b"Host": url.removeprefix("http://").encode(),
        b"Accept-Encoding": b"identity",
        b"Connection": b"close",
        b"Content-Type": b"application/json",
        b"Content-Length": b"8",
        b"Authorization": f"Bearer {TOKEN}".encode(),
        b"Idempotency-Key": b"k" * 32,
        b"User-Agent": b"signet-hook/1",
    }
    assert requests[0].body == b'{"a": 1}'


@pytest.mark.parametrize(
    ("status", "delivered", "retryable"),
    [
        (200, True, False),
        (201, True, False),
        (302, False, False),  # not followed: the POST would become a bodiless GET
        (400, False, False),
        (401, False, False),
        (429, False, True),
        (500, False, True),
        (503, False, True),
    ],
)
def test_the_socket_client_reports_the_status(status, delivered, retryable):
    reply = http_reply(f"HTTP/1.1 {status} Whatever", b'{"x": 1}', "Content-Length: 8")
    with raw_peer(reply) as (url, _):
        result = post(url)

    assert (result.status, result.delivered, result.retryable) == (status, delivered, retryable)
    assert result.body == (b'{"x": 1}' if delivered else b"")  # only a 2xx body is used


def test_a_reply_without_a_length_ends_with_the_connection():
    with raw_peer(http_reply("HTTP/1.0 200 OK", b'{"a": "b"}')) as (url, _):
        result = post(url)

    assert (result.status, result.body) == (200, b'{"a": "b"}')


def test_a_content_length_bounds_the_body():
    # Bytes after the announced length are not part of the reply.
    reply = http_reply("HTTP/1.1 200 OK", b'{"a": 1}garbage', "Content-Length: 8")
    with raw_peer(reply) as (url, _):
        result = post(url)

    assert result.body == b'{"a": 1}'


def test_a_chunked_reply_is_decoded():
    body = b'7;ext="x"\r\n{"a": 1\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n'
    reply = http_reply(
        "HTTP/1.1 200 OK",
        body,
        "Transfer-Encoding: chunked",
        "Content-Length: 3",  # ignored: chunked wins
    )
    with raw_peer(reply) as (url, _):
        result = post(url)

    assert (result.status, result.body) == (200, b'{"a": 1}')


def test_interim_answers_are_skipped():
    reply = http_reply("HTTP/1.1 100 Continue") + http_reply(
        "HTTP/1.1 200 OK", b"{}", "Content-Length: 2"
    )
    with raw_peer(reply) as (url, _):
        result = post(url)

    assert (result.status, result.body) == (200, b"{}")


LARGE = b'{"x": "' + b"a" * 5000 + b'"}'


@pytest.mark.parametrize(
    "reply",
    [
        http_reply("HTTP/1.1 200 OK", LARGE, f"Content-Length: {len(LARGE)}"),
        http_reply("HTTP/1.0 200 OK", LARGE),
        http_reply(
            "HTTP/1.1 200 OK", chunked(LARGE[:700], LARGE[700:]), "Transfer-Encoding: chunked"
        ),
    ],
    ids=["content-length", "close-delimited", "chunked"],
)
def test_a_reply_over_the_cap_is_cut_and_never_printed(monkeypatch, reply):
    monkeypatch.setattr(signet_hook, "MAX_RESPONSE_BYTES", 1000)
    with raw_peer(reply) as (url, _):
        result = post(url)

    assert result.delivered
    assert result.body == LARGE[:1001]  # one byte over the cap: enough to know
    stdout = io.BytesIO()
    signet_hook.emit_reply(result.body, stdout)
    assert stdout.getvalue() == b""


@pytest.mark.parametrize(
    "reply",
    [
        http_reply("HTTP/1.1 200 OK", b'{"a": ', "Content-Length: 100"),
        http_reply("HTTP/1.1 200 OK", b'10\r\n{"a": ', "Transfer-Encoding: chunked"),
        b"HTTP/1.1 200 OK\r\nContent-Le",
    ],
    ids=["short-content-length", "short-chunk", "in-the-headers"],
)
def test_a_2xx_reply_cut_short_is_delivered_but_not_printed(reply):
    with raw_peer(reply) as (url, _):
        result = post(url)

    # The server answered 2xx: it has the event, so it is not queued; half a reply is no reply.
    assert result.delivered
    assert result.body == b""


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (b"", "server unreachable (RemoteDisconnected)"),
        (b"SSH-2.0-OpenSSH_9.6\r\n", "server unreachable (BadStatusLine)"),
        (b"HTTP/1.1 2000 OK\r\n\r\n", "server unreachable (BadStatusLine)"),
        (
            http_reply("HTTP/1.1 200 OK", b"{}", "Content-Length: 2x"),
            "server unreachable (InvalidContentLength)",
        ),
        (
            b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 101 + b"\r\n",
            "server unreachable (TooManyHeaders)",
        ),
        (
            b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n",
            "server unreachable (LineTooLong)",
        ),
    ],
    ids=["closed-before-answering", "not-http", "bad-status", "bad-length", "headers", "line"],
)
def test_no_usable_answer_is_retryable(reply, error):
    with raw_peer(reply) as (url, _):
        result = post(url)

    assert result.status is None
    assert result.retryable
    assert result.describe() == error


def test_a_server_that_never_answers_is_given_up_at_the_deadline():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # connections complete in the backlog; none is ever read
        started = time.monotonic()

        result = post(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout=0.3)

    assert time.monotonic() - started < 2
    assert result.describe() == "server unreachable (timed out)"
    assert result.retryable


def test_a_refused_connection_is_retryable():
    result = post(closed_port_url())

    assert result.status is None
    assert result.describe().startswith("server unreachable (")
    assert "refused" in result.describe()


def test_an_ip_literal_is_not_looked_up_and_a_name_is(monkeypatch: pytest.MonkeyPatch) -> None:
    lookup = _socket.getaddrinfo
    looked_up: list[str] = []

    def recording_lookup(host: str, *args: Any) -> Any:
        looked_up.append(host)
        return lookup(host, *args)

    monkeypatch.setattr(_socket, "getaddrinfo", recording_lookup)  # what the hook calls
    reply = http_reply("HTTP/1.1 200 OK", b"{}", "Content-Length: 2")
    with raw_peer(reply) as (url, _):
        assert post(url).delivered
    with raw_peer(reply) as (url, _):
        assert post(url.replace("127.0.0.1", "localhost")).delivered

    assert looked_up == ["localhost"]


@pytest.mark.parametrize(
    ("url", "target"),
    [
        (
            "http://127.0.0.1:8000/api/hooks/claude-code/",
            ("127.0.0.1", 8000, "127.0.0.1:8000", "/api/hooks/claude-code/"),
        ),
        ("HTTP://Signet.test/base/api/", ("Signet.test", 80, "Signet.test", "/base/api/")),
        ("http://signet.test:/api/?q=1", ("signet.test", 80, "signet.test:", "/api/?q=1")),
        ("https://signet.test/api/", None),  # TLS: urllib
        ("http://user:pw@signet.test/api/", None),
        ("http://[::1]:8000/api/", None),
        ("http://signet.test:99999/api/", None),
        ("http://signet.test:8o/api/", None),
        ("http://signet.test/api/#top", None),
        ("http://signét.test/api/", None),
        ("http://signet.test?x/api/", None),
    ],
)
def test_which_urls_the_socket_client_takes(url, target):
    assert signet_hook._http_target(url) == target


def test_a_proxy_variable_sends_remote_urls_to_urllib_but_not_local_ones(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.test:3128")

    assert signet_hook._http_target("http://signet.test/api/") is None
    assert signet_hook._http_target("http://localhost:8000/api/") is not None
    assert signet_hook._http_target("http://127.0.0.1:8000/api/") is not None


def test_urllib_still_carries_what_the_socket_client_leaves_to_it(monkeypatch):
    # A proxy variable and a remote host: urllib sends the request to the proxy (here the
    # recording server), with the absolute URL as its target.
    with recording_server((200, b"{}")) as (proxy, received):
        monkeypatch.setenv("http_proxy", proxy)
        result = signet_hook.post_event(
            "http://signet.invalid/api/hooks/claude-code/",
            b'{"a": 1}',
            token=TOKEN,
            key="k" * 32,
            timeout=5,
        )

    assert (result.status, result.body) == (200, b"{}")
    assert received[0].path == "http://signet.invalid/api/hooks/claude-code/"
    assert received[0].headers["Idempotency-Key"] == "k" * 32
    assert received[0].body == {"a": 1}


# --- what replaces the heavy imports ---------------------------------------------------------


@pytest.mark.parametrize(
    "document",
    [
        b'{"a": [1, 2.5, -3e10, true, false, null], "b": {"c": "d\\u00e9\\ud83d\\ude00"}}',
        b' \n\t{"x": 1}\r\n ',
        '{"é": "ü 😀"}'.encode(),
        b"[NaN, Infinity, -Infinity, 1e999]",
        b"123456789012345678901234567890",
        '\ufeff{"bom": 1}'.encode(),  # json.loads' own encoding detection handles these two
        '{"wide": 1}'.encode("utf-16"),
        b'"\xed\xa0\x80"',  # a lone surrogate, which json.loads lets through
    ],
)
def test_loads_is_json_loads(document):
    assert repr(signet_hook._loads(document)) == repr(json.loads(document))  # NaN != NaN


@pytest.mark.parametrize("document", [b"", b" ", b"{", b"[1] x", b"{'a': 1}", b"\xff", b'"\x01"'])
def test_loads_refuses_what_json_loads_refuses(document):
    with pytest.raises((json.JSONDecodeError, UnicodeDecodeError)) as refused:
        json.loads(document)
    with pytest.raises(type(refused.value), match=re.escape(str(refused.value))):
        signet_hook._loads(document)


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, 2.5, None, True, False], "é": '😀\n\t"', "n": float("nan"), "i": float("inf")},
        {"big": 10**30, "nested": {"x": [{}, []]}, "": ""},
        {},
    ],
)
def test_dumps_is_json_dumps(value):
    assert signet_hook._dumps(value) == json.dumps(value)
    assert signet_hook._dumps(value, compact=True) == json.dumps(value, separators=(",", ":"))


def test_dumps_refuses_what_json_dumps_refuses() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic

    with pytest.raises(TypeError, match="not JSON serializable"):
        signet_hook._dumps({"a": object()})
    with pytest.raises(ValueError, match="Circular reference"):
        signet_hook._dumps(cyclic)


def test_keys_are_random_uuid4s():
    keys = {signet_hook._new_key() for _ in range(200)}

    assert len(keys) == 200
    for key in keys:
        parsed = uuid.UUID(hex=key)
        assert (parsed.hex, parsed.version, parsed.variant) == (key, 4, uuid.RFC_4122)


def options_tuple(options: signet_hook.Options) -> tuple[Any, ...]:
    return (options.url, options.harness, options.token_env, options.timeout, options.outbox)


@pytest.mark.parametrize(
    "argv",
    [
        ["claude-code"],
        ["--url", "http://h:1", "--token-env", "T", "--timeout", "2", "--outbox", "o", "x-y"],
        ["--url=http://h:1/", "claude-code", "--timeout=3", "--token-env="],
        ["--url", "http://h:1", "--url", "http://h:2", "claude-code"],
        ["--ur", "http://h:1", "--time", "9", "claude-code"],  # abbreviations: argparse's
        ["--timeout", "-1", "claude-code"],  # a negative number: argparse's
        ["--", "claude-code"],
    ],
)
def test_the_hand_parser_agrees_with_argparse(monkeypatch, argv):
    for name in ("SIGNET_URL", "SIGNET_HOOK_TIMEOUT", "SIGNET_OUTBOX"):
        monkeypatch.delenv(name, raising=False)
    fast = signet_hook.parse_args(argv)
    monkeypatch.setattr(signet_hook, "_split_argv", lambda argv: None)

    assert options_tuple(fast) == options_tuple(signet_hook.parse_args(argv))


def test_the_installed_command_line_needs_no_argparse():
    argv = ["--url", "http://127.0.0.1:8000", "--token-env", "SIGNET_TOKEN", "claude-code"]

    assert signet_hook._split_argv(argv) == {
        "url": "http://127.0.0.1:8000",
        "token_env": "SIGNET_TOKEN",
        "harness": "claude-code",
    }
    assert signet_hook._split_argv(["--help", "claude-code"]) is None


@pytest.mark.parametrize(
    "argv",
    [[], ["--url"], ["--bogus", "claude-code"], ["a", "b"], ["--url", "--timeout", "claude-code"]],
)
def test_command_line_mistakes_are_usage_errors(argv):
    with pytest.raises(signet_hook.HookError, match=r"^usage: "):
        signet_hook.parse_args(argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["Claude"], "invalid harness name"),
        (["claude-code\n"], "invalid harness name"),
        (["--url", "ftp://h", "claude-code"], "must be an http(s) URL"),
        (["--url", "localhost:8000", "claude-code"], "must be an http(s) URL"),
        (["--url", "http://", "claude-code"], "must be an http(s) URL"),
    ],
)
def test_bad_values_are_refused(argv, message):
    with pytest.raises(signet_hook.HookError, match=re.escape(message)):
        signet_hook.parse_args(argv)


def test_help_still_works(env):
    proc = run_hook(env, b"", "--help")

    assert proc.returncode == 0
    assert proc.stdout.startswith(b"usage: signet_hook.py")
    assert b"--token-env" in proc.stdout


def test_the_common_path_imports_no_heavy_module(env):
    # What keeps the hook fast, pinned without a timing: a delivery (with its reply and a
    # look at the outbox) loads none of the modules whose imports cost more than the request.
    with recording_server((200, REPLY)) as (url, received):
        proc = run_hook_listing_modules(env, SESSION_START, url)

    assert proc.stdout == REPLY
    assert len(received) == 1
    heavy = {
        "argparse", "collections", "contextlib", "dataclasses", "datetime", "email", "enum",
        "functools", "http", "json", "pathlib", "re", "socket", "tempfile", "threading",
        "typing", "urllib", "uuid",
    }  # fmt: skip
    assert set(proc.stderr.decode().split()) & heavy == set()


# --- Stop: the context usage of the turn's last response ------------------------------------

STOP = json.loads((FIXTURES / "stop.json").read_text())


def assistant_line(
    message_id: str, request_id: str, tokens: int, *, text: str = "ok", sidechain: bool = False
) -> dict[str, Any]:
    """One content block of a response, as Claude Code writes it: every block of a response
    repeats its id, request id and usage."""
    return {
        "type": "assistant",
        "isSidechain": sidechain,
        "requestId": request_id,
        "message": {
            "model": "claude-sonnet-4-6",
            "id": message_id,
            "content": [{"type": "text", "text": text}],
            "usage": {
                "input_tokens": 2,
                "cache_read_input_tokens": tokens,
                "cache_creation_input_tokens": 100,
                "output_tokens": 50,
            },
        },
    }


def write_transcript(path: Path, *records: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(record, separators=(",", ":")) + "\n" for record in records))
    return path


def stop_with(transcript: Path) -> bytes:
    return json.dumps({**STOP, "transcript_path": str(transcript)}).encode()


def test_stop_sends_the_usage_of_the_last_response_counted_once(env, tmp_path):
    transcript = write_transcript(
        tmp_path / "t.jsonl",
        assistant_line("msg_a", "req_a", 10_000),
        # One response split into three lines: its usage counts once, not three times.
        assistant_line("msg_b", "req_b", 30_000, text="first block"),
        assistant_line("msg_b", "req_b", 30_000, text="second block"),
        {"type": "user", "message": {"content": [{"type": "tool_result", "content": "usage"}]}},
        assistant_line("msg_b", "req_b", 30_000, text="third block"),
        # A subagent's context is its own; an older response replayed does not win either.
        assistant_line("msg_s", "req_s", 99_000, sidechain=True),
        assistant_line("msg_a", "req_a", 10_000),
    )
    with recording_server() as (url, received):
        proc = run_hook(env, stop_with(transcript), "--url", url)

    assert proc.returncode == 0
    assert proc.stderr == b""
    assert received[0].body["signet"]["usage"] == {
        "context_tokens": 30_102,
        "model": "claude-sonnet-4-6",
    }
    assert "transcript" not in received[0].body["signet"]


def test_stop_after_a_compaction_sends_no_usage_until_a_response_follows(env, tmp_path):
    boundary = {"type": "system", "subtype": "compact_boundary", "isSidechain": False}
    transcript = write_transcript(
        tmp_path / "t.jsonl", assistant_line("msg_a", "req_a", 150_000), boundary
    )
    with recording_server() as (url, received):
        run_hook(env, stop_with(transcript), "--url", url)
        write_transcript(transcript, boundary, assistant_line("msg_c", "req_c", 8_000))
        run_hook(env, stop_with(transcript), "--url", url)

    assert "usage" not in received[0].body["signet"]
    assert received[1].body["signet"]["usage"]["context_tokens"] == 8_102


def test_stop_reads_only_the_tail_of_a_long_transcript(env, tmp_path):
    filler = {"type": "user", "message": {"content": "x" * 1000}}
    transcript = write_transcript(
        tmp_path / "t.jsonl",
        assistant_line("msg_old", "req_old", 1),
        *[filler] * 600,  # 600 KB: the old response lies beyond the 256 KiB tail
    )
    with recording_server() as (url, received):
        run_hook(env, stop_with(transcript), "--url", url)
        with transcript.open("a") as handle:
            handle.write(json.dumps(assistant_line("msg_new", "req_new", 42_000)) + "\n")
        run_hook(env, stop_with(transcript), "--url", url)

    assert "usage" not in received[0].body["signet"]
    assert received[1].body["signet"]["usage"]["context_tokens"] == 42_102


@pytest.mark.parametrize("path", ["/nonexistent/t.jsonl", "", "/dev/null", 7])
def test_stop_without_a_readable_transcript_is_sent_without_usage(env, path):
    with recording_server() as (url, received):
        proc = run_hook(env, json.dumps({**STOP, "transcript_path": path}).encode(), "--url", url)

    assert proc.returncode == 0
    assert proc.stdout == b""
    assert len(received) == 1
    assert "usage" not in received[0].body["signet"]


def test_stop_with_the_server_down_exits_0_silently_and_queues_the_usage(env, outbox, tmp_path):
    transcript = write_transcript(tmp_path / "t.jsonl", assistant_line("msg_a", "req_a", 70_000))
    started = time.monotonic()

    proc = run_hook(env, stop_with(transcript), "--url", closed_port_url())

    assert proc.returncode == 0
    assert proc.stdout == b""
    assert len(proc.stderr.splitlines()) == 1
    assert b"Traceback" not in proc.stderr
    assert time.monotonic() - started < 10
    [entry] = outbox_entries(outbox)
    assert entry["body"]["hook_event_name"] == "Stop"
    assert entry["body"]["signet"]["usage"]["context_tokens"] == 70_102


def test_stop_prints_the_servers_json_reply_or_nothing(env, tmp_path):
    transcript = write_transcript(tmp_path / "t.jsonl", assistant_line("msg_a", "req_a", 5))
    with recording_server((200, b"{}"), (200, b"")) as (url, _):
        replied = run_hook(env, stop_with(transcript), "--url", url)
        empty = run_hook(env, stop_with(transcript), "--url", url)

    assert replied.stdout == b"{}"
    assert empty.stdout == b""
    assert replied.returncode == empty.returncode == 0


def test_a_usage_reader_failure_costs_only_the_usage(monkeypatch, outbox, tmp_path):
    monkeypatch.setenv("SIGNET_TOKEN", TOKEN)
    monkeypatch.setenv("SIGNET_OUTBOX", str(outbox))
    from hooks.transcripts import usage as reader

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(reader, "read_usage_after", broken)
    transcript = write_transcript(tmp_path / "t.jsonl", assistant_line("msg_a", "req_a", 5))
    with recording_server() as (url, received):
        message = signet_hook.run(
            ["--url", url, "claude-code"],
            stdin=io.BytesIO(stop_with(transcript)),
            stdout=io.BytesIO(),
            watchdog=False,
        )

    assert message == ""
    assert len(received) == 1
    assert "usage" not in received[0].body["signet"]


def test_the_stop_path_imports_no_heavy_module_either(env, tmp_path):
    # Stop runs after every turn: reading the usage must not pull in json, re, dataclasses…
    transcript = write_transcript(tmp_path / "t.jsonl", assistant_line("msg_a", "req_a", 5))
    with recording_server() as (url, received):
        proc = run_hook_listing_modules(env, stop_with(transcript), url)

    assert received[0].body["signet"]["usage"]["context_tokens"] == 107
    heavy = {
        "argparse", "collections", "contextlib", "dataclasses", "datetime", "email", "enum",
        "functools", "http", "json", "pathlib", "re", "socket", "tempfile", "threading",
        "typing", "urllib", "uuid",
    }  # fmt: skip
    assert set(proc.stderr.decode().split()) & heavy == set()


def test_the_pre_compact_path_reads_the_transcript_without_heavy_modules(env, tmp_path):
    # PreCompact reads up to 2 MiB of transcript; json, re and dataclasses (with inspect)
    # took longer to import than that read, so the reader uses this client's decoder.
    transcript = write_transcript(
        tmp_path / "t.jsonl",
        {"type": "user", "isSidechain": False, "gitBranch": "main",
         "message": {"role": "user", "content": "Fix the retry loop."}},
        assistant_line("msg_a", "req_a", 5, text="Looking at it."),
    )  # fmt: skip
    payload = json.loads((FIXTURES / "pre_compact_auto.json").read_text())
    body = json.dumps({**payload, "transcript_path": str(transcript)}).encode()
    with recording_server() as (url, received):
        proc = run_hook_listing_modules(env, body, url)

    sent = received[0].body["signet"]["transcript"]
    assert sent["recent_prompts"] == ["Fix the retry loop."]
    assert sent["last_assistant_message"] == "Looking at it."
    assert sent["git_branch"] == "main"
    heavy = {"collections", "dataclasses", "enum", "inspect", "json", "re", "typing"}
    assert set(proc.stderr.decode().split()) & heavy == set()


def test_a_stop_that_does_not_say_its_message_is_given_it_from_the_transcript(
    monkeypatch, outbox, tmp_path
):
    # Claude Code 2.0's Stop: no last_assistant_message (2.1 added it).
    monkeypatch.setenv("SIGNET_TOKEN", TOKEN)
    monkeypatch.setenv("SIGNET_OUTBOX", str(outbox))
    answer = "Found the problem. " + "The backends initialise again and again. " * 60
    answer += "\n\nNext I'll take a screenshot, then fix the subscription."
    transcript = write_transcript(
        tmp_path / "t.jsonl",
        {"type": "user", "isSidechain": False, "message": {"role": "user", "content": "go"}},
        assistant_line("msg_a", "req_a", 5, text=answer),
    )
    legacy = {key: value for key, value in STOP.items() if key != "last_assistant_message"}
    with recording_server() as (url, received):
        signet_hook.run(
            ["--url", url, "claude-code"],
            stdin=io.BytesIO(json.dumps({**legacy, "transcript_path": str(transcript)}).encode()),
            stdout=io.BytesIO(),
            watchdog=False,
        )

    sent = received[0].body["last_assistant_message"]
    assert len(sent) <= 2000
    assert sent.startswith("Found the problem. The backends initialise")
    assert sent.endswith("Next I'll take a screenshot, then fix the subscription.")
    assert received[0].body["signet"]["usage"]["context_tokens"] == 107
