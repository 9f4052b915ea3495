"""What the browser tests share: the system's Chromium, whether it is usable, the skip.

Never downloads a browser: it uses ``SIGNET_CHROMIUM`` (default ``/usr/bin/chromium``, from
Debian's ``chromium`` package). Without it, or without Playwright, the browser tests skip and
say why; ``SIGNET_REQUIRE_BROWSER=1`` (set by ``.ci/run``) turns the skip into an error.
Screenshots go to ``SIGNET_SCREENSHOTS`` (default ``var/screenshots``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("SIGNET_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = Path(
    os.environ.get(
        "SIGNET_SCREENSHOTS", Path(__file__).resolve().parent.parent / "var" / "screenshots"
    )
)


def _browser_missing() -> str:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install -e '.[dev]')"
    if not shutil.which(CHROMIUM):
        return f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)"
    return ""


MISSING = _browser_missing()
if MISSING and os.environ.get("SIGNET_REQUIRE_BROWSER") == "1":
    raise RuntimeError(f"SIGNET_REQUIRE_BROWSER=1 but {MISSING}")

# For a browser test module's ``pytestmark``.
requires_browser = pytest.mark.skipif(bool(MISSING), reason=f"browser tests skipped: {MISSING}")
