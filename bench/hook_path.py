"""UserPromptSubmit through the real hook path vs a bare Django JSON view, same server.

Starts the service as ``make run`` does (granian + django-q2, SQLite by default, or
``--database-url`` for PostgreSQL), then drives 64 concurrent sessions, each sending
prompts back to back, first at ``/bench/bare/`` and then at ``/api/hooks/claude-code/``.
Prints requests/s and p50/p99 for both and the ratio the hook path is judged by
(goal: >= 0.5 of the bare view's throughput, p99 under 25 ms).

    .venv/bin/python bench/hook_path.py [--sessions 64] [--requests 40] [--database-url URL]
                                        [--workers N] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.service import post_json, running_service

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--requests", type=int, default=40, help="per session")
    parser.add_argument("--database-url", default="")
    parser.add_argument(
        "--workers", type=int, default=0, help="web server processes (default: serve's)"
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="threads per web process (default: serve's)"
    )
    args = parser.parse_args()
    with running_service(
        database_url=args.database_url, workers=args.workers, threads=args.threads
    ) as service:
        drive(service.url, "/bench/bare/", service.token, 8, 5)  # warm every worker
        drive(service.url, "/api/hooks/claude-code/", service.token, 8, 5)
        bare = drive(service.url, "/bench/bare/", service.token, args.sessions, args.requests)
        hook = drive(
            service.url, "/api/hooks/claude-code/", service.token, args.sessions, args.requests
        )
    database = "PostgreSQL" if args.database_url else "SQLite"
    print(f"hook path bench: {args.sessions} concurrent sessions x {args.requests} prompts, "
          f"{database}, the web server as `make run` starts it")  # fmt: skip
    for name, figures in (("bare Django JSON view", bare), ("UserPromptSubmit hook", hook)):
        print(
            f"  {name:24} {figures['rps']:8.1f} req/s   p50 {figures['p50_ms']:6.1f} ms   "
            f"p99 {figures['p99_ms']:6.1f} ms   ({int(figures['failures'])} failed "
            f"of {int(figures['requests'])})"
        )
    ratio = hook["rps"] / bare["rps"]
    print(f"  throughput ratio hook/bare: {ratio:.2f} (goal >= 0.50: "
          f"{'met' if ratio >= 0.5 else 'NOT met'}); hook p99 {hook['p99_ms']:.1f} ms "
          f"(goal < 25 ms: {'met' if hook['p99_ms'] < 25 else 'NOT met'})")  # fmt: skip


if __name__ == "__main__":
    main()
