"""The admin: sessions, checkpoints and injections to inspect; settings and tokens to edit.

Importing the modules registers their ``ModelAdmin`` classes with the admin site.
"""

from checkpoints.admin import evidence, policy, tokens

__all__ = ["evidence", "policy", "tokens"]
