"""Checkpoint search on SQLite (FTS5) and PostgreSQL (GIN), against baselines of the same run.

For each database, in a throw-away database of its own (a temporary SQLite file; with
``--postgres URL``, a database created on that server and dropped afterwards), loads
``--checkpoints`` checkpoints in bulk (default 200,000 in 10,000 sessions: 95 % belong to
one owner, 5 % to nineteen others), then prints for each query the median server time of
``checkpoint_search`` (a page of 21, as the dashboard asks) over ``--repeat`` runs, next to
two baselines measured in the same run: a primary-key look-up, and the ``icontains`` scan of
digests the search replaces. The ratios judged: the slowest search against both.

It also prints the index's size and how long creating it (migration 0003) takes on the
loaded rows.

    .venv/bin/python bench/search.py [--checkpoints 200000] [--postgres postgres://…/postgres]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

PAGE = 21  # the dashboard's 20 and one to learn whether a next page exists
SESSION_SIZE = 20
OTHER_OWNERS = 19
OTHERS_EVERY = 20  # one session in 20 belongs to another owner
WORDS_PER_DIGEST = 40
ROWS_PER_TRANSACTION = 10_000
DIGEST = (
    "## Session Checkpoint\n**Project:** /src/project (branch `main`)\n"
    "**Prompts:** 40 · **Duration:** 2 h 5 min\n\n### Current task\n"
    "Refactor the checkout flow so the payment step retries idempotently; keep the old "
    "API answering until the mobile app has moved over.\n\n### Modified files\n"
    "- src/checkout/flow.py\n- src/checkout/payment.py\n- tests/test_checkout.py\n\n"
    "### Notes\n"
)
SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "nu",
    "pe",
    "ra",
    "si",
    "to",
    "vu",
    "ze",
    "ba",
    "de",
    "fi",
    "go",
    "hu",
    "ja",
    "ke",
    "li",
    "mo",
    "na",
]


def vocabulary() -> list[str]:
    """8,000 made-up words: in 40 random words per digest, each is in about 1 row in 1,000."""
    return [a + b + c for a in SYLLABLES for b in SYLLABLES for c in SYLLABLES]


def load(total: int) -> dict[str, Any]:
    """Fill the tables in bulk, as the hooks would have over months; the search index is
    kept up to date meanwhile (triggers, GIN), as it would be."""
    from django.contrib.auth.models import User
    from django.db import connection, transaction

    from checkpoints.ids import uuid7
    from checkpoints.models import Checkpoint, Session

    rng = random.Random(7)
    words = vocabulary()
    owner = User.objects.create(username="bench")
    others = [User.objects.create(username=f"other{n}") for n in range(OTHER_OWNERS)]
    sessions = total // SESSION_SIZE
    now = datetime.now(UTC)

    def owner_of(index: int) -> User:
        return others[index % OTHER_OWNERS] if index % OTHERS_EVERY == 0 else owner

    Session.objects.bulk_create(
        [
            Session(
                owner=owner_of(index),
                session_key=f"history-{index}",
                harness="claude-code",
                project_normalized=f"/src/project-{index % 50}",
                started_at=now - timedelta(days=30),
                last_activity_at=now - timedelta(hours=index % 48),
            )
            for index in range(sessions)
        ],
        batch_size=2000,
    )
    ids = dict(Session.objects.values_list("session_key", "pk"))
    files = ["src/checkout/flow.py", "src/checkout/payment.py"]
    decisions = ["Retry with an idempotency key", "Keep the v1 API until June"]

    def rows() -> Iterator[Checkpoint]:
        """Oldest first, sessions interleaved, as a service writes them over time."""
        start = now - timedelta(days=30)
        step = timedelta(days=30) / total
        for number in range(total):
            index = number % sessions
            moment = start + step * number
            yield Checkpoint(
                id=uuid7(unix_ms=int(moment.timestamp() * 1000)),
                owner=owner_of(index),
                session_id=ids[f"history-{index}"],
                session_key=f"history-{index}",
                project_normalized=f"/src/project-{index % 50}",
                harness="claude-code",
                trigger="periodic",
                digest=DIGEST + " ".join(rng.choices(words, k=WORDS_PER_DIGEST)),
                current_task="Refactor the checkout flow",
                decisions=decisions,
                modified_files=files,
                recent_prompts=[" ".join(rng.choices(words, k=6)) for _ in range(2)],
                last_assistant_message="Running the payment tests now.",
                git_branch="main",
                prompt_count=number // sessions,
                created_at=moment,
            )

    began = time.perf_counter()
    batch: list[Checkpoint] = []
    for row in rows():
        batch.append(row)
        if len(batch) >= ROWS_PER_TRANSACTION:
            with transaction.atomic():
                Checkpoint.objects.bulk_create(batch, batch_size=1000)
            batch = []
    if batch:
        with transaction.atomic():
            Checkpoint.objects.bulk_create(batch, batch_size=1000)
    with connection.cursor() as cursor:
        # The steady state autovacuum keeps: statistics, and on PostgreSQL the GIN index's
        # pending list (where fast updates queue) merged into the index.
        cursor.execute("VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE")
    return {"load_seconds": time.perf_counter() - began, "sessions": sessions}


def median_ms(call: Callable[[], object], repeat: int) -> float:
    call()  # warm the caches and the connection
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def measure(repeat: int) -> dict[str, Any]:
    from django.contrib.auth.models import User

    from checkpoints.models import Checkpoint
    from checkpoints.search import checkpoint_search

    owner = User.objects.get(username="bench")
    small = User.objects.get(username="other0")
    rare = vocabulary()[1234]
    some_pk = Checkpoint.objects.order_by("id").values_list("pk", flat=True)[1000]

    def searching(query: str, who: User | None) -> Callable[[], object]:
        return lambda: checkpoint_search(owner=who, query=query, limit=PAGE)

    def scanning(word: str) -> Callable[[], object]:
        return lambda: list(
            Checkpoint.objects.filter(owner=owner, digest__icontains=word)
            .order_by("-created_at")
            .values("id", "session_id", "digest")[:PAGE]
        )

    matches = {
        "rare": Checkpoint.objects.filter(digest__contains=rare).count(),
        "common": Checkpoint.objects.count(),
    }
    cases = {
        "pk look-up (baseline)": lambda: list(
            Checkpoint.objects.filter(pk=some_pk).values("id", "digest")
        ),
        f"icontains scan, rare word ({matches['rare']} rows)": scanning(rare),
        "icontains scan, missing word": scanning("zzmissing"),
        f"search rare word ({matches['rare']} rows)": searching(rare, owner),
        "search common word (every row)": searching("checkout", owner),
        "search two words, one rare": searching(f"payment {rare}", owner),
        "search missing word": searching("zzmissing", owner),
        "search phrase": searching('"payment step retries"', owner),
        "search common word, small owner (5 %/19)": searching("checkout", small),
        "search common word, every owner": searching("checkout", None),
    }
    return {name: median_ms(call, repeat) for name, call in cases.items()}


def index_build_seconds() -> float:
    """How long ``search_index_create`` (migration 0003) takes on the loaded rows."""
    from django.db import connection

    from checkpoints.search import search_index_create, search_index_drop

    with connection.schema_editor() as editor:
        search_index_drop(schema_editor=editor)
    began = time.perf_counter()
    with connection.schema_editor() as editor:
        search_index_create(schema_editor=editor)
    return time.perf_counter() - began


def index_bytes() -> tuple[int, int]:
    """The search index's size and the checkpoint table's, in bytes (0 when unknown)."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT pg_relation_size('checkpoint_search'),"
                " pg_total_relation_size('checkpoints_checkpoint')"
                " - pg_indexes_size('checkpoints_checkpoint')"
            )
            index, table = cursor.fetchone()
            return int(index), int(table)
        try:
            cursor.execute(
                "SELECT sum(CASE WHEN name LIKE 'checkpoint_search%' THEN pgsize END),"
                " sum(CASE WHEN name = 'checkpoints_checkpoint' THEN pgsize END) FROM dbstat"
            )
        except Exception:  # SQLite built without the dbstat table
            return 0, 0
        index, table = cursor.fetchone()
        return int(index or 0), int(table or 0)


def child(args: argparse.Namespace) -> None:
    """One database, inside Django: load, measure, print the figures as JSON."""
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("createcachetable", verbosity=0)  # the config is read through the cache
    figures: dict[str, Any] = load(args.checkpoints)
    figures["index_bytes"], figures["table_bytes"] = index_bytes()
    figures["medians"] = measure(args.repeat)
    figures["build_seconds"] = index_build_seconds()
    print(json.dumps(figures))


def run_child(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--checkpoints", str(args.checkpoints),
         "--repeat", str(args.repeat)],
        cwd=PROJECT, env=env, check=True, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    figures: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def base_env(data: str) -> dict[str, str]:
    env = {
        **os.environ,
        "SIGNET_DATA_DIR": data,
        "DJANGO_SETTINGS_MODULE": "signet_site.settings",
        "LOG_LEVEL": "WARNING",
    }
    env.pop("DATABASE_URL", None)
    return env


def on_postgres(server_url: str, run: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """``run`` with the URL of a database made for it on ``server_url``'s server."""
    import psycopg

    name = f"signet_bench_search_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            parts = urllib.parse.urlsplit(server_url)
            return run(urllib.parse.urlunsplit(parts._replace(path=f"/{name}")))
        finally:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def report(database: str, total: int, figures: dict[str, Any]) -> None:
    medians = figures["medians"]
    print(f"\n{database}: {total:,} checkpoints in {figures['sessions']:,} sessions")
    print(
        f"  bulk load, index kept up to date  {figures['load_seconds']:7.1f} s"
        f" ({total / figures['load_seconds']:,.0f} rows/s)"
    )
    if figures["index_bytes"]:
        print(
            f"  search index {figures['index_bytes'] / 2**20:,.1f} MiB;"
            f" checkpoint table {figures['table_bytes'] / 2**20:,.1f} MiB"
        )
    for name, ms in medians.items():
        print(f"  {name:46} {ms:8.2f} ms")
    searches = [ms for name, ms in medians.items() if name.startswith("search")]
    scans = [ms for name, ms in medians.items() if name.startswith("icontains")]
    baseline = medians["pk look-up (baseline)"]
    print(
        f"  slowest search {max(searches):.1f} ms: {max(searches) / baseline:.0f} x the pk"
        f" look-up, {max(searches) / max(scans):.3f} x the slowest scan"
    )
    print(
        f"  creating the index on {total:,} rows (migration 0003): {figures['build_seconds']:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--postgres", default="", help="a server URL whose user may create DBs")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    print(f"search bench: checkpoint_search pages of {PAGE}, median of {args.repeat}")
    with tempfile.TemporaryDirectory(prefix="signet-bench-") as data:
        report("SQLite", args.checkpoints, run_child(args, base_env(data)))
    if args.postgres:
        with tempfile.TemporaryDirectory(prefix="signet-bench-") as data:

            def on(url: str) -> dict[str, Any]:
                return run_child(args, {**base_env(data), "DATABASE_URL": url})

            report("PostgreSQL", args.checkpoints, on_postgres(args.postgres, on))


if __name__ == "__main__":
    main()
