"""Exact counts across processes: several web server processes, as ``make run`` starts them,
on SQLite (the file lock and IMMEDIATE transactions) — not just threads in one process.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests import processes
from tests.hookutil import FIXTURES
from tests.test_serve import free_port, service_env

PROJECT_DIR = Path(__file__).resolve().parent.parent
THREADS = 8
PROMPTS = 30


@pytest.mark.slow
def test_several_workers_count_every_prompt_and_checkpoint_exactly(tmp_path):
    port = free_port()
    env = service_env(
        tmp_path,
        port,
        WEB_CONCURRENCY="4",
        SIGNET_DEBOUNCE_SECONDS="0",
        SIGNET_PROMPT_INTERVAL="10",
        LOG_LEVEL="WARNING",
    )

    def manage(*args: str) -> str:
        return processes.manage(env, *args)

    manage("migrate", "--noinput", "-v0")
    token = manage("create_token", "--user", "alice", "--scopes", "ingest").strip().splitlines()[-1]
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--no-scheduler"],
        cwd=PROJECT_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/api/hooks/claude-code/"
    body = json.loads((FIXTURES / "user_prompt_submit.json").read_text())
    failures: list[str] = []

    def post(payload: dict[str, str]) -> None:
        request = urllib.request.Request(
            url,
            data=json.dumps(payload).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            if response.status != 200:
                failures.append(str(response.status))

    def work(index: int) -> None:
        try:
            for number in range(PROMPTS):
                post({**body, "session_id": "shared", "prompt": f"t{index} p{number}"})
        except Exception as exc:
            failures.append(repr(exc))

    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except OSError:
                time.sleep(0.3)
        threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=180)
        # A new start of the session writes the last pending checkpoint.
        post({**body, "hook_event_name": "SessionStart", "session_id": "shared"})
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
    log.close()
    assert not failures, (failures[:3], (tmp_path / "serve.log").read_text()[-4000:])
    counts = manage(
        "shell",
        "-c",
        "import json; from checkpoints.models import Session, Checkpoint; "
        "s = Session.objects.get(session_key='shared'); "
        "print(json.dumps([s.prompt_count, sorted(Checkpoint.objects.filter(session=s)"
        ".values_list('prompt_count', flat=True))]))",
    )
    prompt_count, checkpoints = json.loads(counts.strip().splitlines()[-1])
    assert prompt_count == THREADS * PROMPTS
    assert checkpoints == list(range(10, THREADS * PROMPTS + 1, 10))
