"""Start the service the way ``make run`` does, for a benchmark, and stop it afterwards."""

from __future__ import annotations

import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
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
    environment, so a run says which stores it measured. A PostgreSQL run gets a database
    of its own on that server (``fresh_database``), as a SQLite run gets its own file.
    """
    with (
        fresh_database(database_url) as database_url,
        _running(
            database_url=database_url,
            redis_url=redis_url,
            workers=workers,
            threads=threads,
            extra_env=extra_env,
            before_serve=before_serve,
        ) as running,
    ):
        yield running


@contextmanager
def fresh_database(database_url: str) -> Iterator[str]:
    """For a PostgreSQL URL, the URL of a new, empty database on the same server, dropped
    afterwards; any other URL as it is.

    Each run then starts from the same state. On a shared database every run would find
    the tables as the runs before left them: on a server with autovacuum off (``SHOW
    autovacuum``), with every dead row version of every run before it.
    """
    parts = urllib.parse.urlsplit(database_url)
    if parts.scheme not in ("postgres", "postgresql", "pgsql"):
        yield database_url
        return
    import psycopg  # only PostgreSQL runs need it

    name = f"signet_bench_{os.getpid()}_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        print(f"(could not create a database of its own, so the run uses the one given: {exc})")
        yield database_url
        return
    try:
        yield urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def _running(
    *,
    database_url: str,
    redis_url: str,
    workers: int,
    threads: int,
    extra_env: dict[str, str] | None,
    before_serve: Callable[[dict[str, str]], None] | None,
) -> Iterator[Running]:
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
