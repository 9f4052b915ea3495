"""The real Claude Code CLI, installed from npm at a pinned version, driven against the real
service and a stand-in for the model API (``tests/model_api.py``).

The CLI is installed once into a cache outside the checkout (``SIGNET_CLI_CACHE``, default
``~/.cache/signet-tests``). Without npm, or when the install fails, the tests that need it
skip, unless ``SIGNET_REQUIRE_CLIS=1`` (CI) makes that a failure.

Each test gets a temporary HOME (Claude Code's settings, transcripts and task files live
there), a project folder that is a git repository on a branch, and the hooks installed as
the README says: ``manage.py install_hooks claude-code --url …``.

Its fixtures (``claude``, ``claude_code_cli``, ``hook_service``, ``model_api``) are a pytest
plugin of the suite (``conftest.py``), for every test file that drives the CLI.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest
from django.db import connections

from checkpoints.services.tokens import token_create
from tests.factories import UserFactory
from tests.model_api import ModelAPI
from tests.processes import PROJECT_DIR
from tests.test_hook_client_e2e import Service, free_port

# The one place that names the version the suite drives.
CLAUDE_CODE_VERSION = "2.1.197"
PACKAGE = "@anthropic-ai/claude-code"


def cli_cache() -> Path:
    """Where the pinned CLIs are installed, outside the checkout."""
    return Path(os.environ.get("SIGNET_CLI_CACHE") or "~/.cache/signet-tests").expanduser()


def _missing(reason: str) -> NoReturn:
    if os.environ.get("SIGNET_REQUIRE_CLIS") == "1":
        pytest.fail(f"the real CLI is required here (SIGNET_REQUIRE_CLIS=1): {reason}")
    pytest.skip(reason)


def npm_install(package: str, version: str, *, binary: str) -> Path:
    """``package@version`` installed into its own folder of the cache (once: a lock keeps two
    test processes from installing it together); the path of its ``binary``."""
    prefix = cli_cache() / f"{package.replace('/', '+')}@{version}"
    executable = prefix / "node_modules" / ".bin" / binary
    if executable.exists():
        return executable
    npm = shutil.which("npm")
    if npm is None:
        _missing("npm is not installed")
        raise AssertionError  # not reached: _missing skips or fails
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix.parent / f".{prefix.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not executable.exists():
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                 f"{package}@{version}"],
                capture_output=True, text=True, timeout=600, check=False,
            )  # fmt: skip
            if done.returncode != 0 or not executable.exists():
                _missing(f"npm could not install {package}@{version}: {done.stderr[-500:]}")
    return executable


@dataclass
class Run:
    """One ``claude -p`` run: its exit code, its stream-json messages, its wall time."""

    returncode: int
    messages: list[dict[str, Any]]
    stderr: str
    seconds: float

    @property
    def session_id(self) -> str:
        for message in self.messages:
            if message.get("session_id"):
                return str(message["session_id"])
        raise AssertionError(f"no session id in the CLI's output: {self.stderr[-2000:]}")

    @property
    def result(self) -> dict[str, Any]:
        return next(m for m in reversed(self.messages) if m.get("type") == "result")


@dataclass
class ClaudeCode:
    """The CLI in a temporary HOME, for one test; ``run`` is ``claude -p``."""

    executable: Path
    home: Path
    project: Path
    model: ModelAPI
    env: dict[str, str] = field(default_factory=dict)

    @property
    def settings_file(self) -> Path:
        return self.home / ".claude" / "settings.json"

    def base_env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TZ", "TMPDIR")}
        return {
            **keep,
            "HOME": str(self.home),
            "ANTHROPIC_BASE_URL": self.model.url,
            "ANTHROPIC_API_KEY": "sk-ant-api03-standin-not-a-key",
            "DISABLE_TELEMETRY": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "IS_SANDBOX": "1",  # root may then skip permissions
            **self.env,
        }

    def run(self, prompt: str, *args: str, timeout: float = 120.0) -> Run:
        """``claude -p PROMPT [args…]`` in the project; waits for it to end."""
        command = [
            str(self.executable), "-p", prompt, "--output-format", "stream-json", "--verbose",
            "--dangerously-skip-permissions", *args,
        ]  # fmt: skip
        started = time.monotonic()
        done = subprocess.run(
            command, cwd=self.project, env=self.base_env(), capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip
        seconds = time.monotonic() - started
        messages = []
        for line in done.stdout.splitlines():
            if line.startswith("{"):
                messages.append(json.loads(line))
        return Run(done.returncode, messages, done.stderr, seconds)

    def install_hooks(self, url: str, *extra: str, env: dict[str, str] | None = None) -> str:
        """``manage.py install_hooks claude-code --url URL`` as the README gives it, in this
        HOME (and ``env``); its output."""
        done = subprocess.run(
            [sys.executable, "manage.py", "install_hooks", "claude-code", "--url", url, *extra],
            cwd=PROJECT_DIR, env={**os.environ, "HOME": str(self.home), **(env or {})},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def transcript(self, session_id: str) -> Path:
        """The session's transcript file, where Claude Code keeps it."""
        found = list((self.home / ".claude" / "projects").glob(f"*/{session_id}.jsonl"))
        assert found, f"no transcript for {session_id}"
        return found[0]


def git_project(path: Path, *, branch: str = "feat/vat-breakdown") -> Path:
    """A git repository with one commit, on ``branch``."""
    path.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    for args in (["init", "-q", "-b", branch], ["commit", "-q", "--allow-empty", "-m", "start"]):
        subprocess.run(["git", *args], cwd=path, env=env, check=True, capture_output=True)
    (path / "README.md").write_text("# invoices\n")
    return path


@pytest.fixture(scope="session")
def claude_code_cli() -> Path:
    """The pinned CLI's executable, installed once per run."""
    return npm_install(PACKAGE, CLAUDE_CODE_VERSION, binary="claude")


@pytest.fixture
def hook_service(transactional_db: Any) -> Iterator[Service]:
    """The real service (WSGI, threads) on a free loopback port, on the test database."""
    service = Service(free_port())
    service.start()
    yield service
    service.stop()
    connections.close_all()


@pytest.fixture
def model_api() -> Iterator[ModelAPI]:
    """The stand-in model API, recording every request."""
    api = ModelAPI().start()
    yield api
    api.stop()


@pytest.fixture
def claude(
    claude_code_cli: Path, hook_service: Service, model_api: ModelAPI, tmp_path: Path
) -> ClaudeCode:
    """Claude Code in a fresh HOME with the hooks installed for alice's token."""
    owner: Any = UserFactory(username="alice")
    _, token = token_create(owner=owner, name="laptop", scopes=["ingest", "read", "write"])
    cli = ClaudeCode(
        executable=claude_code_cli,
        home=tmp_path / "home",
        project=git_project(tmp_path / "invoices"),
        model=model_api,
        env={"SIGNET_TOKEN": token, "SIGNET_OUTBOX": str(tmp_path / "outbox.jsonl")},
    )
    cli.home.mkdir()
    cli.install_hooks(hook_service.url)
    return cli


class HungServer:
    """A loopback socket that accepts connections and never answers them (a server whose
    workers hang), on ``port`` (0: a free one) until ``stop()`` or ``lifetime`` seconds;
    ``accepted`` counts the connections made to it, ``hook_requests`` those that asked for a
    hook route (not, say, Claude Code's MCP client)."""

    def __init__(self, port: int = 0, *, lifetime: float = 300.0) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.held: list[socket.socket] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()
        self._timer = threading.Timer(lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()

    @property
    def accepted(self) -> int:
        with self._lock:
            return len(self.held)

    @property
    def hook_requests(self) -> int:
        with self._lock:
            return sum(path.startswith("/api/hooks/") for path in self.paths)

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.listener.accept()
                with self._lock:
                    self.held.append(conn)
                threading.Thread(target=self._read_path, args=(conn,), daemon=True).start()

    def _read_path(self, conn: socket.socket) -> None:
        """Read the request line (and never answer)."""
        head = b""
        with contextlib.suppress(OSError):
            conn.settimeout(10)
            while b"\r\n" not in head and len(head) < 8192:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                head += chunk
        parts = head.split(b" ", 2)
        with self._lock:
            self.paths.append(parts[1].decode("latin-1") if len(parts) > 2 else "")

    def stop(self) -> None:
        self._timer.cancel()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() under way
        self.listener.close()
        with self._lock:
            for conn in self.held:
                conn.close()
        if self._thread is not threading.current_thread():
            self._thread.join(5)
