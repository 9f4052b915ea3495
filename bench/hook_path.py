"""UserPromptSubmit through the real hook path vs a bare Django JSON view, same server.

Starts the service once, as ``make run`` does (granian + django-q2, SQLite by default, or
``--database-url`` for PostgreSQL, ``--redis-url`` for Redis as cache and broker), then for
each count in ``--sessions`` drives that many concurrent sessions, each sending prompts back
to back, first at ``/bench/bare/`` and then at ``/api/hooks/claude-code/``. Prints
requests/s and p50/p99 for both at each count and the ratio the hook path is judged by
(goal: >= 0.5 of the bare view's throughput at 32 and 64 sessions). Each count runs
``--rounds`` times, bare and hook in turn, and the median ratio is judged: on a shared
2-core machine one round's ratio moves with the neighbours (the bare view alone moves
between 1,600 and 3,000 req/s from one round to the next), so 5 rounds, and each drive
sends at least ``--min-drive`` requests (each session then sends more than ``--requests``):
drives of 1,280 requests, about half a second for the bare view, gave rounds from 0.42 to
0.77 in one run; drives of 3,840 gave 0.54 to 0.63. Hook
posts are served with a shorter middleware list than pages (``signet_site/handlers.py``), so
the same bare view behind that list (``/api/hooks/bare/``) is measured too and its ratio
shown, not judged.

Each round also drives the two floors of ``bench/urls.py``, after the hook (whose sessions
they write): the token, the throttle count, the JSON body and then one UPDATE of the session
(``floor, write``), or the hook's own read and conditional write-back of it (``floor, read +
write``). They show what the stores cost before any of the hook's own work: the hook's
throughput as a share of the second is how near it runs to the floor of its design (shown,
not judged).

    .venv/bin/python bench/hook_path.py [--sessions 1,32,64,256] [--requests 40] [--rounds 5]
        [--min-drive 4000] [--database-url URL] [--redis-url URL] [--workers N] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.service import post_json, running_service

# The counts the throughput goal is judged at; the others are shown for the curve. (One
# client's latency has its own goal and bench: bench/latency.py.)
JUDGED_AT = (32, 64)
BARE = "/bench/bare/"
BARE_HOOK_MIDDLEWARE = "/api/hooks/bare/"
HOOK = "/api/hooks/claude-code/"
FLOOR_WRITE = "/api/hooks/floor/write/"
FLOOR_READ_WRITE = "/api/hooks/floor/read-write/"
PAYLOAD = json.loads(
    (
        Path(__file__).resolve().parent.parent
        / "tests/fixtures/claude_code/user_prompt_submit.json"
    ).read_text()
)


def drive(url: str, path: str, token: str, sessions: int, per_session: int) -> dict[str, float]:
    parsed = urllib.parse.urlsplit(url)
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    start_gate = threading.Barrier(sessions + 1)

    def session(index: int) -> None:
        mine: list[float] = []
        start_gate.wait()
        for number in range(per_session):
            body = json.dumps(
                {**PAYLOAD, "session_id": f"bench-{index}", "prompt": f"step {number} of task"}
            )
            began = time.perf_counter()
            try:
                status = post_json(
                    host=parsed.hostname or "127.0.0.1",
                    port=parsed.port,
                    path=path,
                    token=token,
                    body=body,
                )
                if status != 200:
                    failures.append(f"{status}")
            except OSError as exc:
                failures.append(repr(exc))
            mine.append(time.perf_counter() - began)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=session, args=(n,)) for n in range(sessions)]
    for thread in threads:
        thread.start()
    start_gate.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    latencies.sort()
    return {
        "requests": len(latencies),
        "failures": len(failures),
        "rps": len(latencies) / wall,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def counts(text: str) -> list[int]:
    """``"1,32,64"`` -> ``[1, 32, 64]``."""
    try:
        found = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from exc
    if not found or min(found) < 1:
        raise argparse.ArgumentTypeError(f"not a list of positive numbers: {text!r}")
    return found


@dataclass(frozen=True)
class Round:
    """One round at a session count: the bare view, the hook, the bare view behind the
    hooks' middleware, then the two floors, one after the other."""

    bare: dict[str, float]
    hook: dict[str, float]
    lean: dict[str, float]
    floor_write: dict[str, float]
    floor_read_write: dict[str, float]


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--sessions", type=counts, default=[64], help="concurrent sessions, e.g. 1,32,64,256"
    )
    parser.add_argument("--requests", type=int, default=40, help="per session, at least")
    parser.add_argument(
        "--min-drive",
        type=int,
        default=4000,
        help="requests per drive, at least (more per session where there are few sessions)",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="alternating rounds per count (median judged)"
    )
    parser.add_argument("--database-url", default="")
    parser.add_argument("--redis-url", default="", help="cache and task broker (REDIS_URL)")
    parser.add_argument(
        "--workers", type=int, default=0, help="web server processes (default: serve's)"
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="threads per web process (default: serve's)"
    )
    args = parser.parse_args()
    results: list[tuple[int, int, list[Round]]] = []
    with running_service(
        database_url=args.database_url,
        redis_url=args.redis_url,
        workers=args.workers,
        threads=args.threads,
    ) as service:
        drive(service.url, BARE, service.token, 8, 5)  # warm every worker
        drive(service.url, HOOK, service.token, 8, 5)
        for sessions in args.sessions:
            per_session = max(args.requests, -(-args.min_drive // sessions))
            rounds = []
            for _ in range(args.rounds):
                bare = drive(service.url, BARE, service.token, sessions, per_session)
                hook = drive(service.url, HOOK, service.token, sessions, per_session)
                lean = drive(
                    service.url, BARE_HOOK_MIDDLEWARE, service.token, sessions, per_session
                )
                floors = [
                    drive(service.url, floor, service.token, sessions, per_session)
                    for floor in (FLOOR_WRITE, FLOOR_READ_WRITE)
                ]
                rounds.append(
                    Round(
                        bare=bare,
                        hook=hook,
                        lean=lean,
                        floor_write=floors[0],
                        floor_read_write=floors[1],
                    )
                )
            results.append((sessions, per_session, rounds))
    stores = ("PostgreSQL" if args.database_url else "SQLite") + (
        " + Redis" if args.redis_url else ""
    )
    print(f"hook path bench: UserPromptSubmit vs the bare view, at least {args.requests} prompts "
          f"per session and {args.min_drive} per drive, {args.rounds} alternating rounds "
          f"(figures: medians over the rounds), {stores}, the web server as `make run` "
          f"starts it")  # fmt: skip
    for sessions, per_session, rounds in results:
        print(f"{sessions} concurrent session{'s' if sessions > 1 else ''}, "
              f"{per_session} prompts each:")  # fmt: skip
        for name, key in (
            ("bare Django JSON view", "bare"),
            ("UserPromptSubmit hook", "hook"),
            ("bare view, hooks' list", "lean"),
            ("floor, write", "floor_write"),
            ("floor, read + write", "floor_read_write"),
        ):
            figures = {
                metric: statistics.median(getattr(one, key)[metric] for one in rounds)
                for metric in ("rps", "p50_ms", "p99_ms")
            }
            failed = sum(int(getattr(one, key)["failures"]) for one in rounds)
            sent = sum(int(getattr(one, key)["requests"]) for one in rounds)
            print(
                f"  {name:24} {figures['rps']:8.1f} req/s   p50 {figures['p50_ms']:6.1f} ms   "
                f"p99 {figures['p99_ms']:6.1f} ms   ({failed} failed of {sent})"
            )
        ratios = [one.hook["rps"] / one.bare["rps"] for one in rounds]
        ratio = statistics.median(ratios)
        judged = sessions in JUDGED_AT
        print(f"  throughput ratio hook/bare by round: {' '.join(f'{r:.2f}' for r in ratios)}; "
              f"median {ratio:.2f}"
              + (f" (goal >= 0.50: {verdict(ratio >= 0.5)})" if judged else ""))  # fmt: skip
        lean_ratio = statistics.median(one.hook["rps"] / one.lean["rps"] for one in rounds)
        print(f"  ratio hook / bare view behind the hooks' middleware (median): "
              f"{lean_ratio:.2f} (shown, not judged)")  # fmt: skip
        for name, key in (("write", "floor_write"), ("read + write", "floor_read_write")):
            floor_ratio = statistics.median(
                getattr(one, key)["rps"] / one.bare["rps"] for one in rounds
            )
            share = statistics.median(one.hook["rps"] / getattr(one, key)["rps"] for one in rounds)
            print(f"  floor, {name}: {floor_ratio:.2f} of the bare view; the hook runs at "
                  f"{share:.2f} of it (medians; shown, not judged)")  # fmt: skip


if __name__ == "__main__":
    main()
