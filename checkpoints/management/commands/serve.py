"""``manage.py serve``: set up, then run the web server and the scheduler together.

This is what ``make run`` calls. It migrates, creates the cache table, collects static
files, switches an older SQLite file to incremental auto-vacuum (one ``VACUUM``, once),
registers the schedules (``setup_schedules``), makes sure the admin exists, then
starts the web server (granian) and the django-q2 cluster as two child processes in the
foreground. Ctrl-C (or SIGTERM) stops both; if either dies, the other is stopped too and
the command exits with an error. Before any of that it checks that the port is free.

Granian reads request headers in its Rust event loop and hands a request to one of a few
threads per process only once its headers are in: a client that sends half its headers and
waits holds a socket, not a worker, so it cannot stall ``/healthz`` or the hooks (as it did
with gunicorn's sync workers). A body is read on the thread, so a client that trickles one
holds that thread until it is done.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from checkpoints.management.commands.ensure_admin import admin_login_from_env, describe_login
from checkpoints.services.config import config_get
from checkpoints.services.retention import sqlite_prepare

STOP_GRACE_SECONDS = 15
READY_TIMEOUT_SECONDS = 60
# The path without its query string: a ``?token=`` or a search never reaches the log.
ACCESS_LOG_FORMAT = (
    '[%(time)s] %(addr)s "%(method)s %(path)s %(protocol)s" %(status)d %(dt_ms).1fms'
)


def default_workers() -> int:
    """One web process per core (at most 4) and one more: a process whose requests all wait
    on the database's write lock leaves its core to the others."""
    return min(os.cpu_count() or 1, 4) + 1


def default_threads() -> int:
    """Two request threads per process. A hook gives up the GIL at each database call and
    lock, and must win it back after: with five threads a hook cost about 50 futex calls
    (GIL hand-offs) in the web worker, with two about 17, for 9 in the bare view. Side by
    side on two cores (``bench/hook_path.py``'s load, six alternating runs each) 3 processes
    x 2 threads served UserPromptSubmit at about 1,445 and 1,355 req/s with 32 and 64
    sessions, against 1,330 and 1,290 for 2 x 5, the bare view alike. A database that hangs
    holds threads for its connect timeout; the hook client then queues, in order."""
    return 2


def port_check(host: str, port: int) -> None:
    """Raise CommandError, naming the port, when ``host:port`` cannot be listened on.

    Without it a second ``make run`` on a busy port found the first instance answering its
    readiness check and announced itself as running before its own server failed.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise CommandError(f"cannot listen on {host}:{port}: {exc}. Set HOST.") from exc
    with socket.socket(family, kind, proto) as sock:
        # As the server binds: a connection of a stopped instance in TIME_WAIT is no obstacle.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            reason = (
                "is already in use (another Signet Continuity, or another program)"
                if exc.errno == errno.EADDRINUSE
                else f"cannot be listened on ({exc.strerror})"
            )
            raise CommandError(
                f"port {port} on {host} {reason}. Stop that, or choose another port: "
                f"PORT={port + 1 if port < 65535 else 8001} make run"
            ) from exc


class Command(BaseCommand):
    help = "Migrate, ensure the admin, and run granian + the django-q2 cluster in the foreground."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument(
            "--workers",
            type=int,
            default=int(os.environ.get("WEB_CONCURRENCY", "0")),
            help="Web server processes (default: one per core, at most 4, plus one).",
        )
        parser.add_argument(
            "--threads",
            type=int,
            default=int(os.environ.get("WEB_THREADS", "0")),
            help="Request threads per web server process (default: 2).",
        )
        parser.add_argument("--no-scheduler", action="store_true", help="Web server only.")

    def handle(self, *args: Any, **options: Any) -> None:
        host, port = options["host"], options["port"]
        workers = options["workers"] or default_workers()
        port_check(host, port)
        self.stdout.write("Preparing the database and static files…")
        call_command("migrate", interactive=False, verbosity=0)
        call_command("createcachetable", verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        done = sqlite_prepare()
        if done:
            self.stdout.write(f"Database: {done}.")
        config_get()  # the settings row exists before the first request races to create it
        call_command("setup_schedules", stdout=self.stdout)
        login = admin_login_from_env()

        stopping = False

        def request_stop(signum: int, frame: FrameType | None) -> None:
            nonlocal stopping
            stopping = True

        # Before the children exist: a signal in between must not orphan them.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, request_stop)

        project_dir = Path(settings.BASE_DIR)
        children: dict[str, subprocess.Popen[bytes]] = {}
        code = 0
        try:
            children["web server"] = subprocess.Popen(  # noqa: S603 (fixed argv, no shell)
                [
                    sys.executable, "-m", "granian", "signet_site.wsgi:application",
                    "--interface", "wsgi",
                    "--http", "1",
                    "--no-ws",
                    "--host", host,
                    "--port", str(port),
                    "--workers", str(workers),
                    "--blocking-threads", str(options["threads"] or default_threads()),
                    # No --backpressure: it counts connections whose headers are still
                    # coming, so a few idle clients would hold /healthz off again.
                    "--respawn-failed-workers",
                    "--workers-kill-timeout", "10",
                    "--access-log",
                    "--access-log-fmt", ACCESS_LOG_FORMAT,
                ],
                cwd=project_dir,
                start_new_session=True,
            )  # fmt: skip
            if not options["no_scheduler"]:
                children["scheduler"] = subprocess.Popen(
                    [sys.executable, "manage.py", "qcluster"],
                    cwd=project_dir,
                    start_new_session=True,
                )
            display_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host  # noqa: S104
            base_url = f"http://{display_host}:{port}"
            if self._wait_ready(f"{base_url}/healthz", children.values(), lambda: stopping):
                self.stdout.write(
                    self.style.SUCCESS(f"\nSignet Continuity is running: {base_url}/\n")
                    + f"  dashboard: {base_url}/  (log in with the line below)\n"
                    + f"  admin:     {base_url}/admin/\n"
                    + f"  {describe_login(login)}\n"
                    + f"  health:    {base_url}/healthz\n"
                    + "  scheduler: "
                    + ("off" if options["no_scheduler"] else "django-q2 cluster running")
                    + "\nPress Ctrl-C to stop.\n"
                )
            while not stopping:
                exited = [name for name, child in children.items() if child.poll() is not None]
                if exited:
                    returncode = children[exited[0]].returncode
                    code = returncode or 1
                    self.stderr.write(f"The {exited[0]} exited (code {returncode}); stopping.")
                    break
                time.sleep(0.2)
        finally:
            self._stop(list(children.values()))
        if code:
            raise CommandError("a child process stopped; the service is down", returncode=code)
        self.stdout.write("Stopped.")

    def _wait_ready(
        self, url: str, children: Iterable[subprocess.Popen[bytes]], stop: Callable[[], bool]
    ) -> bool:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline and not stop():
            if any(child.poll() is not None for child in children):
                return False
            try:
                with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310
                    if response.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.3)
        return False

    def _stop(self, children: list[subprocess.Popen[bytes]]) -> None:
        # SIGTERM to each leader only: granian's main process and django-q2's sentinel stop their
        # own workers; signalling the whole group makes the sentinel wait on dead children.
        for child in children:
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for child in children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                child.wait()
