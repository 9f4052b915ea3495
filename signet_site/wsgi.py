"""WSGI entry point (`make run` serves ``signet_site.wsgi:application`` with granian)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "signet_site.settings")

application = get_wsgi_application()
