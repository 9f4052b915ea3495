"""WSGI entry point (`make run` serves ``signet_site.wsgi:application`` with granian).

Hook posts take a shorter middleware list than the site's: ``signet_site/handlers.py``.
"""

import os

import django

from signet_site.handlers import SignetApplication

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "signet_site.settings")
django.setup(set_prefix=False)

application = SignetApplication()
