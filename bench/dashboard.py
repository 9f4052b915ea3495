"""Dashboard pages on 10,000 sessions and 200,000 checkpoints: server time and queries.

Loads a throw-away database (SQLite in a temporary data folder, or ``--database-url`` for a
PostgreSQL database it may fill) in bulk, through the same inserts the service's triggers
and indexes see, then renders each page in-process with Django's test client: the time is
the server's own (URL routing, middleware, queries, templates), without a network.

For each page: the median of 20 renders, the query count, and the ratio to the baseline,
the login page rendered the same way in the same run (a template and a session, no data).
Goal: every page under 100 ms, with a query count that does not grow with the data
(``--sessions 1000 --per-session 20`` gives the same counts on a tenth of the data).

    .venv/bin/python bench/dashboard.py [--sessions 10000] [--per-session 20]
        [--database-url postgres://…/db]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from bench.load import checkpoints_insert  # noqa: E402

RUNS = 20
PASSWORD = secrets.token_urlsafe(16)
GOAL_MS = 100.0
ROWS_PER_TRANSACTION = 20_000
PROJECTS = 200
BUSY_CHECKPOINTS = 50  # the default per-session cap
WORDS = [
    "checkout",
    "payment",
    "webhook",
    "retry",
    "idempotent",
    "invoice",
    "cart",
    "refund",
    "stripe",
    "ledger",
    "migration",
    "schema",
    "cache",
    "session",
    "token",
    "throttle",
    "prune",
    "redaction",
    "recovery",
    "compaction",
    "timeline",
    "dashboard",
    "search",
    "index",
    "trigger",
    "digest",
    "branch",
    "rebase",
    "release",
    "deploy",
    "rollback",
    "queue",
]


LONG_DIGEST = "## Session Checkpoint\n\n" + "\n".join(
    f"### Step {n}\n- **{WORDS[n % len(WORDS)]}**: changed `src/{WORDS[n % 7]}/views.py`; "
    f"see [the ticket](https://tracker.example/{n}) and keep {WORDS[n % 11]} idempotent.\n"
    for n in range(32)
)


def load(sessions: int, per_session: int) -> tuple[int, int]:
    """Bulk-load the owner's history; returns (a busy session's pk, the owner's pk)."""
    from django.contrib.auth.models import User
    from django.db import connection, models

    from checkpoints.ids import uuid7
    from checkpoints.models import Checkpoint, Injection, Session

    owner = User.objects.create_user("bench", password=PASSWORD)
    User.objects.create_user("other", password=PASSWORD)
    now = datetime.now(UTC)
    Session.objects.bulk_create(
        [
            Session(
                owner=owner,
                session_key=f"history-{index}",
                harness="claude-code" if index % 3 else "codex",
                project=f"/src/project-{index % PROJECTS}",
                project_normalized=f"/src/project-{index % PROJECTS}",
                git_branch=f"feature/{WORDS[index % len(WORDS)]}",
                started_at=now - timedelta(minutes=10 * index + 120),
                last_activity_at=now - timedelta(minutes=10 * index),
                ended_at=None if index < 20 else now - timedelta(minutes=10 * index),
                prompt_count=per_session * 4,
                compaction_count=index % 4,
                context_percent=float(index % 100),
            )
            for index in range(sessions)
        ],
        batch_size=2000,
    )
    ids = dict(Session.objects.filter(owner=owner).values_list("session_key", "pk"))
    uuid_field = models.UUIDField()

    def rows() -> Iterator[tuple[Any, ...]]:
        """Oldest first; the first session (the busy one) has ``BUSY_CHECKPOINTS``, with
        digests of about 4 KB, the others ``per_session``."""
        for number in reversed(range(max(per_session, BUSY_CHECKPOINTS))):
            for index in range(sessions):
                count = BUSY_CHECKPOINTS if index == 0 else per_session
                if number >= count:
                    continue
                key = f"history-{index}"
                moment = now - timedelta(minutes=10 * index + 5 * number)
                word = WORDS[(index + number) % len(WORDS)]
                other = WORDS[(index * 7 + number) % len(WORDS)]
                yield (
                    uuid_field.get_db_prep_value(
                        uuid7(unix_ms=int(moment.timestamp() * 1000)), connection
                    ),
                    owner.pk, ids[key], key, f"/src/project-{index % PROJECTS}", "claude-code",
                    "pre_compaction" if number % 10 == 0 else "periodic",
                    LONG_DIGEST if index == 0 else
                    f"## Session Checkpoint\n\nWorking on the {word} flow; {other} next.\n",
                    f"Make the {word} step handle {other} (ticket {index}-{number})",
                    json.dumps([f"Keep {word} behind a flag", f"Use {other} for step {number}"]),
                    "[]", "[]", json.dumps([f"Test {word} with {other}"]),
                    json.dumps([f"src/{word}/views.py", f"src/{other}/models.py"]),
                    json.dumps([f"fix the {word} bug", f"why does {other} fail?"]),
                    "[]", "[]", "Running the tests now.", "main", "",
                    (count - number) * 4, 4, "", "[]",
                    connection.ops.adapt_datetimefield_value(moment),
                )  # fmt: skip

    checkpoints_insert(rows(), per_transaction=ROWS_PER_TRANSACTION)
    busy = ids["history-0"]
    latest = Checkpoint.objects.filter(session_id=busy).order_by("-created_at").first()
    Injection.objects.bulk_create(
        [
            Injection(
                session_id=pk,
                checkpoint=latest if pk == busy else None,
                source="compact",
                match="session",
                content="## Session Recovery Context\n…",
                size_chars=30,
            )
            for pk in list(ids.values())[:2000]
        ],
        batch_size=2000,
    )
    with connection.cursor() as cursor:
        # What autovacuum does after a bulk load on PostgreSQL; it also marks the pages
        # all-visible, so the activity query reads its index alone, as in steady state.
        cursor.execute("VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE")
    return busy, owner.pk


def measure(client: Any, url: str) -> tuple[float, int, int, int]:
    """Median milliseconds of ``RUNS`` renders, the query count, the status, and the number
    of table rows or search hits the page showed (so an empty page cannot pass as fast)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(url)  # warm: templates compiled, config cached
    times = []
    for _ in range(RUNS):
        began = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - began) * 1000)
    with CaptureQueriesContext(connection) as captured:
        client.get(url)
    body = response.content.decode()
    shown = sum(body.count(tag) for tag in ("<tr", '<li class="checkpoint"', "<mark>", "<rect"))
    return statistics.median(times), len(captured.captured_queries), response.status_code, shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--per-session", type=int, default=20)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()

    data = tempfile.mkdtemp(prefix="signet-bench-dashboard-")
    os.environ.update(
        SIGNET_DATA_DIR=data,
        DJANGO_SETTINGS_MODULE="signet_site.settings",
        ALLOWED_HOSTS="testserver",
        LOG_LEVEL="WARNING",
    )
    os.environ.pop("DATABASE_URL", None)
    if args.database_url:
        os.environ["DATABASE_URL"] = args.database_url
    try:
        import django

        django.setup()
        from django.conf import settings
        from django.core.management import call_command
        from django.db import connection
        from django.test import Client

        settings.STORAGES["staticfiles"] = {
            "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        }
        call_command("migrate", verbosity=0)
        call_command("createcachetable", verbosity=0)
        began = time.perf_counter()
        busy, _ = load(args.sessions, args.per_session)
        total = args.sessions * args.per_session
        print(
            f"{connection.vendor}: loaded {args.sessions:,} sessions, {total:,} checkpoints "
            f"in {time.perf_counter() - began:.0f} s"
        )
        client = Client()
        assert client.login(username="bench", password=PASSWORD)
        anonymous = Client()
        baseline, base_queries, _, _ = measure(anonymous, "/accounts/login/")
        pages: list[tuple[str, str]] = [
            ("sessions list", "/"),
            ("sessions list, page 50", "/?page=50"),
            ("sessions, filtered", "/?project=/src/project-7&state=ended&harness=claude-code"),
            ("live rows fragment", "/sessions/rows/"),
            ("session detail (50 checkpoints)", f"/sessions/{busy}/"),
            ("projects", "/projects/"),
            ("activity", "/activity/"),
            ("search, common word", "/search/?q=checkout"),
            ("search, two words", "/search/?q=payment+webhook"),
            ("search, rare term", "/search/?q=777-3"),
            ("search, no match", "/search/?q=zyzzyva"),
        ]
        print(f"baseline (login page): {baseline:.1f} ms, {base_queries} queries")
        print(f"{'page':<34}{'median ms':>10}{'queries':>9}{'x baseline':>12}  goal")
        worst = 0.0
        for name, url in pages:
            median, queries, status, shown = measure(client, url)
            assert status == 200, f"{url}: {status}"
            assert shown or "zyzzyva" in url, f"{url} showed nothing"
            worst = max(worst, median)
            verdict = f"< {GOAL_MS:.0f} ms" if median < GOAL_MS else f"OVER {GOAL_MS:.0f} ms"
            print(f"{name:<34}{median:>10.1f}{queries:>9}{median / baseline:>12.1f}  {verdict}")
        print(f"slowest page: {worst:.1f} ms ({'met' if worst < GOAL_MS else 'NOT met'})")
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
