"""The prune on a million checkpoints, while an agent keeps posting prompts.

Starts the service as ``make run`` does (granian + django-q2; SQLite by default, or
``--database-url`` for PostgreSQL) on a fresh data folder loaded in bulk with
``--sessions`` sessions of ``--per-session`` checkpoints (default 20,000 x 50 = 1,000,000):
in 95 % of the sessions all but the newest 5 checkpoints are past the 7-day retention, and
5 % of the sessions are past the 90-day session retention, so the prune deletes about 90 %.

One writer posts UserPromptSubmit events back to back, first alone (the baseline), then
while ``manage.py prune_checkpoints`` runs in its own process. Prints the prune's wall time
and rows/s, its peak RSS, the database size before and after, and the writer's p99 during
the prune against its p99 without it (goal: ratio <= 3, peak RSS < 200 MiB).

    .venv/bin/python bench/prune.py [--sessions 20000] [--per-session 50] [--database-url URL]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from bench.load import checkpoints_insert  # noqa: E402
from bench.service import post_json, running_service  # noqa: E402

PAYLOAD = json.loads((PROJECT / "tests/fixtures/claude_code/user_prompt_submit.json").read_text())
HOOK = "/api/hooks/claude-code/"
KEPT_RECENT = 5  # checkpoints per session inside the 7-day retention
EXPIRED_EVERY = 20  # one session in 20 is past the 90-day session retention
ROWS_PER_TRANSACTION = 20_000
DIGEST = (
    "## Session Checkpoint\n**Project:** /src/project (branch `main`)\n"
    "**Prompts:** 40 · **Duration:** 2 h 5 min\n\n### Current task\n"
    "Refactor the checkout flow so the payment step retries idempotently; keep the old "
    "API answering until the mobile app has moved over.\n\n### Modified files\n"
    "- src/checkout/flow.py\n- src/checkout/payment.py\n- tests/test_checkout.py\n\n"
    "### Recent prompts\n- run the payment tests again\n- why does the retry double-charge?\n"
)


def load(sessions: int, per_session: int) -> None:
    """Bulk-load the history, straight into the tables (runs inside Django, see main)."""
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.db import connection, models

    from checkpoints.ids import uuid7
    from checkpoints.models import Injection, Session

    owner = User.objects.get(username="bench")
    now = datetime.now(UTC)
    uuid_field = models.UUIDField()
    ops = connection.ops

    def when(moment: datetime) -> Any:
        return ops.adapt_datetimefield_value(moment)

    def last_activity(index: int) -> datetime:
        expired = index % EXPIRED_EVERY == 0
        return now - (timedelta(days=100) if expired else timedelta(hours=2))

    Session.objects.bulk_create(
        [
            Session(
                owner=owner,
                session_key=f"history-{index}",
                harness="claude-code",
                project=f"/src/project-{index % 50}",
                project_normalized=f"/src/project-{index % 50}",
                started_at=now - timedelta(days=120 if index % EXPIRED_EVERY == 0 else 30),
                last_activity_at=last_activity(index),
                ended_at=last_activity(index),
                prompt_count=per_session * 4,
            )
            for index in range(sessions)
        ],
        batch_size=2000,
    )
    ids = dict(Session.objects.filter(owner=owner).values_list("session_key", "pk"))
    files = json.dumps(["src/checkout/flow.py", "src/checkout/payment.py"])
    prompts = json.dumps(["run the payment tests again", "why does the retry double-charge?"])

    def created(index: int, number: int) -> datetime:
        """The ``number``-th newest checkpoint of session ``index``: the newest few are hours
        apart, the rest days."""
        if number < KEPT_RECENT:
            return last_activity(index) - timedelta(hours=3 * number)
        return last_activity(index) - timedelta(days=8 + number / 4)

    def rows() -> Iterator[tuple[Any, ...]]:
        """Oldest first, as a service writes them over time (expired sessions are older)."""
        expired = [index for index in range(sessions) if index % EXPIRED_EVERY == 0]
        current = [index for index in range(sessions) if index % EXPIRED_EVERY]
        for group in (expired, current):
            for number in reversed(range(per_session)):
                for index in group:
                    key = f"history-{index}"
                    moment = created(index, number)
                    unix_ms = int(moment.timestamp() * 1000)
                    yield (
                        uuid_field.get_db_prep_value(uuid7(unix_ms=unix_ms), connection),
                        owner.pk, ids[key], key, f"/src/project-{index % 50}", "claude-code",
                        "periodic", DIGEST, "Refactor the checkout flow", "[]", "[]", "[]", "[]",
                        files, prompts, "[]", "[]", "Running the payment tests now.", "main", "",
                        per_session * 4 - number, 4, "", "[]", when(moment),
                    )  # fmt: skip

    checkpoints_insert(rows(), per_transaction=ROWS_PER_TRANSACTION)
    Injection.objects.bulk_create(
        [
            Injection(
                session_id=pk, source="compact", match="session", content=DIGEST, size_chars=500
            )
            for pk in ids.values()
        ],
        batch_size=2000,
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


class Writer:
    """One agent posting prompts back to back over fresh connections, as a hook does."""

    def __init__(self, url: str, token: str) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port
        self.token = token
        self.sent = 0
        self.failures = 0

    def post(self) -> float:
        body = json.dumps(
            {**PAYLOAD, "session_id": f"writer-{self.sent % 16}", "prompt": f"step {self.sent}"}
        )
        self.sent += 1
        began = time.perf_counter()
        try:
            status = post_json(
                host=self.host, port=self.port, path=HOOK, token=self.token, body=body
            )
        except OSError:
            status = 0
        self.failures += status != 200
        return time.perf_counter() - began

    def run_for(self, seconds: float) -> list[float]:
        deadline = time.monotonic() + seconds
        latencies = []
        while time.monotonic() < deadline:
            latencies.append(self.post())
        return latencies

    def run_while(self, running: threading.Event) -> list[float]:
        latencies = []
        while running.is_set():
            latencies.append(self.post())
        return latencies


def p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[max(0, int(len(ordered) * 0.99) - 1)] * 1000


def database_bytes(env: dict[str, str]) -> int:
    """The data's size on disk: the SQLite file and its log, or PostgreSQL's own figure."""
    if env.get("DATABASE_URL"):
        out = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c",
             "from checkpoints.selectors import database_size;"
             "print(database_size()['bytes'])"],
            cwd=PROJECT, env=env, check=True, capture_output=True, text=True,
        )  # fmt: skip
        return int(out.stdout.strip().splitlines()[-1])
    data = Path(env["SIGNET_DATA_DIR"])
    return sum(
        (data / name).stat().st_size
        for name in ("signet.sqlite3", "signet.sqlite3-wal")
        if (data / name).exists()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20_000)
    parser.add_argument("--per-session", type=int, default=50)
    parser.add_argument("--baseline-seconds", type=float, default=30.0)
    parser.add_argument("--database-url", default="")
    parser.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:  # the child process that fills the database
        load(args.sessions, args.per_session)
        return

    total = args.sessions * args.per_session
    loaded: dict[str, float] = {}

    def fill(env: dict[str, str]) -> None:
        began = time.perf_counter()
        subprocess.run(
            [sys.executable, __file__, "--load", "--sessions", str(args.sessions),
             "--per-session", str(args.per_session)],
            cwd=PROJECT, env=env, check=True,
        )  # fmt: skip
        loaded["seconds"] = time.perf_counter() - began

    extra_env = {
        # Neither scheduled task may start during the bench: the prune is run by hand.
        "SIGNET_PRUNE_INTERVAL_MINUTES": str(7 * 24 * 60),
        "SIGNET_IDLE_SESSION_MINUTES": str(10**6),
    }
    with running_service(
        database_url=args.database_url, extra_env=extra_env, before_serve=fill
    ) as service:
        writer = Writer(service.url, service.token)
        writer.run_for(2.0)  # warm every worker
        size_before = database_bytes(service.env)
        baseline = writer.run_for(args.baseline_seconds)

        running = threading.Event()
        running.set()
        during: list[float] = []
        thread = threading.Thread(target=lambda: during.extend(writer.run_while(running)))
        thread.start()
        began = time.perf_counter()
        prune = subprocess.Popen(
            [sys.executable, "manage.py", "prune_checkpoints"],
            cwd=PROJECT,
            env=service.env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert prune.stdout is not None
        output = prune.stdout.read()
        _, status, usage = os.wait4(prune.pid, 0)
        prune.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - began
        running.clear()
        thread.join()
        size_after = database_bytes(service.env)

    if prune.returncode != 0:
        raise SystemExit(f"the prune failed ({prune.returncode}):\n{output}")
    found = re.search(r"total: deleted (\d+) checkpoint", output)
    deleted = int(found.group(1)) if found else 0
    peak_mib = usage.ru_maxrss / 1024  # kilobytes on Linux
    ratio = p99(during) / p99(baseline)
    database = "PostgreSQL" if args.database_url else "SQLite"

    def verdict(met: bool) -> str:
        return "met" if met else "NOT met"

    print(
        f"prune bench: {args.sessions:,} sessions x {args.per_session} = {total:,} checkpoints, "
        f"{database}, granian + django-q2 as `make run` starts them"
    )
    load_rate = total / loaded["seconds"]
    print(f"  bulk load            {loaded['seconds']:8.1f} s ({load_rate:,.0f} rows/s)")
    print(
        f"  prune                {wall:8.1f} s, {deleted:,} checkpoints deleted "
        f"({deleted / total:.0%}), {deleted / wall:,.0f} rows/s"
    )
    print(f"  prune peak RSS       {peak_mib:8.1f} MiB (goal < 200: {verdict(peak_mib < 200)})")
    print(
        f"  database size        {size_before / 2**20:8.1f} MiB before, "
        f"{size_after / 2**20:.1f} MiB after"
    )
    for name, latencies in (("writer alone", baseline), ("writer during prune", during)):
        print(
            f"  {name:20} {len(latencies):8d} prompts"
            f"  p50 {statistics.median(latencies) * 1000:6.1f} ms"
            f"  p99 {p99(latencies):6.1f} ms  max {max(latencies) * 1000:6.1f} ms"
        )
    print(
        f"  writer p99 ratio during/alone: {ratio:.2f} (goal <= 3: {verdict(ratio <= 3)}); "
        f"{writer.failures} failed requests"
    )
    print("  the prune's own report:")
    for line in output.splitlines():
        if "total:" in line or "took" in line or ": deleted" in line:
            print("    " + line.strip())


if __name__ == "__main__":
    main()
