"""Start the service the way ``make run`` does, for a benchmark, and stop it afterwards."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent


@dataclass
class Running:
    url: str
    token: str
    env: dict[str, str]
    pid: int = 0  # ``manage.py serve``'s: granian's processes are its descendants


def post(*, host: str, port: int | None, path: str, token: str, body: str) -> tuple[int, bytes]:
    """POST ``body`` over a fresh connection, as a hook does; the status and the answer
    (OSError if none)."""
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request(
            "POST",
            path,
            body=body,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def post_json(*, host: str, port: int | None, path: str, token: str, body: str) -> int:
    """POST ``body`` over a fresh connection, as a hook does; the status (OSError if none)."""
    return post(host=host, port=port, path=path, token=token, body=body)[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_service(
    *,
    database_url: str = "",
    redis_url: str = "",
    workers: int = 0,
    threads: int = 0,
    extra_env: dict[str, str] | None = None,
    before_serve: Callable[[dict[str, str]], None] | None = None,
) -> Iterator[Running]:
    """``manage.py serve`` (granian + django-q2) on a fresh data folder, with a token.

    ``before_serve`` gets the environment once the database is migrated, to load data.
    ``DATABASE_URL`` and ``REDIS_URL`` come from the arguments only, never the caller's
    environment, so a run says which stores it measured.
    """
    data = tempfile.mkdtemp(prefix="signet-bench-")
    port = free_port()
    env = {
        **os.environ,
        "SIGNET_DATA_DIR": data,
        "PORT": str(port),
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "SIGNET_THROTTLE_INGEST": "1000000/min",
        "LOG_LEVEL": "WARNING",
        **(extra_env or {}),
    }
    env.pop("DATABASE_URL", None)
    if database_url:
        env["DATABASE_URL"] = database_url
    if redis_url:
        env["REDIS_URL"] = redis_url
    elif "REDIS_URL" not in (extra_env or {}):
        env.pop("REDIS_URL", None)
    if env.get("REDIS_URL") and "SIGNET_REDIS_PREFIX" not in (extra_env or {}):
        # Keys of their own: a bench before this one (a throttle at another quota, a
        # queue's leftovers) must not count here.
        env["SIGNET_REDIS_PREFIX"] = f"signet-bench-{os.path.basename(data)}"
    if workers:
        env["WEB_CONCURRENCY"] = str(workers)
    if threads:
        env["WEB_THREADS"] = str(threads)
    python = sys.executable
    subprocess.run(
        [python, "manage.py", "migrate", "--noinput", "-v0"], cwd=PROJECT, env=env, check=True
    )
    made = subprocess.run(
        [python, "manage.py", "create_token", "--user", "bench", "--scopes", "ingest,read"],
        cwd=PROJECT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    token = made.stdout.strip().splitlines()[-1]
    if before_serve is not None:
        before_serve(env)
    proc = subprocess.Popen(
        [python, "manage.py", "serve"],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:  # noqa: S310
                    if json.load(response)["status"] == "ok":
                        break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError("the service did not start")
        yield Running(url=url, token=token, env=env, pid=proc.pid)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(data, ignore_errors=True)
