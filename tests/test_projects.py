"""Project identity: the key that lets a new session find its project's last checkpoint."""

from __future__ import annotations

import pytest

from checkpoints.models import Session
from checkpoints.services.projects import lexical_normalize, project_identify
from tests.hookutil import payload, send


@pytest.mark.django_db
def test_the_server_never_looks_at_a_clients_path_on_its_own_disk(tmp_path, owner):
    """A repository, a symlink and /proc/self/cwd on the server's disk are only text."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    identity = project_identify(owner=owner, cwd=str(repo / "src"))
    assert identity.project_normalized == str(repo / "src")
    assert identity.git_root == ""
    link = tmp_path / "link"
    link.symlink_to(repo)
    assert project_identify(owner=owner, cwd=str(link)).project_normalized == str(link)
    assert project_identify(owner=owner, cwd="/proc/self/cwd").project_normalized == (
        "/proc/self/cwd"
    )


@pytest.mark.django_db
def test_paths_are_normalised_lexically(owner):
    identity = project_identify(owner=owner, cwd="/home/alice/projects/webapp/./src/../")
    assert identity.project_normalized == "/home/alice/projects/webapp"
    assert identity.git_root == ""


@pytest.mark.django_db
def test_what_the_client_sends_wins(tmp_path, owner):
    identity = project_identify(
        owner=owner,
        cwd=str(tmp_path),
        client_project="/home/alice/projects/webapp/src",
        client_git_root="/home/alice/projects/webapp",
    )
    assert identity.project_normalized == "/home/alice/projects/webapp"


@pytest.mark.django_db
def test_a_cwd_alone_joins_the_owners_known_repository(client_for, owner, teammate):
    """An http event's ``cwd`` maps to the git top-level a command hook found earlier, the
    nearest one, and only among the owner's own sessions."""
    hook = client_for(owner, "ingest")
    for key, root in (("outer", "/w"), ("start", "/w/repo")):
        start = payload(
            "session_start_startup",
            session_id=key,
            cwd=root,
            signet={"project_normalized": root, "git_root": root},
        )
        send(hook, start)
    send(hook, payload("user_prompt_submit", session_id="later", cwd="/w/repo/src/api"))
    assert Session.objects.get(session_key="later").project_normalized == "/w/repo"
    send(
        client_for(teammate, "ingest"),
        payload("user_prompt_submit", session_id="other", cwd="/w/repo/src"),
    )
    assert Session.objects.get(session_key="other").project_normalized == "/w/repo/src"


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
