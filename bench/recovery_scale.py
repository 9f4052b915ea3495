"""SessionStart recovery with 1,000 checkpoints vs 1,000,000, in one service run.

Starts the service as ``make run`` does (granian + django-q2; SQLite by default,
``--database-url`` for PostgreSQL, ``--redis-url`` for Redis) with ``--sessions`` sessions
(default 20,000) in ``--projects`` projects (default 500), and loads in bulk the ``--small``
newest checkpoints (default 1,000: two per project, all in the last hour, so inside the
recovery window). It then posts ``--starts`` SessionStart(startup) hooks to
``/api/hooks/claude-code/``, each a new session in one of the projects, which recovers that
project's newest checkpoint, each next to a POST to the bare view as a baseline. Then it
loads the rest up to ``--checkpoints`` (default 1,000,000, older: spread over the 60 days
before, a few per project still inside the window), so each start recovers the same
checkpoint as before, and times the starts again. Prints p50/p99 at both sizes and the
ratio judged: SessionStart p50 at the large size over p50 at the small one (goal <= 1.5).

Last, it runs one more SessionStart in a process of its own (Django's test client on the
same database) to capture every query the hook runs, and prints each one's plan (EXPLAIN),
flagging any that scans a table, or sorts every row its index matched (an index on the
owner alone, say) where an index could give the order.

    .venv/bin/python bench/recovery_scale.py [--checkpoints 1000000] [--small 1000]
        [--sessions 20000] [--projects 500] [--starts 300]
        [--database-url URL] [--redis-url URL]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from bench.load import checkpoints_insert  # noqa: E402
from bench.service import Running, post, post_json, running_service  # noqa: E402

HOOK = "/api/hooks/claude-code/"
BARE = "/bench/bare/"
HEADER = "## Session Recovery Context"
GOAL_RATIO = 1.5
SMALL_TABLE = 1000  # rows: a scan of fewer is PostgreSQL's right choice, not a missing index
ROWS_PER_TRANSACTION = 20_000
HISTORY = timedelta(days=60)  # the older checkpoints spread over this
NEWEST_SPREAD = timedelta(hours=1)  # the small set spreads over the last hour
DIGEST = (
    "## Session Checkpoint\n**Project:** /src/project (branch `main`)\n\n### Current task\n"
    "Refactor the checkout flow so the payment step retries idempotently.\n"
)
NEXT_STEPS = json.dumps(["Run the payment tests", "Wire the retry into the mobile API"])
DECISIONS = json.dumps(["Retry with an idempotency key", "Keep the v1 API until June"])
FILES = json.dumps(["src/checkout/flow.py", "src/checkout/payment.py"])
PROMPTS = json.dumps(["run the payment tests again", "why does the retry double-charge?"])
START = json.loads((PROJECT / "tests/fixtures/claude_code/session_start_startup.json").read_text())


def project_of(index: int, projects: int) -> str:
    return f"/src/project-{index % projects}"


def load(phase: str, *, sessions: int, projects: int, small: int, total: int) -> None:
    """Fill the tables in bulk (in a child process, on the service's environment).

    ``small``: the sessions and the newest checkpoint of each of the first ``small``
    sessions. ``rest``: every other checkpoint, ``total // sessions`` per session in all.
    """
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.db import connection, models

    from checkpoints.ids import uuid7
    from checkpoints.models import Session

    owner = User.objects.get(username="bench")
    now = datetime.now(UTC)
    per_session = total // sessions
    uuid_field = models.UUIDField()
    if phase == "small":
        Session.objects.bulk_create(
            [
                Session(
                    owner=owner,
                    session_key=f"history-{index}",
                    harness="claude-code",
                    project=project_of(index, projects),
                    project_normalized=project_of(index, projects),
                    started_at=now - HISTORY - timedelta(days=1),
                    last_activity_at=now - NEWEST_SPREAD,
                    ended_at=now - NEWEST_SPREAD,
                    prompt_count=per_session * 4,
                )
                for index in range(sessions)
            ],
            batch_size=5000,
        )
    ids = dict(Session.objects.filter(owner=owner).values_list("session_key", "pk"))

    def created(index: int, number: int) -> datetime:
        """The ``number``-th newest checkpoint of session ``index``."""
        if number == 0 and index < small:
            return now - NEWEST_SPREAD * (index + 1) / (small + 1)
        step = HISTORY / per_session
        return now - NEWEST_SPREAD - step * (number + index / sessions)

    def row(index: int, number: int) -> tuple[Any, ...]:
        key = f"history-{index}"
        moment = created(index, number)
        unix_ms = int(moment.timestamp() * 1000)
        return (
            uuid_field.get_db_prep_value(uuid7(unix_ms=unix_ms), connection),
            owner.pk, ids[key], key, project_of(index, projects), "claude-code", "periodic",
            DIGEST, f"Refactor the checkout flow, part {index}", DECISIONS, "[]", "[]",
            NEXT_STEPS, FILES, PROMPTS, "[]", "[]", "Running the payment tests now.", "main",
            "", per_session * 4 - number, 4, "", "[]",
            connection.ops.adapt_datetimefield_value(moment),
        )  # fmt: skip

    def rows() -> Iterator[tuple[Any, ...]]:
        if phase == "small":
            yield from (row(index, 0) for index in range(small))
            return
        for number in reversed(range(per_session)):  # oldest first, as written over time
            for index in range(sessions):
                if number or index >= small:
                    yield row(index, number)

    checkpoints_insert(rows(), per_transaction=ROWS_PER_TRANSACTION)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def start_body(key: str, project: str) -> str:
    """A SessionStart(startup) as the command hook sends it for a folder outside git."""
    return json.dumps(
        {**START, "session_id": key, "cwd": project, "signet": {"project_normalized": project}}
    )


def session_start(host: str, port: int | None, token: str, body: str) -> tuple[int, bool]:
    """POST a SessionStart over a fresh connection: the status and whether it recovered."""
    status, answer = post(host=host, port=port, path=HOOK, token=token, body=body)
    return status, HEADER in answer.decode()


@dataclass
class Timings:
    hook: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    failed: int = 0
    recovered: int = 0


def time_starts(service: Running, *, label: str, starts: int, projects: int) -> Timings:
    """``starts`` SessionStarts, each a new session, interleaved with bare-view POSTs."""
    parsed = urllib.parse.urlsplit(service.url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port
    timings = Timings()
    for number in range(starts):
        body = start_body(f"start-{label}-{number}", project_of(number * 7, projects))
        began = time.perf_counter()
        status, found = session_start(host, port, service.token, body)
        timings.hook.append(time.perf_counter() - began)
        timings.failed += status != 200
        timings.recovered += found
        began = time.perf_counter()
        post_json(host=host, port=port, path=BARE, token=service.token, body=body)
        timings.bare.append(time.perf_counter() - began)
    return timings


def explain(token: str, projects: int) -> None:
    """One SessionStart through Django's test client, then the plan of each query it ran."""
    import django

    django.setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    body = start_body("explain-0", project_of(3, projects))
    with CaptureQueriesContext(connection) as captured:
        response = Client().post(
            HOOK,
            data=body,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
            HTTP_HOST="127.0.0.1",
        )
    recovered = HEADER in response.content.decode()
    print(f"  status {response.status_code}, recovered: {recovered}, "
          f"{len(captured.captured_queries)} statements")  # fmt: skip
    sqlite = connection.vendor == "sqlite"
    prefix = "EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN "
    scans: list[str] = []

    def rows(table: str) -> float:
        """PostgreSQL's estimate of a table's rows."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [table])
            found = cursor.fetchone()
        return float(found[0]) if found else 0.0

    with connection.cursor() as cursor:
        for number, query in enumerate(captured.captured_queries, 1):
            sql = query["sql"] or ""
            verb = sql.split(None, 1)[0].upper() if sql.strip() else ""
            if verb not in {"SELECT", "UPDATE", "DELETE"}:
                print(f"  [{number}] {sql[:100]}")
                continue
            cursor.execute(prefix + sql)
            plan = [str(line[-1] if sqlite else line[0]) for line in cursor.fetchall()]
            flagged = [line for line in plan if not_index_backed(line, sqlite=sqlite, rows=rows)]
            shown = sql if len(sql) <= 300 else sql[:300] + " …"
            print(f"  [{number}] {shown}")
            for line in plan:
                print(f"        {line}")
            if flagged:
                scans.append(f"[{number}] {'; '.join(line.strip() for line in flagged)}")
    if scans:
        print("  statements NOT index-backed (a table scan, or every matching row sorted):")
        for scan in scans:
            print(f"    {scan}")
    print(f"  every statement index-backed: {'NOT met' if scans else 'met'}")


def not_index_backed(line: str, *, sqlite: bool, rows: Callable[[str], float]) -> bool:
    """Whether a plan line reads a whole table (PostgreSQL: one of more than ``SMALL_TABLE``
    rows, ``rows`` tells), or (SQLite) sorts every row its index matched: the index does not
    give the order, so a ``LIMIT 1`` still reads them all. PostgreSQL's sorts are not
    flagged: it sorts only what an index condition already narrowed, or it would scan."""
    line = line.strip()
    if sqlite:
        full_scan = line.startswith("SCAN ") and " USING " not in line
        return full_scan or ("TEMP B-TREE" in line and "ORDER BY" in line)
    scanned = re.search(r"Seq Scan on (\w+)", line)
    return scanned is not None and rows(scanned.group(1)) > SMALL_TABLE


def p50_ms(latencies: list[float]) -> float:
    return statistics.median(latencies) * 1000


def p99_ms(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[max(0, int(len(ordered) * 0.99) - 1)] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=1_000, help="checkpoints at first")
    parser.add_argument("--sessions", type=int, default=20_000)
    parser.add_argument("--projects", type=int, default=500)
    parser.add_argument("--starts", type=int, default=300, help="SessionStarts timed per size")
    parser.add_argument("--database-url", default="")
    parser.add_argument("--redis-url", default="", help="cache and task broker (REDIS_URL)")
    parser.add_argument("--load", choices=["small", "rest"], help=argparse.SUPPRESS)
    parser.add_argument("--explain-token", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.checkpoints % args.sessions or not 0 < args.small <= args.sessions:
        parser.error("--checkpoints must be a multiple of --sessions, --small at most --sessions")
    if args.load:  # the child process that fills the database
        load(
            args.load,
            sessions=args.sessions,
            projects=args.projects,
            small=args.small,
            total=args.checkpoints,
        )
        return
    if args.explain_token:  # the child process that prints the plans
        explain(args.explain_token, args.projects)
        return

    loaded: dict[str, float] = {}

    def fill(env: dict[str, str], phase: str) -> None:
        began = time.perf_counter()
        subprocess.run(
            [sys.executable, __file__, "--load", phase, "--sessions", str(args.sessions),
             "--projects", str(args.projects), "--small", str(args.small),
             "--checkpoints", str(args.checkpoints)],
            cwd=PROJECT, env=env, check=True,
        )  # fmt: skip
        loaded[phase] = time.perf_counter() - began

    extra_env = {  # no scheduled prune or idle close may run during the bench
        "SIGNET_PRUNE_INTERVAL_MINUTES": str(7 * 24 * 60),
        "SIGNET_IDLE_SESSION_MINUTES": str(10**6),
    }
    with running_service(
        database_url=args.database_url,
        redis_url=args.redis_url,
        extra_env=extra_env,
        before_serve=lambda env: fill(env, "small"),
    ) as service:
        time_starts(service, label="warm", starts=20, projects=args.projects)
        small = time_starts(service, label="small", starts=args.starts, projects=args.projects)
        fill(service.env, "rest")
        time_starts(service, label="warm-large", starts=20, projects=args.projects)
        large = time_starts(service, label="large", starts=args.starts, projects=args.projects)
        print(
            f"recovery at scale: {args.sessions:,} sessions in {args.projects} projects, "
            f"{'PostgreSQL' if args.database_url else 'SQLite'}"
            f"{' + Redis' if args.redis_url else ''}, granian + django-q2 as `make run` "
            "starts them"
        )
        print(
            f"  bulk load: {args.small:,} checkpoints (and the sessions) in "
            f"{loaded['small']:.1f} s, the other {args.checkpoints - args.small:,} in "
            f"{loaded['rest']:.1f} s ({(args.checkpoints - args.small) / loaded['rest']:,.0f} "
            "rows/s)"
        )
        for count, timed in ((args.small, small), (args.checkpoints, large)):
            print(
                f"  {count:>9,} checkpoints: SessionStart p50 {p50_ms(timed.hook):6.1f} ms  "
                f"p99 {p99_ms(timed.hook):6.1f} ms   bare view p50 {p50_ms(timed.bare):5.1f} ms"
                f"   ({timed.recovered} of {len(timed.hook)} recovered, {timed.failed} failed)"
            )
        ratio = p50_ms(large.hook) / p50_ms(small.hook)
        verdict = "met" if ratio <= GOAL_RATIO else "NOT met"
        print(
            f"  SessionStart p50 ratio {args.checkpoints:,} / {args.small:,} checkpoints: "
            f"{ratio:.2f} (goal <= {GOAL_RATIO}: {verdict})"
        )
        print(f"  the queries of one SessionStart at {args.checkpoints:,} checkpoints:")
        sys.stdout.flush()
        subprocess.run(
            [sys.executable, __file__, "--explain-token", service.token,
             "--projects", str(args.projects)],
            cwd=PROJECT, env=service.env, check=True,
        )  # fmt: skip


if __name__ == "__main__":
    main()
