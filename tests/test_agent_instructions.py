"""The agent instructions: their text, the CLAUDE.md installer and the command printing them."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command

from hooks.install import InstallError
from hooks.instructions import (
    BEGIN_MARKER,
    BLOCK,
    DEFAULT_CLAUDE_MD,
    END_MARKER,
    INSTRUCTIONS,
    instructions_install,
    instructions_uninstall,
)

USER_TEXT = b"# My rules\n\n- Use tabs.\n- Never push to main.\n"
OLDER_BLOCK = f"{BEGIN_MARKER}\n## Session continuity (Signet)\n\nOld words.\n{END_MARKER}\n"


def backups(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.signet-backup-*"))


def test_text_names_both_tools_and_the_four_triggers():
    assert INSTRUCTIONS.startswith("## Session continuity (Signet)\n")
    assert "`session_digest`" in INSTRUCTIONS
    assert "`session_recall`" in INSTRUCTIONS
    for trigger in ("decision", "milestone", "remember", "context-pressure reminder"):
        assert trigger in INSTRUCTIONS
    assert "compaction" in INSTRUCTIONS
    assert "omitted" in INSTRUCTIONS
    assert "Session Recovery Context" in INSTRUCTIONS
    assert "why, not what" in INSTRUCTIONS


def test_text_stays_within_its_budget():
    # Read at every session start: it competes with the recovery context for attention.
    assert len(INSTRUCTIONS) < 1500
    assert INSTRUCTIONS.endswith("\n")
    assert BEGIN_MARKER not in INSTRUCTIONS
    assert END_MARKER not in INSTRUCTIONS


def test_default_path_is_claude_codes_user_memory():
    assert DEFAULT_CLAUDE_MD == "~/.claude/CLAUDE.md"


def test_install_creates_a_missing_file_and_its_folders(tmp_path):
    target = tmp_path / "home" / ".claude" / "CLAUDE.md"
    assert instructions_install(target) is True
    assert target.read_text() == BLOCK
    assert backups(target.parent) == []


def test_install_expands_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert instructions_install(Path(DEFAULT_CLAUDE_MD)) is True
    assert (tmp_path / ".claude" / "CLAUDE.md").read_text() == BLOCK


def test_install_fills_an_empty_file_after_a_backup(tmp_path):
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(b"")
    assert instructions_install(target) is True
    assert target.read_text() == BLOCK
    [backup] = backups(tmp_path)
    assert backup.read_bytes() == b""


def test_install_appends_after_a_blank_line_and_keeps_the_rest(tmp_path):
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(USER_TEXT)
    assert instructions_install(target) is True
    assert target.read_bytes() == USER_TEXT + b"\n" + BLOCK.encode()
    [backup] = backups(tmp_path)
    assert backup.name.startswith("CLAUDE.md.signet-backup-")
    assert backup.read_bytes() == USER_TEXT


def test_install_twice_changes_no_byte_and_writes_no_second_backup(tmp_path):
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(USER_TEXT)
    instructions_install(target)
    installed = target.read_bytes()
    before = backups(tmp_path)
    mtime = target.stat().st_mtime_ns
    assert instructions_install(target) is False
    assert target.read_bytes() == installed
    assert target.stat().st_mtime_ns == mtime
    assert backups(tmp_path) == before


def test_install_upgrades_an_older_block_in_place(tmp_path):
    target = tmp_path / "CLAUDE.md"
    head = b"# Mine\n\n"
    tail = b"\n## Later rules\n\n- Keep this.\n"
    target.write_bytes(head + OLDER_BLOCK.encode() + tail)
    assert instructions_install(target) is True
    assert target.read_bytes() == head + BLOCK.encode() + tail
    [backup] = backups(tmp_path)
    assert backup.read_bytes() == head + OLDER_BLOCK.encode() + tail
    assert instructions_install(target) is False


def test_install_keeps_one_block_when_the_file_holds_two(tmp_path):
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(USER_TEXT + b"\n" + OLDER_BLOCK.encode() + b"\n" + OLDER_BLOCK.encode())
    assert instructions_install(target) is True
    assert target.read_bytes() == USER_TEXT + b"\n" + BLOCK.encode()


def test_install_keeps_crlf_line_breaks(tmp_path):
    target = tmp_path / "CLAUDE.md"
    original = USER_TEXT.replace(b"\n", b"\r\n")
    target.write_bytes(original)
    instructions_install(target)
    assert target.read_bytes() == original + b"\r\n" + BLOCK.replace("\n", "\r\n").encode()
    assert instructions_install(target) is False
    instructions_uninstall(target)
    assert target.read_bytes() == original


def test_install_writes_through_a_symlink(tmp_path):
    real = tmp_path / "dotfiles" / "CLAUDE.md"
    real.parent.mkdir()
    real.write_bytes(USER_TEXT)
    link = tmp_path / "CLAUDE.md"
    link.symlink_to(real)
    instructions_install(link)
    assert link.is_symlink()
    assert real.read_bytes() == USER_TEXT + b"\n" + BLOCK.encode()


def test_uninstall_restores_the_original_bytes(tmp_path):
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(USER_TEXT)
    instructions_install(target)
    assert instructions_uninstall(target) is True
    assert target.read_bytes() == USER_TEXT
    assert len(backups(tmp_path)) == 2  # one per change, none overwritten
    assert instructions_uninstall(target) is False
    assert len(backups(tmp_path)) == 2


def test_uninstall_keeps_what_the_user_wrote_after_the_block(tmp_path):
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(USER_TEXT)
    instructions_install(target)
    added = b"\n## Added later\n\n- Keep me.\n"
    target.write_bytes(target.read_bytes() + added)
    assert instructions_uninstall(target) is True
    assert target.read_bytes() == USER_TEXT + added


def test_uninstall_of_a_created_file_leaves_it_empty(tmp_path):
    target = tmp_path / "CLAUDE.md"
    instructions_install(target)
    assert instructions_uninstall(target) is True
    assert target.read_bytes() == b""


def test_uninstall_without_a_file_or_a_block_changes_nothing(tmp_path):
    target = tmp_path / "CLAUDE.md"
    assert instructions_uninstall(target) is False
    assert not target.exists()
    target.write_bytes(USER_TEXT)
    assert instructions_uninstall(target) is False
    assert target.read_bytes() == USER_TEXT
    assert backups(tmp_path) == []


@pytest.mark.parametrize(
    "broken",
    [
        f"{BEGIN_MARKER}\n## Session continuity (Signet)\n\n# My own heading\n",
        f"## Notes\n{END_MARKER}\n",
        f"{BEGIN_MARKER}\n{BEGIN_MARKER}\nx\n{END_MARKER}\n",
    ],
    ids=["begin-without-end", "end-without-begin", "nested-begin"],
)
@pytest.mark.parametrize("action", [instructions_install, instructions_uninstall])
def test_unpaired_markers_are_refused_and_nothing_changes(tmp_path, broken, action):
    target = tmp_path / "CLAUDE.md"
    original = USER_TEXT + b"\n" + broken.encode()
    target.write_bytes(original)
    with pytest.raises(InstallError, match="nothing was changed"):
        action(target)
    assert target.read_bytes() == original
    assert backups(tmp_path) == []


def test_a_dangling_begin_marker_is_named_in_the_error(tmp_path):
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(USER_TEXT + f"\n{BEGIN_MARKER}\nhalf a block\n".encode())
    with pytest.raises(InstallError, match=f"line 6 .*has no {END_MARKER}"):
        instructions_install(target)


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(b"caf\xe9\n")
    with pytest.raises(InstallError, match="not UTF-8"):
        instructions_install(target)
    assert target.read_bytes() == b"caf\xe9\n"


def test_command_prints_exactly_the_instructions(capsys):
    call_command("agent_instructions")
    assert capsys.readouterr().out == INSTRUCTIONS


def test_a_file_without_a_final_line_break_gets_one_before_the_blank_line(tmp_path):
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(b"# Mine")
    instructions_install(target)
    assert target.read_bytes() == b"# Mine\n\n" + BLOCK.encode()
    instructions_uninstall(target)
    assert target.read_bytes() == b"# Mine\n"  # the line break stays: a text file's ending
