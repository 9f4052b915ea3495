"""A ``redis-server`` of a test's own (``redis_server`` in ``conftest.py``)."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from bench.service import free_port


class RedisServer:
    """A ``redis-server`` of the test's own, on a fixed port, stopped and started at will."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.binary, self.directory, self.port = binary, directory, free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        options = ["--port", str(self.port), "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            [self.binary, *options, "--dir", str(self.directory)], stdout=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as probe:
                    probe.sendall(b"PING\r\n")
                    if probe.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None
