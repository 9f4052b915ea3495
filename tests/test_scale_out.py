"""Scale-out as the README describes it: several web hosts, one PostgreSQL, one Redis, one
cluster, proven with real processes.

Two ``manage.py serve --no-scheduler`` instances on two ports stand for two web hosts behind
a proxy, and one ``manage.py qcluster`` for the cluster's host. Each gets its own data
folder (nothing on local disk is shared, as on separate machines) and the same
``SECRET_KEY``, ``DATABASE_URL`` (a throw-away database beside the suite's) and
``REDIS_URL`` (Redis database 9, flushed before and after; no other Redis database is
touched). The database is migrated, and the schedules and the admin set up, once before
the hosts start, as the README says to.

Then, with hooks sent to both ports by turns, every session's events landing on both hosts:

- every prompt is counted exactly once (``Session.prompt_count``);
- the periodic checkpoint each session falls due for is only marked on the hook path: the
  Redis list ``django_q:<name>:q`` holds flush tasks (at most one per web process and
  batch, so at most one per session) and no checkpoint exists yet; once the cluster starts,
  it takes every task and writes exactly one checkpoint per session (by its flush tasks or
  its every-minute sweep; no hook comes meanwhile), no flush task fails, and django-q2's
  ORM queue stays empty;
- both web hosts report the cluster (running on neither of them) in ``/healthz``;
- one ingest throttle budget (``SIGNET_THROTTLE_INGEST``, set low here) is shared by both
  hosts: a token sending more than the budget, split across the two ports, gets exactly
  budget-many 200s and 429 for the rest.

Runs only on PostgreSQL (``DATABASE_URL``) with a Redis at ``REDIS_TEST_URL``; it skips,
saying why, otherwise. No timing is asserted: the readiness waits are generous, as the
machine may be small and busy.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection
from psycopg import sql

from checkpoints.services import pending
from tests.hookutil import HOOK_URL, payload
from tests.processes import manage
from tests.test_serve import free_port

PROJECT_DIR = Path(__file__).resolve().parent.parent
REDIS_TEST_URL = "redis://127.0.0.1:6379/9"
QUEUE_KEY = "django_q:signet:q"  # django-q2's Redis list: django_q:<Q_CLUSTER name>:q
FLUSH_TASK = pending.FLUSH_TASK

SESSIONS = 16
PROMPT_INTERVAL = 3  # each session sends this many prompts: one periodic checkpoint falls due
BUDGET = 60  # ingest requests per token and window, shared by both hosts
OVER_BUDGET = 20
PARALLEL = 8
READY_SECONDS = 240
SETTLE_SECONDS = 240
STOP_SECONDS = 60

# Printed as JSON by ``manage.py shell`` on the throw-away database: what the asserts read.
STATE_SCRIPT = f"""
import json
from django.db.models import Sum
from django_q.models import OrmQ, Task
from checkpoints.models import Checkpoint, Session
sessions = {{}}
for s in Session.objects.select_related("owner"):
    sessions[s.session_key] = {{
        "owner": s.owner.username,
        "prompts": s.prompt_count,
        "pending": s.checkpoint_pending_since is not None,
        "checkpoints": sorted(
            [c.trigger, c.prompt_count] for c in Checkpoint.objects.filter(session=s)
        ),
    }}
flushes = list(Task.objects.filter(func="{FLUSH_TASK}").values_list("success", "result"))
print(json.dumps({{
    "sessions": sessions,
    # A flush that succeeded leaves no task row (``pending.pending_enqueue``): a failed one does.
    "flush_failures": sum(1 for ok, _ in flushes if not ok),
    "periodic_written": Checkpoint.objects.filter(trigger="periodic").count(),
    "orm_queue": OrmQ.objects.count(),
}}))
"""


def _postgres_or_skip() -> dict[str, Any]:
    database = settings.DATABASES["default"]
    if connection.vendor != "postgresql":
        pytest.skip("scale-out needs PostgreSQL: set DATABASE_URL (SQLite is one host only)")
    if not os.environ.get("DATABASE_URL"):
        pytest.skip("scale-out builds its database's URL from DATABASE_URL, which is not set")
    return dict(database)


def _redis_or_skip() -> redis.Redis:
    client = redis.Redis.from_url(REDIS_TEST_URL)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"scale-out needs a Redis at {REDIS_TEST_URL}: {exc}")
    return client


def _maintenance_connection(database: dict[str, Any]) -> psycopg.Connection[Any]:
    return psycopg.connect(
        dbname="postgres",
        user=database.get("USER") or None,
        password=database.get("PASSWORD") or None,
        host=database.get("HOST") or None,
        port=str(database["PORT"]) if database.get("PORT") else None,
        autocommit=True,
    )


@contextmanager
def throwaway_database(database: dict[str, Any]) -> Iterator[str]:
    """A new, empty database beside the suite's; yields its ``DATABASE_URL``, then drops it."""
    name = f"scaleout_{os.getpid()}_{int(time.time())}"
    with _maintenance_connection(database) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    parts = urlsplit(os.environ["DATABASE_URL"])
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with _maintenance_connection(database) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def host_env(base: dict[str, str], data_dir: Path, **extra: str) -> dict[str, str]:
    """One host's environment: the shared settings, its own data folder."""
    data_dir.mkdir(exist_ok=True)
    return {**base, "SIGNET_DATA_DIR": str(data_dir), **extra}


def db_state(env: dict[str, str]) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(manage(env, "shell", "-c", STATE_SCRIPT).splitlines()[-1])
    return state


class Processes:
    """The long-running processes of the test: started in their own process group, each
    with a log file, and all stopped (then killed if they linger) by ``stop_all``."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.running: dict[str, tuple[subprocess.Popen[bytes], TextIO]] = {}

    def start(self, name: str, env: dict[str, str], *args: str) -> None:
        log = (self.logs / f"{name}.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=PROJECT_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.running[name] = (proc, log)

    def check_alive(self) -> None:
        for name, (proc, _) in self.running.items():
            assert proc.poll() is None, f"{name} exited ({proc.returncode}):\n{self.tail(name)}"

    def tail(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-4000:]

    def tails(self) -> str:
        return "\n".join(f"--- {name}\n{self.tail(name)}" for name in self.running)

    def stop_all(self) -> None:
        for proc, _ in self.running.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # serve stops granian; qcluster its workers
        deadline = time.monotonic() + STOP_SECONDS
        for proc, log in self.running.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()


def wait_until(what: str, ready: Callable[[], bool], processes: Processes, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        processes.check_alive()
        if ready():
            return
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}\n{processes.tails()}")


def health(port: int) -> dict[str, Any]:
    """``/healthz`` of the host on ``port``; {} while it does not answer 200."""
    url = f"http://127.0.0.1:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body: dict[str, Any] = json.load(response)
            return body if response.status == 200 else {}
    except (OSError, ValueError):
        return {}


def post_hook(port: int, token: str, body: dict[str, Any]) -> int:
    """POST one hook event to the host on ``port``; the HTTP status."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{HOOK_URL}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def send_all(jobs: list[tuple[int, str, dict[str, Any]]]) -> list[int]:
    """Send every (port, token, body) job, ``PARALLEL`` at a time; their statuses, in order."""
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        return list(pool.map(lambda job: post_hook(*job), jobs))


def prompt(session_key: str, number: int) -> dict[str, Any]:
    return payload("user_prompt_submit", session_id=session_key, prompt=f"step {number}")


def wait_out_window_end(seconds: int) -> None:
    """Throttle windows are aligned on multiples of their length: sleep past the end of the
    current one if it closes within ``seconds``, so a burst is counted in one window."""
    day = 86_400
    left = day - time.time() % day
    if left < seconds:
        time.sleep(left + 1)


@pytest.mark.slow
def test_two_web_hosts_and_one_cluster_share_postgresql_and_redis_exactly(tmp_path):
    database = _postgres_or_skip()
    broker = _redis_or_skip()
    broker.flushdb()
    with ExitStack() as cleanup:  # run backwards: processes, then the database, then Redis
        cleanup.callback(broker.close)
        cleanup.callback(broker.flushdb)
        database_url = cleanup.enter_context(throwaway_database(database))
        processes = Processes(tmp_path)
        cleanup.callback(processes.stop_all)
        base = {
            key: value
            for key, value in os.environ.items()
            if key not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"}
        }
        base.update(
            DATABASE_URL=database_url,
            REDIS_URL=REDIS_TEST_URL,
            # One key on every host: logins and django-q2's signed tasks and status need it.
            SECRET_KEY=secrets.token_urlsafe(64),
            SIGNET_THROTTLE_INGEST=f"{BUDGET}/day",
            SIGNET_PROMPT_INTERVAL=str(PROMPT_INTERVAL),
            SIGNET_DEBOUNCE_SECONDS="1",
            WEB_CONCURRENCY="2",
            WEB_THREADS="4",
            Q_WORKERS="2",
            LOG_LEVEL="WARNING",
        )
        setup = host_env(base, tmp_path / "setup")
        manage(setup, "migrate", "--noinput", "-v0")
        manage(setup, "setup_schedules")
        manage(setup, "ensure_admin")
        alice = manage(setup, "create_token", "--user", "alice", "--scopes", "ingest")
        bob = manage(setup, "create_token", "--user", "bob", "--scopes", "ingest")
        alice_token = alice.strip().splitlines()[-1]
        bob_token = bob.strip().splitlines()[-1]

        ports = [free_port(), free_port()]
        for name, port in zip(("web-a", "web-b"), ports, strict=True):
            env = host_env(base, tmp_path / name, PORT=str(port))
            processes.start(name, env, "serve", "--no-scheduler")
        wait_until(
            "both web hosts",
            lambda: all(health(port).get("status") == "ok" for port in ports),
            processes,
            READY_SECONDS,
        )

        # Every session's prompts alternate between the two hosts, 8 requests at a time.
        keys = [f"scale-{number:02d}" for number in range(SESSIONS)]
        jobs = [
            (ports[(index + number) % 2], alice_token, prompt(key, number))
            for number in range(PROMPT_INTERVAL)
            for index, key in enumerate(keys)
        ]
        statuses = send_all(jobs)
        assert Counter(statuses) == {200: len(jobs)}, (Counter(statuses), processes.tails())

        # Marked and queued on Redis, not written: no cluster runs yet. A web process queues
        # one flush for the marks it makes within a second: fewer tasks than marks, maybe.
        before = db_state(setup)
        assert 1 <= broker.llen(QUEUE_KEY) <= SESSIONS
        assert before["sessions"] == {
            key: {
                "owner": "alice",
                "prompts": PROMPT_INTERVAL,
                "pending": True,
                "checkpoints": [],
            }
            for key in keys
        }
        assert before["orm_queue"] == 0

        processes.start("cluster", host_env(base, tmp_path / "cluster"), "qcluster")

        def settled() -> bool:
            state = db_state(setup)
            written: int = state["periodic_written"]
            return written >= SESSIONS and broker.llen(QUEUE_KEY) == 0

        wait_until("the cluster's checkpoint writes", settled, processes, SETTLE_SECONDS)
        after = db_state(setup)
        assert after["sessions"] == {
            key: {
                "owner": "alice",
                "prompts": PROMPT_INTERVAL,
                "pending": False,
                "checkpoints": [["periodic", PROMPT_INTERVAL]],
            }
            for key in keys
        }
        # No hook came after the marks: the cluster wrote every checkpoint (a flush task it
        # took from Redis, or its sweep), one each.
        assert after["flush_failures"] == 0
        assert after["periodic_written"] == SESSIONS
        assert after["orm_queue"] == 0
        assert broker.llen(QUEUE_KEY) == 0
        # The cluster reports in through Redis: each web host sees it.
        wait_until(
            "the cluster in both hosts' /healthz",
            lambda: all(health(port).get("scheduler") == "running" for port in ports),
            processes,
            READY_SECONDS,
        )
        # The continuity config and the throttle counters live in the shared cache.
        assert broker.exists("signet:1:signet:continuity-config:v1")
        assert broker.keys("signet:1:throttle:ingest:*")

        # One budget for both hosts: bob sends more than it, by turns to each port.
        wait_out_window_end(120)
        bob_keys = [f"bob-{number}" for number in range(4)]
        burst = [
            (ports[number % 2], bob_token, prompt(bob_keys[(number // 2) % 4], number))
            for number in range(BUDGET + OVER_BUDGET)
        ]
        statuses = send_all(burst)
        assert Counter(statuses) == {200: BUDGET, 429: OVER_BUDGET}, processes.tails()
        counted = db_state(setup)["sessions"]
        assert sum(s["prompts"] for s in counted.values() if s["owner"] == "bob") == BUDGET
        processes.check_alive()
