"""``manage.py`` as a process of its own, for the tests that start real services."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent


def manage(env: dict[str, str], *args: str, timeout: float = 240.0) -> str:
    """Run ``manage.py *args`` with ``env``; its standard output. A failure fails the test
    with the command's output."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout
