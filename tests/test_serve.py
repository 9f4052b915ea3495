"""``manage.py serve`` (what ``make run`` runs), as a new user meets it: a real process."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from checkpoints.management.commands.serve import port_check
from tests.hookutil import HOOK_URL, payload

PROJECT_DIR = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def service_env(data_dir: Path, port: int, **extra: str) -> dict[str, str]:
    """This environment as a new user's shell has it: SQLite in ``data_dir``, on ``port``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(SIGNET_DATA_DIR=str(data_dir), PORT=str(port), **extra)
    return env


def get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310
        return response.status, response.read()


@pytest.mark.slow
def test_serve_runs_web_and_scheduler_and_stops_cleanly_on_ctrl_c(tmp_path):
    port = free_port()
    env = service_env(tmp_path, port, WEB_CONCURRENCY="2")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "serve"],
        cwd=PROJECT_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        banner = []
        deadline = time.monotonic() + 90
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            banner.append(line)
            if line.startswith("Press Ctrl-C"):
                break
        text = "".join(banner)
        assert f"Signet Continuity is running: http://127.0.0.1:{port}/" in text, text
        assert "login: admin / " in text

        assert get(f"http://127.0.0.1:{port}/admin/login/")[0] == 200
        state = ""
        while time.monotonic() < deadline:  # the cluster reports in within a few seconds
            status, body = get(f"http://127.0.0.1:{port}/healthz")
            state = json.loads(body)["scheduler"]
            if state == "running":
                break
            time.sleep(0.5)
        assert status == 200
        assert state == "running"
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, rest
    assert "Stopped." in rest
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0  # nothing listens any more


# --- One running service, as a new user starts it, for the tests below -----------------


@dataclass
class Served:
    port: int
    token: str
    env: dict[str, str]
    output: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_for_output(self, found: Callable[[str], bool], timeout: float = 10) -> str:
        """The first line of the service's output for which ``found`` holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.output):
                if found(line):
                    return line
            time.sleep(0.05)
        raise AssertionError("not in the output:\n" + "".join(self.output))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``manage.py serve --no-scheduler`` on a fresh data folder, an ingest token, its output."""
    data = tmp_path_factory.mktemp("served")
    port = free_port()
    env = service_env(data, port, SIGNET_MAX_BODY_BYTES="20000", SIGNET_MAX_HOOK_BODY_BYTES="20000")
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=PROJECT_DIR, env=env, check=True, timeout=120,
    )  # fmt: skip
    made = subprocess.run(
        [sys.executable, "manage.py", "create_token", "--user", "u", "--scopes", "ingest"],
        cwd=PROJECT_DIR, env=env, check=True, timeout=60, capture_output=True, text=True,
    )  # fmt: skip
    service = Served(port=port, token=made.stdout.strip().splitlines()[-1], env=env)
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--no-scheduler"],
        cwd=PROJECT_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: service.output.extend(proc.stdout or ()))
    reader.start()
    try:
        service.wait_for_output(lambda line: line.startswith("Press Ctrl-C"), timeout=90)
        yield service
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        reader.join(timeout=10)


def post_hook(service: Served, body: bytes | Iterable[bytes]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    try:
        headers = {"Authorization": f"Bearer {service.token}", "Content-Type": "application/json"}
        conn.request("POST", HOOK_URL, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def hook_body(session_id: str) -> bytes:
    return json.dumps(payload("user_prompt_submit", session_id=session_id)).encode()


# The finding: six clients that sent half their headers and waited held every sync worker;
# /healthz took 33 s, ended by worker timeouts. Unstalled, both answer in milliseconds.
IDLE_CONNECTIONS = 20
STALL_BOUND_SECONDS = 1.0


@pytest.mark.slow
def test_idle_half_sent_requests_stall_neither_health_nor_hooks(served):
    for number in range(4):  # the first requests of a process import the views: not timed
        assert get(f"{served.url}/healthz")[0] == 200
        assert post_hook(served, hook_body(f"warm-{number}"))[0] == 200
    idle = []
    try:
        for _ in range(IDLE_CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", served.port), timeout=5)
            sock.sendall(b"POST /api/hooks/claude-code/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
            idle.append(sock)

        began = time.monotonic()
        health = get(f"{served.url}/healthz", timeout=10)[0]
        health_seconds = time.monotonic() - began
        began = time.monotonic()
        hook = post_hook(served, hook_body("beside-idle"))[0]
        hook_seconds = time.monotonic() - began
    finally:
        for sock in idle:
            sock.close()
    assert (health, hook) == (200, 200)
    assert health_seconds < STALL_BOUND_SECONDS
    assert hook_seconds < STALL_BOUND_SECONDS


@pytest.mark.slow
def test_access_log_has_the_path_without_its_query(served):
    assert get(f"{served.url}/healthz?token=sekrit-token")[0] == 200
    with pytest.raises(urllib.error.HTTPError):
        get(f"{served.url}/no-such-page/?q=sekrit-search&token=sekrit-token")
    line = served.wait_for_output(lambda line: "/no-such-page/" in line and " 404 " in line)
    assert '"GET /no-such-page/ HTTP/1.1" 404' in line
    served.wait_for_output(lambda line: '"GET /healthz HTTP/1.1" 200' in line)
    assert "sekrit" not in "".join(served.output)


@pytest.mark.slow
def test_a_chunked_body_is_read_and_one_over_the_limit_refused(served):
    body = hook_body("chunked")
    assert post_hook(served, iter([body[:40], body[40:]]))[0] == 200
    big = b'{"session_id": "s", "x": "' + b"y" * 30_000 + b'"}'
    status, reply = post_hook(served, iter([big[:15_000], big[15_000:]]))
    assert (status, json.loads(reply)["error"]) == (413, "too_large")


@pytest.mark.slow
def test_a_second_serve_on_the_same_port_says_so_and_stops(served):
    second = subprocess.run(
        [sys.executable, "manage.py", "serve"],
        cwd=PROJECT_DIR, env=served.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert second.returncode == 1
    assert f"port {served.port} on 127.0.0.1 is already in use" in second.stderr
    assert f"PORT={served.port + 1} make run" in second.stderr
    assert "is running" not in second.stdout
    assert get(f"{served.url}/healthz")[0] == 200  # the first one is untouched


def test_serve_refuses_a_port_in_use_before_setting_anything_up(monkeypatch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        monkeypatch.setattr(
            "checkpoints.management.commands.serve.call_command",
            lambda *args, **kwargs: pytest.fail("set up before the port was checked"),
        )
        with pytest.raises(CommandError, match=f"port {port} on 127.0.0.1 is already in use"):
            call_command("serve", host="127.0.0.1", port=port)
    port_check("127.0.0.1", port)  # free again
