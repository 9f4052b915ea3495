"""Run every benchmark and write ``BENCHMARKS.md``: the machine, the date, each bench's exact
command, its printed figures, its goal and whether the goal was met.

Each bench runs as a subprocess (its output is shown as it goes and kept for the file).
On SQLite always; the hot path and recovery also on PostgreSQL + Redis when
``--database-url`` and ``--redis-url`` (or ``DATABASE_URL`` and ``REDIS_URL``) are given.
Each PostgreSQL bench runs in a throw-away database of its own on that server, named
``<database>_<bench>`` and dropped afterwards (the role needs ``CREATEDB``); the URL's own
database is not touched. Without them, ``BENCHMARKS.md`` says those parts were not run.

    make bench                                   # or: .venv/bin/python bench/run_all.py
    .venv/bin/python bench/run_all.py [--quick] [--only NAME[,NAME]] [--database-url URL]
        [--redis-url URL] [--output BENCHMARKS.md]

``--quick`` runs smaller counts (to try it out: the figures are then not the goals' own).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sqlite3
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
PYTHON = ".venv/bin/python"  # as the commands are written in the file
STORES = {"DATABASE_URL", "REDIS_URL"}  # the benches get them as options only


@dataclass(frozen=True)
class Bench:
    name: str
    title: str
    goal: str
    args: list[str]  # after ``python bench/<script>``
    quick: list[str]  # replaces ``args`` with --quick
    script: str = ""
    on_postgres: bool = False  # also runs on PostgreSQL + Redis when given

    @property
    def path(self) -> str:
        return f"bench/{self.script or self.name}.py"


BENCHES = [
    Bench(
        "hook_path",
        "Hot path: UserPromptSubmit vs a bare Django view",
        "throughput >= 0.5 of the bare view's at 32 and 64 concurrent sessions, median of 5 "
        "alternating rounds of at least 4,000 requests a drive (1 and 256 shown for the curve)",
        ["--sessions", "1,32,64,256", "--requests", "40", "--rounds", "5", "--min-drive", "4000"],
        ["--sessions", "1,32,64,256", "--requests", "5", "--rounds", "1", "--min-drive", "0"],
        on_postgres=True,
    ),
    Bench(
        "latency",
        "Latency: one client under `make run` (scheduler running), alone and beside a load",
        "one client's p99 < 10 ms and slowest < 50 ms over 1,500 prompts round 64 sessions; "
        "beside another token's in-quota load (80 req/s) its median <= 2x its median alone",
        ["--prompts", "1500", "--sessions", "64", "--load-rate", "80"],
        ["--prompts", "300", "--sessions", "16", "--load-rate", "80"],
        on_postgres=True,
    ),
    Bench(
        "recovery_scale",
        "Recovery at scale: SessionStart with 1,000 vs 1,000,000 checkpoints",
        "SessionStart p50 at 1,000,000 checkpoints <= 1.5x its p50 at 1,000 (20,000 "
        "sessions, 500 projects); every query index-backed",
        ["--checkpoints", "1000000", "--sessions", "20000", "--projects", "500"],
        ["--checkpoints", "100000", "--sessions", "20000", "--projects", "500", "--starts", "50"],
        on_postgres=True,
    ),
    Bench(
        "hook_client",
        "Hook clients: command hooks vs bare curl, and the http hook round trip",
        "each command hook (SessionStart, PreCompact, Stop) <= 1.5x a bare curl POST of the "
        "same payload (median); the http hook's p99 < 25 ms",
        ["--calls", "40"],
        ["--calls", "5"],
    ),
    Bench(
        "redaction",
        "Redaction: 2 KB and 64 KB",
        "median under 5 ms on 2 KB; cost per KB on 64 KB <= 1.5x that on 2 KB",
        ["--runs", "2000"],
        ["--runs", "200"],
    ),
    Bench(
        "memory",
        "Memory: web workers' RSS over 100,000 hook events",
        "the workers' RSS grows less than 10 % from 10,000 to 100,000 events",
        ["--events", "100000"],
        ["--events", "5000"],
    ),
]


@dataclass
class Outcome:
    bench: Bench
    stores: str
    command: str
    output: str = ""
    seconds: float = 0.0
    returncode: int = 0
    verdicts: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if self.returncode:
            return f"FAILED (exit status {self.returncode})"
        if not self.verdicts:
            return "no verdict printed"
        return "NOT met" if "NOT met" in self.verdicts else "met"


def scrubbed(text: str, secrets: list[tuple[str, str]]) -> str:
    """``text`` without this machine's paths or the URLs given (they name hosts, maybe a
    password): the project as ``.``, any other absolute path of a few kinds as ``<path>``."""
    for secret, shown in sorted(secrets, key=lambda pair: -len(pair[0])):
        text = text.replace(secret, shown)
    text = text.replace(str(PROJECT), ".")
    return re.sub(r"/(?:tmp|root|home|usr|opt|var|work|srv)/[^\s\"',)]*", "<path>", text)


def run(
    bench: Bench, args: list[str], stores: str, shown: list[str], env: dict[str, str]
) -> Outcome:
    """Run one bench, echoing its output; the command as written is ``shown``."""
    command = " ".join([PYTHON, bench.path, *shown])
    print(f"\n=== {bench.name} ({stores}): {command}", flush=True)
    outcome = Outcome(bench, stores, command)
    began = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, bench.path, *args],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        lines.append(line)
    outcome.returncode = proc.wait()
    outcome.seconds = time.perf_counter() - began
    outcome.output = "".join(lines)
    outcome.verdicts = re.findall(r"\b(NOT met|met)\b", outcome.output)
    return outcome


@contextmanager
def throwaway_database(url: str, name: str) -> Iterator[str]:
    """A fresh database ``<database>_<name>`` on the server of ``url``; its URL. Dropped after."""
    import psycopg
    from psycopg import sql

    parts = urllib.parse.urlsplit(url)
    database = f"{parts.path.lstrip('/') or 'postgres'}_{name}"
    statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    try:
        yield urllib.parse.urlunsplit(parts._replace(path=f"/{database}"))
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(statement)


def machine(database_url: str, redis_url: str) -> list[str]:
    """What the figures were measured on, without anything naming this machine."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line),
        platform.processor() or "unknown",
    )
    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    found = re.search(r"MemTotal:\s+(\d+) kB", meminfo)
    ram = f"{int(found.group(1)) / 2**20:.1f} GiB" if found else "unknown"
    lines = [
        f"- CPU: {os.cpu_count()} x {model}",
        f"- RAM: {ram}",
        f"- OS: {platform.system()} {platform.release()}",
        f"- Python {platform.python_version()}",
        f"- SQLite {sqlite3.sqlite_version}",
    ]
    if database_url:
        try:
            import psycopg

            with psycopg.connect(database_url) as conn:
                row = conn.execute("SHOW server_version").fetchone()
            lines.append(f"- PostgreSQL {row[0] if row else 'unknown'}")
        except Exception as exc:  # the report says why, the run goes on
            lines.append(f"- PostgreSQL: version unknown ({type(exc).__name__})")
    if redis_url:
        try:
            import redis

            info = redis.Redis.from_url(redis_url).info("server")
            lines.append(f"- Redis {info.get('redis_version', 'unknown')}")
        except Exception as exc:
            lines.append(f"- Redis: version unknown ({type(exc).__name__})")
    return lines


def report(
    outcomes: list[Outcome],
    *,
    quick: bool,
    database_url: str,
    redis_url: str,
    selected: list[Bench],
    secrets: list[tuple[str, str]],
    began: datetime,
) -> str:
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`bench/run_all.py`); each figure is judged against a baseline "
        "measured in the same run (see each script's docstring). Timings on a shared or busy "
        "machine are noisy: compare figures of one run with each other.",
        "",
        f"Run: {began:%Y-%m-%d %H:%M} UTC"
        + (
            " — **--quick**: smaller counts than the goals name, to try the runner out"
            if quick
            else ""
        ),
        "",
        "## Machine",
        "",
        *machine(database_url, redis_url),
        "",
        "## Summary",
        "",
        "| Bench | Stores | Goal | Result |",
        "|---|---|---|---|",
    ]
    for outcome in outcomes:
        lines.append(
            f"| {outcome.bench.title} | {outcome.stores} | {outcome.bench.goal} | "
            f"{outcome.verdict} |"
        )
    if not database_url:
        for bench in selected:
            if bench.on_postgres:
                lines.append(
                    f"| {bench.title} | PostgreSQL + Redis | {bench.goal} | not run (no "
                    "DATABASE_URL / REDIS_URL given) |"
                )
    for bench in selected:
        lines += ["", f"## {bench.title}", "", f"Goal: {bench.goal}."]
        for outcome in (o for o in outcomes if o.bench is bench):
            lines += [
                "",
                f"### {outcome.stores}: {outcome.verdict}",
                "",
                "```sh",
                outcome.command,
                "```",
                "",
                f"({outcome.seconds:.0f} s)",
                "",
                "```",
                scrubbed(outcome.output.rstrip(), secrets),
                "```",
            ]
        if bench.on_postgres and not database_url:
            lines += [
                "",
                "### PostgreSQL + Redis: not run",
                "",
                "No `DATABASE_URL` and `REDIS_URL` (or `--database-url` and `--redis-url`) "
                "were given.",
            ]
    if database_url and not redis_url:
        lines += ["", "(PostgreSQL ran without Redis: no `REDIS_URL` was given.)"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts, to try it out")
    parser.add_argument(
        "--only", default="", help=f"comma-separated: {', '.join(b.name for b in BENCHES)}"
    )
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", ""))
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL", ""))
    parser.add_argument("--output", default=str(PROJECT / "BENCHMARKS.md"))
    args = parser.parse_args()
    names = {name.strip() for name in args.only.split(",") if name.strip()}
    unknown = names - {bench.name for bench in BENCHES}
    if unknown:
        parser.error(f"unknown bench {', '.join(sorted(unknown))}")
    selected = [bench for bench in BENCHES if not names or bench.name in names]
    env = {key: value for key, value in os.environ.items() if key not in STORES}
    given = ((args.database_url, "$DATABASE_URL"), (args.redis_url, "$REDIS_URL"))
    secrets = [(url, shown) for url, shown in given if url]
    began = datetime.now(UTC)
    outcomes: list[Outcome] = []
    for bench in selected:
        bench_args = bench.quick if args.quick else bench.args
        outcomes.append(run(bench, bench_args, "SQLite", bench_args, env))
        if bench.on_postgres and args.database_url:
            stores = "PostgreSQL + Redis" if args.redis_url else "PostgreSQL"
            shown = [*bench_args, "--database-url", "$DATABASE_URL"]
            redis_args = ["--redis-url", args.redis_url] if args.redis_url else []
            if args.redis_url:
                shown += ["--redis-url", "$REDIS_URL"]
            with throwaway_database(args.database_url, bench.name) as url:
                secrets.append((url, "$DATABASE_URL"))
                outcomes.append(
                    run(
                        bench, [*bench_args, "--database-url", url, *redis_args], stores, shown, env
                    )
                )
    text = report(
        outcomes,
        quick=args.quick,
        database_url=args.database_url,
        redis_url=args.redis_url,
        selected=selected,
        secrets=secrets,
        began=began,
    )
    Path(args.output).write_text(text)
    print(f"\nwrote {Path(args.output).name}")
    for outcome in outcomes:
        print(f"  {outcome.bench.name:15} {outcome.stores:20} {outcome.verdict}")
    if any(outcome.returncode for outcome in outcomes):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
