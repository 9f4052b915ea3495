"""Settings for the test suite: the real settings, with a fast hasher and synchronous tasks."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# A fixed key keeps the suite from writing into the developer's data folder.
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-" + "x7Yq3Lm9Pz2Rt8Vw" * 4)

from signet_site.settings import *  # noqa: F403
from signet_site.settings import Q_CLUSTER

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
Q_CLUSTER["sync"] = True
STORAGES["staticfiles"] = {  # noqa: F405
    "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
}

# Concurrency tests need a database file: SQLite's shared in-memory database answers
# "table is locked" to concurrent writers instead of waiting for the lock.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": str(Path(tempfile.gettempdir()) / f"signet-test-{os.getpid()}.sqlite3")
    }

# Pending checkpoints are written as soon as they are marked, unless a test sets a debounce;
# each mark queues its own flush (run in place), unless a test sets a batch.
SIGNET_CONFIG_DEFAULTS = {**SIGNET_CONFIG_DEFAULTS, "debounce_seconds": 0.0}  # noqa: F405
SIGNET_FLUSH_BATCH_SECONDS = 0.0

# The prune's pause between batches is for live hooks; the tests have none to wait for.
SIGNET_PRUNE_PAUSE_RATIO = 0.0
SIGNET_BACKGROUND_NICENESS = 0

LOGGING["loggers"]["django-q"] = {"level": "WARNING"}  # noqa: F405


# Threads serving requests in the tests (live servers) must not keep connections open past
# their request, or PostgreSQL refuses to drop the test database at the end.
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
