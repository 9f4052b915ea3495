"""The instructions that tell an agent when to use Signet's MCP tools, and their installer.

The hooks checkpoint a session passively; only the agent knows *why* it did what it did.
``INSTRUCTIONS`` asks it to write that down with ``session_digest`` at the moments it matters
and to read it back with ``session_recall`` after a compaction.

``instructions_install`` keeps the block in a Markdown memory file (Claude Code's
``~/.claude/CLAUDE.md`` by default) between two marker lines, with the same guarantees as the
settings installer in ``hooks.install``: the rest of the file is never touched, a re-install
replaces the block in place (so an older text is upgraded), a second run changes no byte and
writes no backup, a backup is written beside the file before any change, and the write is
atomic. Standard library only.
"""

from __future__ import annotations

from pathlib import Path

from hooks.install import InstallError, _backup, _target, _write_atomically

DEFAULT_CLAUDE_MD = "~/.claude/CLAUDE.md"
BEGIN_MARKER = "<!-- signet:begin -->"
END_MARKER = "<!-- signet:end -->"

INSTRUCTIONS = """\
## Session continuity (Signet)

Signet checkpoints this session so that your work survives compaction. Its MCP tools keep
what only you know: why.

Call `session_digest`:
- after you make a decision (an approach chosen or dropped, a changed plan);
- at a milestone (a step done, tests passing, before a commit);
- when the user asks you to remember something;
- at once when a Signet context-pressure reminder arrives, before anything else.

Not after every edit: the hooks already record prompts and changed files.

In a digest, write why, not what: the decisions and their reasons, open questions,
blockers, next steps, the current task and the files that matter. Each digest must stand
alone, because only the latest is recalled: restate what is still open. No secrets.

Call `session_recall` first, before other work:
- after a compaction (the conversation now starts from a summary);
- when a Session Recovery Context says something was omitted.

Then carry on with the task without asking the user to repeat what the checkpoint holds.
`checkpoints_list` finds older checkpoints.
"""

BLOCK = f"{BEGIN_MARKER}\n{INSTRUCTIONS}{END_MARKER}\n"


def instructions_install(path: Path) -> bool:
    """Write ``INSTRUCTIONS`` into the Markdown file ``path``; True when the file changed.

    Appended after a blank line when the file has no Signet block (created, with its
    folders, when missing), replaced in place when it has one. InstallError, with nothing
    written, when its markers do not pair up.
    """
    target = _target(path)
    text, raw = _read(target)
    lines = text.splitlines(keepends=True)
    blocks = _blocks(lines, target)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    block = BLOCK.replace("\n", newline).splitlines(keepends=True)
    if blocks:
        first_start, first_end = blocks[0]
        lines = _without(lines, blocks[1:])
        lines[first_start : first_end + 1] = block
        updated = "".join(lines)
    elif not text:
        updated = "".join(block)
    else:
        # The blank line before the block is ours: uninstall takes it out again.
        separator = newline if text.endswith(("\n", "\r")) else newline * 2
        updated = text + separator + "".join(block)
    return _save(target, updated, raw)


def instructions_uninstall(path: Path) -> bool:
    """Remove the Signet block (and the blank line installed before it) from ``path``.

    True when the file changed; a missing file or one without the block is left alone.
    A file that did not end with a line break before the install ends with one after this.
    """
    target = _target(path)
    text, raw = _read(target)
    if raw is None:
        return False
    lines = text.splitlines(keepends=True)
    blocks = _blocks(lines, target)
    if not blocks:
        return False
    return _save(target, "".join(_without(lines, blocks)), raw)


def _read(path: Path) -> tuple[str, bytes | None]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return "", None
    except OSError as exc:
        raise InstallError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        return raw.decode("utf-8"), raw
    except UnicodeDecodeError as exc:
        raise InstallError(f"{path} is not UTF-8 text; nothing was changed") from exc


def _blocks(lines: list[str], path: Path) -> list[tuple[int, int]]:
    """The (begin, end) line indexes of each Signet block; InstallError unless they pair up.

    A half block cannot be replaced safely: where it ends is a guess, and a wrong guess
    deletes the user's own lines.
    """
    blocks: list[tuple[int, int]] = []
    begin: int | None = None
    for index, line in enumerate(lines):
        marker = line.lstrip("\ufeff").strip()
        if marker == BEGIN_MARKER:
            if begin is not None:
                raise InstallError(
                    f"{path}: line {index + 1} opens a Signet block inside the one opened on "
                    f"line {begin + 1}; fix the {BEGIN_MARKER} / {END_MARKER} lines first, "
                    "nothing was changed"
                )
            begin = index
        elif marker == END_MARKER:
            if begin is None:
                raise InstallError(
                    f"{path}: line {index + 1} has {END_MARKER} without a {BEGIN_MARKER} "
                    "before it; fix or remove it first, nothing was changed"
                )
            blocks.append((begin, index))
            begin = None
    if begin is not None:
        raise InstallError(
            f"{path}: the Signet block opened on line {begin + 1} ({BEGIN_MARKER}) has no "
            f"{END_MARKER}; add it where the block ends, or delete the block, "
            "nothing was changed"
        )
    return blocks


def _without(lines: list[str], blocks: list[tuple[int, int]]) -> list[str]:
    """``lines`` without ``blocks``, each with the blank line right before it (ours)."""
    dropped: set[int] = set()
    for begin, end in blocks:
        dropped.update(range(begin, end + 1))
        if begin > 0 and not lines[begin - 1].strip():
            dropped.add(begin - 1)
    return [line for index, line in enumerate(lines) if index not in dropped]


def _save(path: Path, text: str, raw: bytes | None) -> bool:
    data = text.encode("utf-8")
    if data == raw:
        return False
    if raw is not None:
        _backup(path, raw)
    _write_atomically(path, data)
    return True
