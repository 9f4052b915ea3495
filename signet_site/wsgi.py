"""WSGI entry point (`make run` serves ``signet_site.wsgi:application`` with granian).

Hook posts take a shorter middleware list than the site's: ``signet_site/handlers.py``.
"""

import os
from importlib import import_module

import django
from django.conf import settings

from signet_site.handlers import SignetApplication

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "signet_site.settings")
django.setup(set_prefix=False)

application = SignetApplication()
# The URLconf (every view, DRF, the serializers) is imported as the process starts, not in
# its first request: a SessionStart hook or an MCP handshake would wait behind it, and
# Claude Code in -p mode does not wait for its MCP servers.
import_module(settings.ROOT_URLCONF)
