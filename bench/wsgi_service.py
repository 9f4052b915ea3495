"""The service in this process: the WSGI application ``make run`` serves, on a loopback port,
one thread per request, for a bench that drives it with real hook processes.

``django_start`` sets Django up on a fresh SQLite file of its own (migrated), as a run of
the service on a new data folder would; a test that has its database already (pytest-django)
skips it and starts ``Service`` alone. ``owner_token`` makes a user and an ingest token.
"""

from __future__ import annotations

import os
import socket
import threading
from importlib import import_module
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Service:
    """The service's WSGI application (``signet_site.handlers.SignetApplication``, the hook
    posts' short middleware list included) on a free loopback port until ``stop()``."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: _ThreadingServer | None = None

    def start(self) -> Service:
        from django.conf import settings

        from signet_site.handlers import SignetApplication

        # As signet_site/wsgi.py does: the URLconf imported before the first request, which
        # a hook waits on for less than a second before taking the server for hung.
        import_module(settings.ROOT_URLCONF)
        self._server = make_server(
            "127.0.0.1",
            self.port,
            SignetApplication(),
            server_class=_ThreadingServer,
            handler_class=_QuietHandler,
        )
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        from django.db import connections

        connections.close_all()


def django_start(data_dir: str) -> None:
    """Django set up on a new SQLite database under ``data_dir``, migrated (and the cache's
    table made); the throttle
    raised out of the way (a replay posts faster than a person types)."""
    os.environ["SIGNET_DATA_DIR"] = data_dir
    os.environ["DJANGO_SETTINGS_MODULE"] = "signet_site.settings"
    os.environ.setdefault("SIGNET_THROTTLE_INGEST", "1000000/min")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    for name in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(name, None)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)
    call_command("createcachetable", verbosity=0)  # as ``manage.py serve`` does


def owner_token(username: str) -> str:
    """A new user ``username`` and a raw token of theirs with the ingest scope."""
    from django.contrib.auth import get_user_model

    from checkpoints.services.tokens import token_create

    owner = get_user_model().objects.create_user(username=username)
    _, raw = token_create(owner=owner, name="replay", scopes=["ingest"])
    return raw
