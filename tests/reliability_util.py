"""Helpers for ``tests/test_reliability.py``: a real ``manage.py serve`` on a private data
folder (SQLite, or a throw-away PostgreSQL database), its process tree read from ``/proc``,
a raw HTTP client, the hook client as a subprocess, and a loopback TCP proxy that can "stop
the database" by cutting every connection to it.

Everything listens on 127.0.0.1 only, on free ports.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.service import free_port
from tests.processes import manage

PROJECT_DIR = Path(__file__).resolve().parent.parent
HOOK_SCRIPT = PROJECT_DIR / "hooks" / "signet_hook.py"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "claude_code"
HOOK_PATH = "/api/hooks/claude-code/"
READY_SECONDS = 150.0
STOP_SECONDS = 40.0


# --- databases --------------------------------------------------------------------------


def postgres_url_from_env() -> str | None:
    """``DATABASE_URL`` when it names PostgreSQL, else None."""
    url = os.environ.get("DATABASE_URL", "")
    scheme = urllib.parse.urlsplit(url).scheme
    return url if scheme in {"postgres", "postgresql", "pgsql", "postgis"} else None


def url_with(url: str, *, database: str | None = None, port: int | None = None) -> str:
    """``url`` with its database name and/or port (host 127.0.0.1) replaced."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if port is not None:
        auth, _, _ = netloc.rpartition("@")
        netloc = f"{auth}@127.0.0.1:{port}" if auth else f"127.0.0.1:{port}"
    path = f"/{database}" if database is not None else parts.path
    return urllib.parse.urlunsplit((parts.scheme, netloc, path, parts.query, parts.fragment))


def _pg_admin(url: str, statement: str) -> None:
    import psycopg

    parts = urllib.parse.urlsplit(url)
    with psycopg.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5432,
        user=urllib.parse.unquote(parts.username or "postgres"),
        password=urllib.parse.unquote(parts.password) if parts.password else None,
        dbname="postgres",
        autocommit=True,
        connect_timeout=10,
    ) as conn:
        conn.execute(statement.encode())


@contextlib.contextmanager
def throwaway_postgres(base_url: str, label: str = "rel") -> Iterator[str]:
    """A new, empty database beside ``base_url``'s (``rel_<pid>_<time>``), dropped after."""
    name = f"{label}_{os.getpid()}_{time.time_ns() // 1000}"
    _pg_admin(base_url, f'CREATE DATABASE "{name}"')
    try:
        yield url_with(base_url, database=name)
    finally:
        _pg_admin(base_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- processes --------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name sits in parentheses and may hold spaces: split after it.
    return raw.rpartition(")")[2].split()


def proc_start_time(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[19] if fields else None  # field 22 of stat, counted after the name


def proc_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def proc_children(pid: int) -> list[int]:
    """The direct children of ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields and fields[1] == str(pid):
                found.append(int(entry))
    return sorted(found)


def proc_descendants(pid: int) -> list[int]:
    """Every process below ``pid``, breadth first."""
    out: list[int] = []
    todo = [pid]
    while todo:
        children = proc_children(todo.pop(0))
        out.extend(children)
        todo.extend(children)
    return out


def rss_bytes(pids: list[int]) -> int:
    """The summed resident set size of ``pids`` (the ones gone count 0)."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


def kill_remembered(processes: list[tuple[int, str | None]]) -> None:
    """SIGKILL each (pid, start time) still alive as the same process (no reused pid)."""
    for pid, started in processes:
        if started is not None and proc_start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


# --- HTTP -------------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    body: bytes
    seconds: float

    def json(self) -> Any:
        return json.loads(self.body)


def http_request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    *,
    timeout: float = 30,
) -> Reply:
    """One request over a fresh connection; OSError when no whole answer comes back (a
    server killed mid-answer leaves its status line or body cut short)."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        return Reply(response.status, data, time.monotonic() - started)
    except http.client.HTTPException as exc:  # IncompleteRead, BadStatusLine: not OSErrors
        raise ConnectionError(f"the answer was cut short: {exc!r}") from exc
    finally:
        conn.close()


@functools.cache
def _fixture_text(name: str) -> str:
    return (FIXTURES / f"{name}.json").read_text()


def fixture(name: str, **overrides: Any) -> dict[str, Any]:
    """A Claude Code fixture payload with fields replaced."""
    body: dict[str, Any] = json.loads(_fixture_text(name))
    body.update(overrides)
    return body


def prompt_body(session: str, prompt: str) -> bytes:
    return json.dumps(fixture("user_prompt_submit", session_id=session, prompt=prompt)).encode()


def auth_headers(token: str, key: str = "") -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    return headers


def is_error_json(body: bytes) -> bool:
    """Whether ``body`` is the API's error shape ``{"error": ..., "detail": ...}``."""
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and "error" in data and "detail" in data


# --- the hook client ----------------------------------------------------------------------


@dataclass
class HookRun:
    returncode: int
    stdout: bytes
    stderr: bytes
    seconds: float


def run_hook(url: str, token: str, outbox: Path, body: dict[str, Any], timeout: float) -> HookRun:
    """``hooks/signet_hook.py`` as Claude Code runs it: the payload on stdin."""
    env = {**os.environ, "SIGNET_TOKEN": token}
    env.pop("SIGNET_HOOK_TIMEOUT", None)
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable, str(HOOK_SCRIPT), "--url", url, "--outbox", str(outbox),
            "--timeout", str(timeout), "claude-code",
        ],
        input=json.dumps(body).encode(),
        env=env,
        capture_output=True,
        timeout=timeout + 30,
        check=False,
    )  # fmt: skip
    return HookRun(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def outbox_entries(outbox: Path) -> list[dict[str, Any]]:
    if not outbox.exists():
        return []
    return [json.loads(line) for line in outbox.read_text().splitlines() if line.strip()]


# --- the service --------------------------------------------------------------------------


@dataclass
class Service:
    """``manage.py serve`` on its own data folder and port; start, crash, restart, stop."""

    data_dir: Path
    database_url: str = ""
    workers: int = 2
    extra_env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    token: str = ""
    proc: subprocess.Popen[bytes] | None = None
    _seen: list[tuple[int, str | None]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "serve.log"

    @property
    def env(self) -> dict[str, str]:
        dropped = {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"}
        env = {key: value for key, value in os.environ.items() if key not in dropped}
        env.update(
            SIGNET_DATA_DIR=str(self.data_dir),
            PORT=str(self.port),
            WEB_CONCURRENCY=str(self.workers),
            LOG_LEVEL="WARNING",
            PYTHONUNBUFFERED="1",
            SIGNET_THROTTLE_INGEST="10000000/min",
            SIGNET_ADMIN_PASSWORD="reliability-admin-password-0",
        )
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        env.update(self.extra_env)
        return env

    def manage(self, *args: str, timeout: float = 240) -> str:
        return manage(self.env, *args, timeout=timeout)

    def query(self, code: str) -> Any:
        """Run ``code`` in ``manage.py shell``; it prints one JSON document last."""
        out = self.manage("shell", "-c", code)
        return json.loads(out.strip().splitlines()[-1])

    def prepare(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.manage("migrate", "--noinput", "-v0")
        made = self.manage("create_token", "--user", "agent", "--scopes", "ingest,read")
        self.token = made.strip().splitlines()[-1]

    def start(self, *, scheduler: bool = False) -> None:
        args = [sys.executable, "manage.py", "serve"] + ([] if scheduler else ["--no-scheduler"])
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                args,
                cwd=PROJECT_DIR,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait_ready()
        self.remember_processes()

    def wait_ready(self, timeout: float = READY_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"serve exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                if http_request(self.port, "GET", "/healthz", timeout=5).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"serve not ready in {timeout} s:\n{self.log_tail()}")

    def remember_processes(self) -> None:
        """Note every process of the tree now, so that ``stop`` can reap strays later."""
        if self.proc is None:
            return
        for pid in [self.proc.pid, *proc_descendants(self.proc.pid)]:
            entry = (pid, proc_start_time(pid))
            if entry not in self._seen:
                self._seen.append(entry)

    def children(self) -> dict[str, int]:
        """serve's direct children by role: ``web`` (granian) and ``scheduler`` (qcluster)."""
        assert self.proc is not None
        roles = {}
        for pid in proc_children(self.proc.pid):
            line = proc_cmdline(pid)
            if "granian" in line:
                roles["web"] = pid
            elif "qcluster" in line:
                roles["scheduler"] = pid
        return roles

    def web_workers(self) -> list[int]:
        """granian's worker processes (the children of its main process)."""
        web = self.children().get("web")
        return proc_children(web) if web else []

    def web_pids(self) -> list[int]:
        web = self.children().get("web")
        return [web, *proc_descendants(web)] if web else []

    def stop(self) -> int | None:
        """Ctrl-C, as a user stops it; anything left of the tree is killed. serve's exit code."""
        code = None
        if self.proc is not None:
            self.remember_processes()
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)
            try:
                code = self.proc.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                code = self.proc.wait(timeout=10)
            self.proc = None
        kill_remembered(self._seen)
        self._seen.clear()
        return code

    def log_tail(self, size: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""


# --- a loopback TCP proxy in front of PostgreSQL -------------------------------------------


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target``. ``down()`` cuts every connection and
    resets new ones as they come; ``hang()`` cuts them and accepts new ones that never get
    an answer; ``up()`` forwards again. The port stays bound throughout: giving it up
    between ``down()`` and ``up()`` would let another program take it."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self._held: list[socket.socket] = []
        self.hanging = False
        self.refusing = False
        self.connections = 0

    def up(self) -> None:
        """Forward again (after ``down`` or ``hang``)."""
        with self._lock:
            self.hanging = False
            self.refusing = False
            held, self._held = self._held, []
        for sock in held:
            sock.close()
        if self._listener is not None:
            return
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self._listener = listener
        self._accepting = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._accepting.start()

    def hang(self) -> int:
        """A database that stops answering: cut every open connection, then accept new ones
        and never forward a byte (a partition, a hung host). How many were cut."""
        with self._lock:
            self.hanging = True
        return self._cut()

    def down(self) -> int:
        """A database that is gone: cut every open connection, and reset each new one at
        once; how many were cut."""
        with self._lock:
            self.hanging = False
            self.refusing = True
            held, self._held = self._held, []
        for sock in held:
            sock.close()
        return self._cut()

    def _cut(self) -> int:
        with self._lock:
            doomed = list(self._sockets)
            self._sockets.clear()
        for sock in doomed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        return len(doomed) // 2

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by down()
            with self._lock:
                if self.refusing:  # a reset, as from a host with nothing listening
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    client.close()
                    continue
                if self.hanging:
                    self._held.append(client)
                    continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._sockets.update((client, upstream))
                self.connections += 1
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            with self._lock:
                self._sockets.discard(source)
                self._sockets.discard(sink)
