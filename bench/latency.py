"""One agent's hook latency under ``make run`` (the scheduler running), alone and beside
another token's load.

The service starts as ``make run`` starts it (granian + the django-q2 cluster, SQLite by
default), with the default ingest quota (6,000/min per token). Then:

1. **Alone.** One client sends ``--prompts`` UserPromptSubmits back to back, going round
   ``--sessions`` sessions in turn, each on a fresh connection as a harness's http hook
   does. Goal: p99 < 10 ms and the slowest < 50 ms. The bare JSON view, timed the same way
   in the same run, is the floor. Shown besides: each session's first prompt (it creates
   the session and looks for a checkpoint to recover from) apart from the later ones.
2. **Beside a load.** A second token sends prompts at ``--load-rate`` per second (inside its
   quota) from as many sessions, while the first client sends ``--prompts`` again. Goal: the
   first client's median is at most 2x its median alone.

    .venv/bin/python bench/latency.py [--prompts 1500] [--sessions 64] [--load-rate 80]
        [--database-url URL] [--redis-url URL]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.service import PROJECT, post_json, running_service

BARE = "/bench/bare/"
HOOK = "/api/hooks/claude-code/"
PAYLOAD = json.loads((PROJECT / "tests/fixtures/claude_code/user_prompt_submit.json").read_text())
SLOW_MS = 30.0


def one_client(
    url: str, path: str, token: str, *, prompts: int, sessions: int, prefix: str
) -> list[float]:
    """Latencies (ms) of ``prompts`` requests sent one after another, round the sessions."""
    parsed = urllib.parse.urlsplit(url)
    latencies = []
    for number in range(prompts):
        body = json.dumps(
            {
                **PAYLOAD,
                "session_id": f"{prefix}-{number % sessions}",
                "prompt": f"step {number}: fix the parser and rerun the tests",
            }
        )
        began = time.perf_counter()
        status = post_json(
            host=parsed.hostname or "127.0.0.1", port=parsed.port, path=path, token=token, body=body
        )
        latencies.append((time.perf_counter() - began) * 1000)
        if status != 200:
            raise SystemExit(f"{path} answered {status}")
    return latencies


class Load:
    """Another token's prompts at ``rate`` per second from ``sessions`` sessions, paced."""

    def __init__(self, url: str, token: str, *, rate: float, sessions: int) -> None:
        self.url = urllib.parse.urlsplit(url)
        self.token = token
        self.rate = rate
        self.sessions = sessions
        self.stop = threading.Event()
        self.sent = 0
        self.refused = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(n,)) for n in range(8)]

    def _run(self, index: int) -> None:
        interval = len(self.threads) / self.rate
        due = time.perf_counter() + index * interval / len(self.threads)
        number = index
        while not self.stop.is_set():
            time.sleep(max(0.0, due - time.perf_counter()))
            due += interval
            body = json.dumps(
                {
                    **PAYLOAD,
                    "session_id": f"load-{number % self.sessions}",
                    "prompt": f"load {number}",
                }
            )
            status = post_json(
                host=self.url.hostname or "127.0.0.1",
                port=self.url.port,
                path=HOOK,
                token=self.token,
                body=body,
            )
            with self.lock:
                self.sent += 1
                self.refused += status != 200
            number += len(self.threads)

    def __enter__(self) -> Load:
        self.began = time.perf_counter()
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()
        self.seconds = time.perf_counter() - self.began


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "p50": statistics.median(ordered),
        "p99": ordered[max(0, int(len(ordered) * 0.99) - 1)],
        "max": ordered[-1],
        "slow": sum(value > SLOW_MS for value in ordered),
    }


def line(name: str, figures: dict[str, float], count: int) -> str:
    return (
        f"  {name:34} p50 {figures['p50']:6.2f} ms   p99 {figures['p99']:6.2f} ms   "
        f"max {figures['max']:7.2f} ms   over {SLOW_MS:.0f} ms: {int(figures['slow'])} of {count}"
    )


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--prompts", type=int, default=1500)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--load-rate", type=float, default=80.0, help="the other token, req/s")
    parser.add_argument("--database-url", default="")
    parser.add_argument("--redis-url", default="", help="cache and task broker (REDIS_URL)")
    args = parser.parse_args()
    quota = {"SIGNET_THROTTLE_INGEST": "6000/min"}  # the default: the load stays inside it
    with running_service(
        database_url=args.database_url, redis_url=args.redis_url, extra_env=quota
    ) as service:
        other = subprocess.run(
            [sys.executable, "manage.py", "create_token", "--user", "other", "--scopes", "ingest"],
            cwd=PROJECT,
            env=service.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()[-1]
        run = {"prompts": args.prompts, "sessions": args.sessions}
        one_client(service.url, HOOK, service.token, prompts=100, sessions=8, prefix="warm")
        one_client(service.url, BARE, service.token, prompts=100, sessions=8, prefix="warm")
        bare = summary(one_client(service.url, BARE, service.token, **run, prefix="bare"))
        alone_each = one_client(service.url, HOOK, service.token, **run, prefix="agent")
        alone = summary(alone_each)
        with Load(service.url, other, rate=args.load_rate, sessions=args.sessions) as load:
            beside = summary(one_client(service.url, HOOK, service.token, **run, prefix="agent"))
    stores = ("PostgreSQL" if args.database_url else "SQLite") + (
        " + Redis" if args.redis_url else ""
    )
    print(f"latency bench: one client, {args.prompts} prompts round {args.sessions} sessions, "
          f"{stores}, `make run` with its scheduler")  # fmt: skip
    print(line("bare Django JSON view", bare, args.prompts))
    print(line("UserPromptSubmit, alone", alone, args.prompts))
    # Where the tail comes from (shown, not judged): a session's first prompt creates the
    # session and looks for a checkpoint to recover from; the others update it.
    first, later = alone_each[: args.sessions], alone_each[args.sessions :]
    if later:
        print(line("  of which each session's first", summary(first), len(first)))
        print(line("  of which the later prompts", summary(later), len(later)))
    print(line("UserPromptSubmit, beside the load", beside, args.prompts))
    print(f"  the load: {load.sent} prompts of another token in {load.seconds:.1f} s "
          f"({load.sent / load.seconds:.1f} req/s, {load.refused} refused)")  # fmt: skip
    print(f"  alone: p99 {alone['p99']:.2f} ms (goal < 10 ms: {verdict(alone['p99'] < 10)}); "
          f"max {alone['max']:.2f} ms (goal < 50 ms: {verdict(alone['max'] < 50)})")  # fmt: skip
    ratio = beside["p50"] / alone["p50"]
    print(f"  fairness: median beside the load / alone = {ratio:.2f} "
          f"(goal <= 2.00: {verdict(ratio <= 2)})")  # fmt: skip


if __name__ == "__main__":
    main()
