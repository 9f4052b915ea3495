"""The service's settings plus one bare JSON view, the baseline the hook path is judged by."""

from signet_site.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
