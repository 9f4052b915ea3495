"""Project identity: which sessions belong to the same piece of work.

The key is the git top-level when one is known (a session started in a subfolder of a
repository matches the repository), else the normalised working directory. The client runs
where the files are and sends both; the server treats every path as text: it never calls
``realpath``, ``stat`` or git on a path a client names (it may not even be this machine's).
A session whose client sent only a ``cwd`` joins the project of the owner's sessions whose
git top-level holds that folder (``project_known``).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from functools import cache

from django.contrib.auth.models import User
from django.db import connections, router

from checkpoints.models import Session
from checkpoints.services.statements import Statement, statement_build, statement_run

MAX_PATH_CHARS = 1024
MAX_GIT_WALK = 64  # directory levels to climb looking for .git


@dataclass(frozen=True)
class ProjectIdentity:
    project: str  # the working directory as the harness reported it
    project_normalized: str  # the key sessions are matched on
    git_root: str


def lexical_normalize(path: str) -> str:
    """Normalise a path without touching the filesystem (``a/./b/../c/`` → ``a/c``)."""
    path = path.strip()
    if not path:
        return ""
    if "\\" in path and "/" not in path:  # a Windows path sent by a client
        path = path.replace("\\", "/")
    normalized = posixpath.normpath(path)
    return normalized[:MAX_PATH_CHARS]


def path_ancestors(path: str) -> list[str]:
    """``path`` and the folders above it, nearest first (``/a/b`` → ``/a/b``, ``/a``, ``/``)."""
    found: list[str] = []
    current = path
    while current and len(found) < MAX_GIT_WALK:
        found.append(current)
        parent = posixpath.dirname(current)
        if parent == current:
            break
        current = parent
    return found


def project_known(*, owner: User, path: str) -> str:
    """The git top-level of ``owner``'s sessions that holds ``path``, the nearest one, or ''.

    One query, on a session's first event only: what a client that could not read git (an
    ``http`` hook sends only ``cwd``) is matched with what an earlier command hook found.
    """
    if not posixpath.isabs(path):
        return ""
    ancestors = path_ancestors(path)
    alias = router.db_for_read(Session) or "default"
    statement = _known_statement(alias, len(ancestors))
    rows = statement_run(statement=statement, params=[*ancestors, owner.pk]).rows
    return max((root for (root,) in rows), key=len, default="")


@cache
def _known_statement(alias: str, ancestors: int) -> Statement:
    """The distinct git top-levels among ``ancestors`` paths of an owner's sessions: the SQL
    the ORM writes for it (the ``session_owner_git_root`` index serves it), built once per
    number of paths instead of compiled at every call (half a millisecond of Python)."""
    name = connections[alias].ops.quote_name
    table = name(Session._meta.db_table)
    column = f"{table}.{name('git_root')}"
    places = ", ".join(["%s"] * ancestors)
    return statement_build(
        alias=alias,
        sql=(
            f"SELECT DISTINCT {column} FROM {table} "  # noqa: S608
            f"WHERE ({column} IN ({places}) AND {table}.{name('owner_id')} = %s) "
            f"LIMIT {MAX_GIT_WALK}"
        ),
        returns_rows=True,
    )


def project_identify(
    *, owner: User, cwd: str, client_project: str = "", client_git_root: str = ""
) -> ProjectIdentity:
    """Work out the project key of a session from what the harness and client sent."""
    project = cwd.strip()[:MAX_PATH_CHARS]
    git_root = lexical_normalize(client_git_root)
    normalized = lexical_normalize(client_project or project)
    if not git_root and not client_project and normalized:
        git_root = project_known(owner=owner, path=normalized)
    key = git_root or normalized
    return ProjectIdentity(
        project=project, project_normalized=key[:MAX_PATH_CHARS], git_root=git_root
    )
