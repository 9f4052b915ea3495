"""RSS of the web workers over 100,000 hook events: does it stay flat?

Starts the service as ``make run`` does (granian + django-q2; SQLite by default,
``--database-url`` for PostgreSQL, ``--redis-url`` for Redis), then posts ``--events``
events (default 100,000), UserPromptSubmit and PostToolUse (an edit) in turn, across
``--sessions`` sessions (default 200) from ``--threads`` client threads (default 16), each
over a fresh connection as a hook does. It reads the resident memory (VmRSS) of each granian
worker process, the descendants of ``manage.py serve``, after 10 %, 50 % and 100 % of the
events, and prints the workers' total at each, and the growth from the first sample to the
last, which is judged (goal: under 10 %, the memory stays flat once the workers are warm).

    .venv/bin/python bench/memory.py [--events 100000] [--sessions 200] [--threads 16]
        [--database-url URL] [--redis-url URL]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.parse
from collections import Counter
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from bench.service import Running, post_json, running_service  # noqa: E402

HOOK = "/api/hooks/claude-code/"
GOAL_GROWTH = 0.10
MARKS = (0.1, 0.5, 1.0)  # the fractions of the events after which RSS is read
FIXTURES = PROJECT / "tests/fixtures/claude_code"
PROMPT = json.loads((FIXTURES / "user_prompt_submit.json").read_text())
EDIT = json.loads((FIXTURES / "post_tool_use_edit.json").read_text())


def parent_of(pid: int) -> int | None:
    """The parent pid from ``/proc/<pid>/stat`` (None if the process is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2 :].split()[1])  # after "pid (comm) state"


def descendants(root: int) -> list[int]:
    """Every process below ``root``, found through the parent chains in ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = parent_of(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def rss_kib(pid: int) -> int:
    """VmRSS of ``pid`` in KiB (0 if the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def web_workers(serve_pid: int) -> list[int]:
    """The granian worker processes: the descendants of granian's main process (the main
    process itself when it has none)."""
    main = [pid for pid in descendants(serve_pid) if "granian" in command_line(pid)]
    main = [pid for pid in main if parent_of(pid) == serve_pid] or main
    workers = [pid for leader in main for pid in descendants(leader)]
    return sorted(workers or main)


class Sender:
    """Posts numbered events from many threads, each over a fresh connection."""

    def __init__(self, service: Running, sessions: int) -> None:
        parsed = urllib.parse.urlsplit(service.url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port
        self.token = service.token
        self.sessions = sessions
        self.sent = 0
        self.failures: Counter[str] = Counter()  # status (or error) -> count
        self._lock = threading.Lock()

    def body(self, number: int) -> str:
        session = f"memory-{number % self.sessions}"
        if number // self.sessions % 2:  # every session gets prompts and edits in turn
            edit = {**EDIT["tool_input"], "file_path": f"/src/app/module_{number % 97}.py"}
            return json.dumps({**EDIT, "session_id": session, "tool_input": edit})
        return json.dumps({**PROMPT, "session_id": session, "prompt": f"step {number}"})

    def send_until(self, total: int, threads: int) -> None:
        def work() -> None:
            while True:
                with self._lock:
                    if self.sent >= total:
                        return
                    number = self.sent
                    self.sent += 1
                try:
                    status = post_json(
                        host=self.host,
                        port=self.port,
                        path=HOOK,
                        token=self.token,
                        body=self.body(number),
                    )
                    outcome = str(status)
                except OSError as exc:
                    status, outcome = 0, type(exc).__name__
                if status != 200:
                    with self._lock:
                        self.failures[outcome] += 1

        pool = [threading.Thread(target=work) for _ in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--threads", type=int, default=16, help="client threads")
    parser.add_argument("--database-url", default="")
    parser.add_argument("--redis-url", default="", help="cache and task broker (REDIS_URL)")
    args = parser.parse_args()
    samples: list[tuple[int, float, dict[int, int]]] = []
    with running_service(database_url=args.database_url, redis_url=args.redis_url) as service:
        workers = web_workers(service.pid)
        if not workers:
            raise SystemExit("no granian worker process found below manage.py serve")
        sender = Sender(service, args.sessions)
        began = time.perf_counter()
        for mark in MARKS:
            sender.send_until(int(args.events * mark), args.threads)
            samples.append(
                (sender.sent, time.perf_counter() - began, {pid: rss_kib(pid) for pid in workers})
            )
        after = web_workers(service.pid)
    stores = ("PostgreSQL" if args.database_url else "SQLite") + (
        " + Redis" if args.redis_url else ""
    )
    print(
        f"memory bench: {args.events:,} hook events (UserPromptSubmit and PostToolUse) over "
        f"{args.sessions} sessions from {args.threads} threads, {stores}, "
        f"{len(workers)} granian worker{'s' if len(workers) > 1 else ''}"
    )
    for sent, elapsed, rss in samples:
        each = ", ".join(f"{kib / 1024:.1f}" for kib in rss.values())
        print(
            f"  after {sent:>9,} events ({elapsed:6.1f} s): workers' RSS "
            f"{sum(rss.values()) / 1024:7.1f} MiB in all ({each} MiB each)"
        )
    first, last = sum(samples[0][2].values()), sum(samples[-1][2].values())
    growth = (last - first) / first
    verdict = "met" if growth < GOAL_GROWTH and after == workers else "NOT met"
    print(
        f"  growth from {samples[0][0]:,} to {samples[-1][0]:,} events: "
        f"{(last - first) / 1024:+.1f} MiB ({growth:+.1%}) (goal < {GOAL_GROWTH:.0%}: {verdict}); "
        f"{sender.failures.total()} failed requests"
        + "".join(f", {count} x {outcome}" for outcome, count in sender.failures.most_common())
    )
    if after != workers:
        print(f"  the workers changed during the run (respawned?): {workers} -> {after}")


if __name__ == "__main__":
    main()
