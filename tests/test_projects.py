"""Project identity: the key that lets a new session find its project's last checkpoint."""

from __future__ import annotations

import pytest

from checkpoints.models import Session
from checkpoints.services.projects import lexical_normalize, project_identify
from tests.hookutil import payload, send


def test_a_subfolder_of_a_git_repository_matches_the_repository(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src" / "api").mkdir(parents=True)
    identity = project_identify(cwd=str(repo / "src" / "api"))
    assert identity.project_normalized == str(repo.resolve())
    assert identity.git_root == str(repo.resolve())
    assert identity.project == str(repo / "src" / "api")


def test_symlinks_resolve_to_the_real_path(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    assert project_identify(cwd=str(link)).project_normalized == str(real.resolve())


def test_paths_the_server_cannot_see_are_normalised_lexically():
    identity = project_identify(cwd="/home/alice/projects/webapp/./src/../")
    assert identity.project_normalized == "/home/alice/projects/webapp"
    assert identity.git_root == ""


def test_what_the_client_sends_wins(tmp_path):
    identity = project_identify(
        cwd=str(tmp_path),
        client_project="/home/alice/projects/webapp/src",
        client_git_root="/home/alice/projects/webapp",
    )
    assert identity.project_normalized == "/home/alice/projects/webapp"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", ""),
        ("   ", ""),
        ("/a/b/", "/a/b"),
        ("/a//b/./c/..", "/a/b"),
        ("C:\\Users\\alice\\repo", "C:/Users/alice/repo"),
    ],
)
def test_lexical_normalize(raw, expected):
    assert lexical_normalize(raw) == expected


@pytest.mark.django_db
def test_sessions_in_subfolders_share_the_client_git_root(client_for, owner):
    hook = client_for(owner, "ingest")
    for key, cwd in (("a", "/w/repo/src"), ("b", "/w/repo/docs")):
        body = payload(
            "session_start_startup",
            session_id=key,
            cwd=cwd,
            signet={"project_normalized": cwd, "git_root": "/w/repo", "git_branch": "main"},
        )
        send(hook, body)
    assert set(Session.objects.values_list("project_normalized", flat=True)) == {"/w/repo"}
    assert set(Session.objects.values_list("git_branch", flat=True)) == {"main"}
