"""The hook clients: each command hook vs a bare curl POST, and the http hook round trip.

Each command hook (SessionStart, PreCompact, Stop) runs ``hooks/signet_hook.py`` by the exact
command ``manage.py install_hooks`` writes into Claude Code's settings, through ``sh -c`` as
Claude Code runs commands, interleaved with a bare ``curl`` POST of the same payload to the
same URL: median wall time per call and the ratio judged (goal: <= 1.5x curl). PreCompact
and Stop read the tail of a 5 MB transcript of a long session (the facts, the context
usage). Then the http hook's round trip (Claude Code posting UserPromptSubmit itself, a
fresh connection each time) against a POST to the bare Django view of the same server:
median and p99 (goal: p99 under 25 ms).

    .venv/bin/python bench/hook_client.py [--calls 40] [--database-url URL] [--redis-url URL]

Starts a service of its own as ``make run`` does; with ``SIGNET_URL`` and ``SIGNET_TOKEN``
set (a token with the ingest scope) it uses that running service instead, and skips the
bare-view baseline, which only the bench's own service has.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from bench.service import post_json, running_service  # noqa: E402
from hooks.install import (  # noqa: E402
    HOOK_SCRIPT,
    claude_code_entries,
    default_interpreter,
    precompile_hook,
)

FIXTURES = PROJECT / "tests/fixtures/claude_code"
HOOK = "/api/hooks/claude-code/"
BARE = "/bench/bare/"
GOAL_RATIO = 1.5
GOAL_P99_MS = 25.0
TRANSCRIPT_BYTES = 5_000_000


def dumps(value: object) -> str:
    """As Claude Code writes its transcript lines: compact."""
    return json.dumps(value, separators=(",", ":"))


def transcript(path: Path) -> None:
    """A 5 MB transcript of a long session: prompts, split responses, edits, tool results."""
    lines: list[str] = []
    size = number = 0
    while size < TRANSCRIPT_BYTES:
        number += 1
        usage = {
            "input_tokens": 3,
            "cache_read_input_tokens": 1000 * number,
            "cache_creation_input_tokens": 200,
            "output_tokens": 90,
        }
        prompt = {"role": "user", "content": f"step {number}: carry on with the change"}
        edit = {
            "file_path": f"/src/m{number % 40}.py",
            "old_string": "a" * 800,
            "new_string": "b" * 900,
        }
        blocks = (
            {"type": "text", "text": "Editing the file. " * 20},
            {"type": "tool_use", "id": f"t{number}", "name": "Edit", "input": edit},
        )
        result = {"type": "tool_result", "tool_use_id": f"t{number}", "content": "ok"}
        new = [dumps({"type": "user", "isSidechain": False, "message": prompt})]
        new += [
            dumps(
                {
                    "type": "assistant",
                    "isSidechain": False,
                    "requestId": f"req_{number}",
                    "message": {
                        "model": "claude-sonnet-4-6",
                        "id": f"msg_{number}",
                        "content": [block],
                        "usage": usage,
                    },
                }
            )
            for block in blocks
        ]
        new.append(
            dumps(
                {
                    "type": "user",
                    "isSidechain": False,
                    "message": {"role": "user", "content": [result]},
                    "toolUseResult": {
                        "filePath": f"/src/m{number % 40}.py",
                        "originalFile": "x" * 3000,
                    },
                }
            )
        )
        lines += new
        size += sum(len(line) + 1 for line in new)
    path.write_text("\n".join(lines) + "\n")


def payload(folder: Path, fixture: str, transcript_path: Path | None = None) -> Path:
    """The fixture's payload in a file, pointing at ``transcript_path`` if given."""
    body = json.loads((FIXTURES / fixture).read_text())
    if transcript_path is not None:
        body["transcript_path"] = str(transcript_path)
    path = folder / fixture
    path.write_text(json.dumps(body))
    return path


def hook_commands(url: str) -> dict[str, str]:
    """The command of each command hook, exactly as ``install_hooks`` writes it."""
    precompile_hook()
    entries = claude_code_entries(
        url=url,
        token_env="SIGNET_TOKEN",  # noqa: S106 (the name of a variable, not a secret)
        hook_script=HOOK_SCRIPT,
        interpreter=default_interpreter(),
    )
    return {
        event: str(handler["command"])
        for event, _, handler in entries
        if handler["type"] == "command"
    }


def wall_ms(command: str, stdin: Path, env: dict[str, str]) -> float:
    """One run of ``sh -c command`` with ``stdin`` as its input, in ms; it must succeed."""
    with stdin.open("rb") as source:
        began = time.perf_counter()
        subprocess.run(
            ["sh", "-c", command], stdin=source, stdout=subprocess.DEVNULL, env=env, check=True
        )
        return (time.perf_counter() - began) * 1000


def compare(title: str, hook: str, curl: str, stdin: Path, env: dict[str, str], calls: int) -> None:
    wall_ms(hook, stdin, env)  # warm up
    wall_ms(curl, stdin, env)
    hook_times: list[float] = []
    curl_times: list[float] = []
    for _ in range(calls):  # interleaved, so both see the same machine
        hook_times.append(wall_ms(hook, stdin, env))
        curl_times.append(wall_ms(curl, stdin, env))
    hook_ms, curl_ms = statistics.median(hook_times), statistics.median(curl_times)
    ratio = hook_ms / curl_ms
    print(f"{title} command hook vs bare curl POST, {calls} calls each (median wall per call)")
    print(f"  bare curl POST        {curl_ms:7.1f} ms")
    print(f"  signet_hook.py hook   {hook_ms:7.1f} ms")
    print(
        f"  ratio hook/curl: {ratio:.2f} (goal <= {GOAL_RATIO:.2f}: {verdict(ratio <= GOAL_RATIO)})"
    )


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def round_trips(url: str, path: str, token: str, calls: int) -> list[float]:
    """``calls`` UserPromptSubmit POSTs to ``path``, one after another, in ms."""
    parsed = urllib.parse.urlsplit(url)
    body = json.loads((FIXTURES / "user_prompt_submit.json").read_text())
    times: list[float] = []
    for number in range(calls):
        text = json.dumps({**body, "session_id": "http-hook", "prompt": f"step {number}"})
        began = time.perf_counter()
        status = post_json(
            host=parsed.hostname or "127.0.0.1",
            port=parsed.port,
            path=path,
            token=token,
            body=text,
        )
        times.append((time.perf_counter() - began) * 1000)
        if status != 200:
            raise SystemExit(f"POST {path} answered {status}")
    return times


def p99(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[max(0, int(len(ordered) * 0.99) - 1)]


@contextmanager
def service(args: argparse.Namespace) -> Iterator[tuple[str, str, bool]]:
    """(url, token, whether the bare view is there): the given service, or one of our own."""
    url, token = os.environ.get("SIGNET_URL", ""), os.environ.get("SIGNET_TOKEN", "")
    if url and token:
        yield url.rstrip("/"), token, False
        return
    with running_service(database_url=args.database_url, redis_url=args.redis_url) as running:
        yield running.url, running.token, True


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=40, help="timed calls of each")
    parser.add_argument("--database-url", default="")
    parser.add_argument("--redis-url", default="", help="cache and task broker (REDIS_URL)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="signet-hook-client-") as folder_name:
        folder = Path(folder_name)
        transcript(folder / "transcript.jsonl")
        payloads = {
            "SessionStart": payload(folder, "session_start_startup.json"),
            "PreCompact": payload(folder, "pre_compact_auto.json", folder / "transcript.jsonl"),
            "Stop": payload(folder, "stop.json", folder / "transcript.jsonl"),
        }
        with service(args) as (url, token, has_bare):
            env = {**os.environ, "SIGNET_TOKEN": token, "SIGNET_OUTBOX": str(folder / "outbox")}
            commands = hook_commands(url)
            curl = (
                'curl -fsS -m 5 -X POST -H "Authorization: Bearer $SIGNET_TOKEN" '
                f"-H 'Content-Type: application/json' --data-binary @- {url}{HOOK}"
            )
            titles = {
                "SessionStart": "SessionStart",
                "PreCompact": "PreCompact (facts from a 5 MB transcript)",
                "Stop": "Stop (usage from a 5 MB transcript)",
            }
            for event, title in titles.items():
                compare(title, commands[event], curl, payloads[event], env, args.calls)
            calls = max(args.calls * 5, 100)
            hook = round_trips(url, HOOK, token, calls)
            bare = round_trips(url, BARE, token, calls) if has_bare else []
    print(f"http hook round trip (UserPromptSubmit, a fresh connection each), {calls} calls")
    if bare:
        print(
            f"  bare Django JSON view  median {statistics.median(bare):6.1f} ms  "
            f"p99 {p99(bare):6.1f} ms"
        )
    print(f"  UserPromptSubmit hook  median {statistics.median(hook):6.1f} ms  "
          f"p99 {p99(hook):6.1f} ms")  # fmt: skip
    if bare:
        print(
            f"  ratio hook/bare (median): {statistics.median(hook) / statistics.median(bare):.2f}"
        )
    met = p99(hook) < GOAL_P99_MS
    print(f"  hook p99 {p99(hook):.1f} ms (goal < {GOAL_P99_MS:.0f} ms: {verdict(met)})")


if __name__ == "__main__":
    main()
