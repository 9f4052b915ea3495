"""``manage.py serve`` (what ``make run`` runs), as a new user meets it: a real process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

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


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310
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
