"""Project identity: which sessions belong to the same piece of work.

The key is the git top-level when one is known (a session started in a subfolder of a
repository matches the repository), else the normalised working directory. The client runs
where the files are, so what it sends wins; the server resolves paths itself only when it
can see them, and otherwise normalises lexically.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path

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


def _server_realpath(path: str) -> str:
    """The real path when this server can see ``path``, else ''."""
    if not path or not os.path.isabs(path):
        return ""
    try:
        if not os.path.isdir(path):
            return ""
        return os.path.realpath(path)
    except OSError:
        return ""


def _git_root_above(path: str) -> str:
    current = Path(path)
    for _ in range(MAX_GIT_WALK):
        try:
            if (current / ".git").exists():
                return str(current)
        except OSError:
            return ""
        if current.parent == current:
            return ""
        current = current.parent
    return ""


def project_identify(
    *, cwd: str, client_project: str = "", client_git_root: str = ""
) -> ProjectIdentity:
    """Work out the project key of a session from what the harness and client sent."""
    project = cwd.strip()[:MAX_PATH_CHARS]
    git_root = lexical_normalize(client_git_root)
    if client_project:
        normalized = lexical_normalize(client_project)
    else:
        real = _server_realpath(project)
        normalized = real or lexical_normalize(project)
        if real and not git_root:
            git_root = _git_root_above(real)
    key = git_root or normalized
    return ProjectIdentity(
        project=project, project_normalized=key[:MAX_PATH_CHARS], git_root=git_root
    )
