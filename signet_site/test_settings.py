"""Settings for the test suite: the real settings, with a fast hasher and synchronous tasks."""

from __future__ import annotations

import os

# A fixed key keeps the suite from writing into the developer's data folder.
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-" + "x7Yq3Lm9Pz2Rt8Vw" * 4)

from signet_site.settings import *  # noqa: F403
from signet_site.settings import Q_CLUSTER

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
Q_CLUSTER["sync"] = True
STORAGES["staticfiles"] = {  # noqa: F405
    "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
}
