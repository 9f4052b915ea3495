"""Session export (command and API), and the imports: a Signet export read back losslessly,
Claude Code transcript folders and OpenClaw session stores, all idempotent."""

from __future__ import annotations

import io
import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from checkpoints.models import Checkpoint, Injection, Session, Trigger
from checkpoints.services.exports import EXPORT_FORMAT, EXPORT_VERSION, session_export
from checkpoints.services.imports.signet import ExportFormatError, signet_import
from checkpoints.services.redaction import REDACTED
from checkpoints.services.store import CheckpointContent, checkpoint_capture
from tests.factories import CheckpointFactory, InjectionFactory, SessionFactory

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CC_TRANSCRIPT = FIXTURES / "claude_code" / "transcript.jsonl"
CC_SUBAGENT = FIXTURES / "claude_code" / "subagents" / "agent-a4f19c2.jsonl"
CC_KEY = "3f2b8c1e-5d4a-4e7b-9c2f-8a1d6e0b7c42"
OC_DIR = FIXTURES / "openclaw"
OC_KEY = "7d2e9a41-3c6b-4f08-a5d1-92b4c7e60f3a"
SECRET = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def worked_session(owner):
    """A session with lineage, three chained checkpoints and two injections."""
    before = SessionFactory(owner=owner, session_key="earlier-1")
    session = SessionFactory(
        owner=owner,
        session_key="sess-1",
        previous_session=before,
        prompt_count=7,
        recent_prompts=["add the limiter", "run the tests"],
        modified_files=["src/a.ts"],
        compact_summary="We moved the store to Redis.",
        context_tokens=12345,
        git_branch="feat/x",
    )
    start = timezone.now() - timedelta(hours=2)
    parent = None
    for index, trigger in enumerate((Trigger.PERIODIC, Trigger.PRE_COMPACTION, Trigger.AGENT)):
        parent = CheckpointFactory(
            session=session,
            parent=parent,
            trigger=trigger,
            created_at=start + timedelta(minutes=index),
            current_task=f"task {index}",
            decisions=["use Redis"],
            next_steps=["write tests", "ship"],
            modified_files=["src/a.ts", "src/b.ts"],
            prompt_count=index * 3,
            new_prompts=3,
            tags=["x"],
            state={"step": index},
            context_tokens=1000 + index,
        )
    first = Checkpoint.objects.filter(session=session).order_by("created_at").first()
    InjectionFactory(session=session, checkpoint=first, created_at=start + timedelta(minutes=5))
    InjectionFactory(
        session=session, checkpoint=None, source="startup", created_at=start + timedelta(minutes=6)
    )
    return session


def without_time(document: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in document.items() if key != "exported_at"}


# --- export -----------------------------------------------------------------------------


def test_export_holds_every_field_with_format_and_version(owner):
    session = worked_session(owner)
    document = session_export(session=session)
    assert document["format"] == EXPORT_FORMAT
    assert document["version"] == EXPORT_VERSION
    assert document["session"]["session_key"] == "sess-1"
    assert document["session"]["previous_session_key"] == "earlier-1"
    assert document["session"]["compact_summary"] == "We moved the store to Redis."
    assert [c["trigger"] for c in document["checkpoints"]] == [
        "periodic",
        "pre_compaction",
        "agent",
    ]
    ids = [c["id"] for c in document["checkpoints"]]
    assert [c["parent_id"] for c in document["checkpoints"]] == [None, ids[0], ids[1]]
    assert document["injections"][0]["checkpoint_id"] == ids[0]
    assert document["injections"][1]["checkpoint_id"] is None
    json.dumps(document)  # JSON values only


def test_export_is_redacted_even_if_the_store_holds_a_secret(owner):
    session = SessionFactory(owner=owner, session_key="leaky")
    CheckpointFactory(session=session, current_task=f"deploy with token {SECRET}")
    text = json.dumps(session_export(session=session))
    assert SECRET not in text
    assert REDACTED in text


def test_export_api_is_owner_scoped_and_needs_read(owner, stranger, client_for):
    worked_session(owner)
    response = client_for(owner, "read").get("/api/sessions/sess-1/export/")
    assert response.status_code == 200
    assert response.json()["session"]["session_key"] == "sess-1"
    assert len(response.json()["checkpoints"]) == 3
    assert client_for(stranger, "read").get("/api/sessions/sess-1/export/").status_code == 404
    assert client_for(owner, "read").get("/api/sessions/nope/export/").status_code == 404
    assert client_for(owner, "ingest").get("/api/sessions/sess-1/export/").status_code == 403


def test_export_command_needs_a_known_key_and_a_user_when_ambiguous(owner, teammate, tmp_path):
    worked_session(owner)
    out, _ = run("export_session", "sess-1")
    assert json.loads(out)["session"]["session_key"] == "sess-1"
    SessionFactory(owner=teammate, session_key="sess-1")
    with pytest.raises(CommandError, match="--user"):
        run("export_session", "sess-1")
    target = tmp_path / "out.json"
    run("export_session", "sess-1", "--user", "alice", "--output", str(target))
    assert len(json.loads(target.read_text())["checkpoints"]) == 3
    with pytest.raises(CommandError, match="No session"):
        run("export_session", "missing")


# --- signet import ----------------------------------------------------------------------


def test_round_trip_after_deleting_is_lossless_ids_included(owner, tmp_path):
    session = worked_session(owner)
    first = session_export(session=session)
    target = tmp_path / "sess.json"
    target.write_text(json.dumps(first))
    session.delete()
    out, _ = run("import_sessions", "signet", str(target), "--user", "alice")
    assert "1 session(s) created" in out
    assert "3 checkpoint(s) and 2 injection(s)" in out
    again = session_export(session=Session.objects.get(owner=owner, session_key="sess-1"))
    assert without_time(again) == without_time(first)
    for name, value in first["session"].items():  # field by field, for a readable failure
        assert again["session"][name] == value, name
    for before, after in zip(first["checkpoints"], again["checkpoints"], strict=True):
        for name, value in before.items():
            assert after[name] == value, name


def test_import_into_another_user_derives_ids_and_keeps_everything_else(owner, teammate):
    first = session_export(session=worked_session(owner))
    SessionFactory(owner=teammate, session_key="earlier-1")
    report = signet_import(owner=teammate, document=first)
    assert (report.sessions_created, report.checkpoints_created) == (1, 3)
    copied = Session.objects.get(owner=teammate, session_key="sess-1")
    assert copied.previous_session is not None
    assert copied.previous_session.owner == teammate
    second = session_export(session=copied)
    assert second["session"] == first["session"]
    old_ids = [c["id"] for c in first["checkpoints"]]
    new_ids = [c["id"] for c in second["checkpoints"]]
    assert not set(old_ids) & set(new_ids)
    assert [i[:13] for i in new_ids] == [i[:13] for i in old_ids]  # same time prefix
    mapping = dict(zip(old_ids, new_ids, strict=True))
    for before, after in zip(first["checkpoints"], second["checkpoints"], strict=True):
        assert after["parent_id"] == (mapping[before["parent_id"]] if before["parent_id"] else None)
        same = {k: v for k, v in before.items() if k not in ("id", "parent_id")}
        assert {k: after[k] for k in same} == same
    assert [i["checkpoint_id"] for i in second["injections"]] == [
        mapping[i["checkpoint_id"]] if i["checkpoint_id"] else None for i in first["injections"]
    ]
    assert Checkpoint.objects.filter(owner=owner).count() == 3  # the original is untouched


def test_signet_reimport_adds_nothing(owner, teammate):
    document = session_export(session=worked_session(owner))
    for user in (owner, teammate, teammate):
        signet_import(owner=user, document=document)
    report = signet_import(owner=teammate, document=document)
    assert report.sessions_unchanged == 1
    assert (report.checkpoints_created, report.injections_created) == (0, 0)
    assert Checkpoint.objects.filter(owner=teammate).count() == 3
    assert Injection.objects.filter(session__owner=teammate).count() == 2
    assert Checkpoint.objects.filter(owner=owner).count() == 3


def test_signet_import_refuses_other_documents(owner):
    with pytest.raises(ExportFormatError):
        signet_import(owner=owner, document={"format": "other"})
    with pytest.raises(ExportFormatError, match="version"):
        signet_import(owner=owner, document={"format": EXPORT_FORMAT, "version": 99})


def test_import_command_needs_a_known_user_and_path(owner, tmp_path):
    with pytest.raises(CommandError, match="No user"):
        run("import_sessions", "signet", str(tmp_path), "--user", "nobody")
    with pytest.raises(CommandError, match="does not exist"):
        run("import_sessions", "signet", str(tmp_path / "x.json"), "--user", "alice")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CommandError, match="cannot read"):
        run("import_sessions", "signet", str(bad), "--user", "alice")


# --- Claude Code ------------------------------------------------------------------------


@pytest.fixture
def projects(tmp_path: Path) -> Path:
    """A ``~/.claude/projects`` folder: one project with the fixture transcript (and its
    subagent), another with a transcript holding two malformed lines."""
    root = tmp_path / "projects"
    webapp = root / "-home-alice-projects-webapp"
    (webapp / CC_KEY / "subagents").mkdir(parents=True)
    shutil.copy(CC_TRANSCRIPT, webapp / f"{CC_KEY}.jsonl")
    shutil.copy(CC_SUBAGENT, webapp / CC_KEY / "subagents" / CC_SUBAGENT.name)
    other = root / "-home-alice-src-cli"
    other.mkdir()
    lines = [
        {
            "type": "user",
            "isSidechain": False,
            "sessionId": "cli-1",
            "cwd": "/home/alice/src/cli",
            "timestamp": "2026-08-18T08:00:00Z",
            "message": {"role": "user", "content": "fix the CLI flags"},
        },
        {
            "type": "assistant",
            "isSidechain": False,
            "sessionId": "cli-1",
            "timestamp": "2026-08-18T08:00:05Z",
            "message": {
                "id": "m1",
                "model": "claude-sonnet-4-6",
                "content": [{"type": "text", "text": "On it."}],
            },
        },
    ]
    text = "\n".join(json.dumps(line) for line in lines)
    (other / "cli-1.jsonl").write_text(text + "\n{broken\n[1, 2]\n")
    return root


def test_claude_code_folder_import(owner, projects):
    out, _err = run("import_sessions", "claude-code", str(projects), "--user", "alice")
    assert "2 session(s) created" in out
    assert "2 malformed line(s)" in out
    session = Session.objects.get(owner=owner, session_key=CC_KEY)
    assert session.harness == "claude-code"
    assert session.project_normalized == "/home/alice/projects/webapp"
    assert session.end_reason == "imported"
    assert session.ended_at is not None
    assert session.compaction_count == 1
    assert session.compact_summary.startswith("This session is being continued")
    compaction, end = Checkpoint.objects.filter(session=session).order_by("created_at")
    assert compaction.trigger == Trigger.PRE_COMPACTION
    assert "import:claude-code:compact:1" in compaction.tags
    assert compaction.current_task.startswith("Move the counter store to Redis")
    assert compaction.context_tokens == 48213  # the boundary's preTokens
    assert "### Compaction summary" in compaction.digest
    assert "/home/alice/projects/webapp/src/middleware/rateLimit.ts" in compaction.modified_files
    assert end.trigger == Trigger.SESSION_END
    assert end.parent_id == compaction.id
    assert end.current_task == "Continue: finish the Redis conversion and run the tests."
    assert end.created_at.isoformat().startswith("2026-08-18T09:14:12")
    cli = Session.objects.get(owner=owner, session_key="cli-1")
    assert [c.trigger for c in cli.checkpoints.all()] == [Trigger.SESSION_END]
    assert cli.checkpoints.get().last_assistant_message == "On it."
    assert Session.objects.filter(owner=owner).count() == 2  # the subagent is no session


def test_claude_code_reimport_adds_nothing_and_a_grown_transcript_adds_its_tail(owner, projects):
    run("import_sessions", "claude-code", str(projects), "--user", "alice")
    out, _ = run("import_sessions", "claude-code", str(projects), "--user", "alice")
    assert "0 session(s) created, 0 updated, 2 unchanged" in out
    assert Checkpoint.objects.filter(owner=owner).count() == 3
    transcript = projects / "-home-alice-src-cli" / "cli-1.jsonl"
    more = {
        "type": "user",
        "isSidechain": False,
        "sessionId": "cli-1",
        "timestamp": "2026-08-18T09:00:00Z",
        "message": {"role": "user", "content": "and the help text"},
    }
    transcript.write_text(transcript.read_text() + json.dumps(more) + "\n")
    out, _ = run("import_sessions", "claude-code", str(transcript), "--user", "alice")
    assert "1 updated" in out
    latest = Checkpoint.objects.filter(session__session_key="cli-1").order_by("-created_at").first()
    assert latest is not None
    assert latest.current_task == "and the help text"


def test_claude_code_import_leaves_a_hook_tracked_session_alone(owner, projects):
    checkpoint_capture(
        owner=owner,
        session_key=CC_KEY,
        project="/home/alice/projects/webapp",
        harness="claude-code",
        trigger=Trigger.EXPLICIT,
        content=CheckpointContent(current_task="live"),
    )
    out, err = run("import_sessions", "claude-code", str(projects), "--user", "alice")
    assert "1 skipped" in out
    assert "already tracked" in err
    assert Checkpoint.objects.filter(session_key=CC_KEY).count() == 1


def test_claude_code_import_redacts(owner, tmp_path):
    line = {
        "type": "user",
        "isSidechain": False,
        "sessionId": "s-1",
        "timestamp": "2026-08-18T08:00:00Z",
        "message": {"role": "user", "content": f"use GITHUB_TOKEN={SECRET} to push"},
    }
    path = tmp_path / "s-1.jsonl"
    path.write_text(json.dumps(line) + "\n")
    run("import_sessions", "claude-code", str(path), "--user", "alice")
    stored = json.dumps(session_export(session=Session.objects.get(session_key="s-1")))
    raw = Checkpoint.objects.get(session_key="s-1")
    assert SECRET not in stored
    assert SECRET not in raw.current_task
    assert SECRET not in raw.digest
    assert SECRET not in "".join(Session.objects.get(session_key="s-1").recent_prompts)


def test_claude_code_path_without_transcripts_is_an_error(owner, tmp_path):
    with pytest.raises(CommandError, match="No Claude Code transcript"):
        run("import_sessions", "claude-code", str(tmp_path), "--user", "alice")


def test_progress_bar_on_a_terminal(owner, projects, monkeypatch):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stderr = Tty()
    monkeypatch.setattr("sys.stderr", stderr)
    run("import_sessions", "claude-code", str(projects), "--user", "alice")
    assert "\r[" in stderr.getvalue()
    assert "2/2" in stderr.getvalue()


# --- OpenClaw ---------------------------------------------------------------------------


def openclaw_store(tmp_path: Path, *, nested: bool) -> Path:
    folder = tmp_path / "sessions"
    folder.mkdir()
    shutil.copy(OC_DIR / f"{OC_KEY}.jsonl", folder)
    store = json.loads((OC_DIR / "sessions.json").read_text())
    if nested:
        entry = store["agent:main:main"]
        entry["memoryFlush"] = {
            "kind": "compaction",
            "compactionCount": entry.pop("memoryFlushCompactionCount"),
            "at": entry.pop("memoryFlushAt"),
        }
    (folder / "sessions.json").write_text(json.dumps(store))
    return folder


@pytest.mark.parametrize("nested", [False, True])
def test_openclaw_import_both_store_shapes(owner, tmp_path, nested):
    folder = openclaw_store(tmp_path, nested=nested)
    out, err = run("import_sessions", "openclaw", str(folder / "sessions.json"), "--user", "alice")
    assert "1 session(s) created" in out
    assert "not found" in err
    session = Session.objects.get(owner=owner, session_key=OC_KEY)
    assert session.harness == "openclaw"
    assert session.project_normalized == "/home/alice/.openclaw/workspace"
    assert session.compact_summary.startswith("## Goal")
    compaction, end = Checkpoint.objects.filter(session=session).order_by("created_at")
    assert compaction.trigger == Trigger.PRE_COMPACTION
    assert compaction.context_tokens == 172304
    assert set(compaction.modified_files) == {"scripts/backup.sh", "memory/2026-08-18.md"}
    assert "Fix the nightly backup cron." in compaction.digest
    assert "openclaw:agent:main:main" in compaction.tags
    assert end.trigger == Trigger.SESSION_END
    assert "did it work this time?" in end.current_task
    assert end.last_assistant_message.startswith("Yes")
    assert end.state["openclaw"]["memory_flush_compaction_count"] == 0
    assert end.state["openclaw"]["memory_flush_at"].startswith("2026-08-18T14:12:23")
    assert "Pre-compaction memory flush" not in " ".join(end.recent_prompts)


def test_openclaw_reimport_adds_nothing(owner, tmp_path):
    folder = openclaw_store(tmp_path, nested=False)
    run("import_sessions", "openclaw", str(folder), "--user", "alice")
    out, _ = run("import_sessions", "openclaw", str(folder), "--user", "alice")
    assert "1 unchanged" in out
    assert "0 checkpoint(s)" in out
    assert Checkpoint.objects.filter(owner=owner).count() == 2


def test_openclaw_lone_transcript_with_malformed_lines(owner, tmp_path):
    path = tmp_path / "lone.jsonl"
    path.write_text((OC_DIR / f"{OC_KEY}.jsonl").read_text() + "not json\n")
    out, _ = run("import_sessions", "openclaw", str(path), "--user", "alice")
    assert "1 session(s) created" in out
    assert "1 malformed line(s)" in out
    assert Session.objects.filter(session_key=OC_KEY).exists()


def test_openclaw_unreadable_store_is_an_error(owner, tmp_path):
    (tmp_path / "sessions.json").write_text("[]")
    with pytest.raises(CommandError, match="not a session store"):
        run("import_sessions", "openclaw", str(tmp_path), "--user", "alice")
