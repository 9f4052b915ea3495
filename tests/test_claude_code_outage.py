"""The real Claude Code CLI (``tests/claude_cli.py``) through an outage of the service.

Claude Code posts UserPromptSubmit, PostToolUse and PostCompact itself (``http`` hooks, no
retry): what they carried while the service was down is brought up to date from the
transcript by the next command hook, exactly once and in order. SessionEnd is a command
hook, so it spools in the outbox like the others.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from checkpoints.models import Session
from tests.model_api import text, tool_use

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _turns(claude, model_api, hook_service, *, outage: bool):
    """Two turns (a Write, an Edit) and a compaction, with the service down when
    ``outage``; then the service is up and a third turn runs. Returns the session's id."""
    vat = str(claude.project / "vat.py")
    if outage:
        hook_service.stop()
    write = tool_use("Write", {"file_path": vat, "content": "RATE = 20\n"})
    model_api.script.append([text("Writing it."), write])
    model_api.script.append([text("Wrote vat.py.")])
    first = claude.run("Add a VAT rate constant")
    assert first.returncode == 0, first.stderr
    session_id = first.session_id
    edit = tool_use("Edit", {"file_path": vat, "old_string": "20", "new_string": "21"})
    model_api.script.append([edit])
    model_api.script.append([text("Edited.")])
    second = claude.run("Raise the rate to 21", "--resume", session_id)
    assert second.returncode == 0, second.stderr
    compacted = claude.run("/compact", "--resume", session_id)
    assert compacted.returncode == 0, compacted.stderr
    if outage:
        assert not Session.objects.filter(session_key=session_id, prompt_count__gt=0).exists()
        hook_service.start()
    model_api.script.append([text("Carrying on.")])
    third = claude.run("Now the VAT breakdown on the invoice", "--resume", session_id)
    assert third.returncode == 0, third.stderr
    drain(claude, model_api)
    return session_id


def drain(claude, model_api) -> None:
    """Run short sessions until their hooks have replayed whatever is still queued: each hook
    replays within its own short deadline, so a busy machine may need a few."""
    outbox = Path(claude.env["SIGNET_OUTBOX"])
    for _ in range(5):
        if not outbox.exists() or not outbox.read_text().strip():
            return
        model_api.script.append([text("Pong.")])
        assert claude.run("ping").returncode == 0
    raise AssertionError(f"still queued: {len(outbox.read_text().splitlines())} events")


def test_what_the_http_hooks_carried_in_an_outage_reaches_the_service_later(
    claude, model_api, hook_service
):
    session_id = _turns(claude, model_api, hook_service, outage=True)

    session = Session.objects.get(session_key=session_id)
    assert session.prompt_count == 3
    assert session.recent_prompts == [
        "Add a VAT rate constant",
        "Raise the rate to 21",
        "Now the VAT breakdown on the invoice",
    ]
    assert any(path.endswith("vat.py") for path in session.modified_files)
    # The summary alone, as PostCompact would have sent it, not the transcript's wrapping.
    assert session.compact_summary
    assert "This session is being continued" not in session.compact_summary
    assert "If you need specific details" not in session.compact_summary
    assert session.ended_at is not None


def test_what_the_http_hooks_delivered_is_not_counted_again(claude, model_api, hook_service):
    session_id = _turns(claude, model_api, hook_service, outage=False)

    session = Session.objects.get(session_key=session_id)
    assert session.prompt_count == 3
    assert session.recent_prompts == [
        "Add a VAT rate constant",
        "Raise the rate to 21",
        "Now the VAT breakdown on the invoice",
    ]
    assert session.modified_files == [str(claude.project / "vat.py")]


def test_the_end_of_a_session_in_an_outage_reaches_the_service_with_the_next_hook(
    claude, model_api, hook_service
):
    hook_service.stop()
    model_api.script.append([text("Nothing to do.")])
    lost = claude.run("Check the invoice totals")
    assert lost.returncode == 0, lost.stderr
    hook_service.start()
    model_api.script.append([text("Hello.")])
    other = claude.run("ping")  # another session on the machine: its hooks replay the outbox
    assert other.returncode == 0, other.stderr
    drain(claude, model_api)

    session = Session.objects.get(session_key=lost.session_id)
    assert session.ended_at is not None
    assert session.prompt_count == 1
    assert session.recent_prompts == ["Check the invoice totals"]


# --- the TUI ---------------------------------------------------------------------------------
# In the TUI a session outlives the outage: the first prompt after it is posted by its http
# hook before any command hook can bring the server up to date.


class Tui:
    """Claude Code's TUI in a detached tmux session, in the fixture's HOME and project."""

    def __init__(self, claude, name: str) -> None:
        self.claude = claude
        self.name = name

    def start(self) -> None:
        # What the first start asks a new user (theme, trust, the key, the bypass warning),
        # answered beforehand.
        env = self.claude.base_env()
        config = {
            "hasCompletedOnboarding": True,
            "theme": "dark",
            "customApiKeyResponses": {"approved": [env["ANTHROPIC_API_KEY"][-20:]]},
            "bypassPermissionsModeAccepted": True,
            "projects": {str(self.claude.project): {"hasTrustDialogAccepted": True}},
        }
        (self.claude.home / ".claude.json").write_text(json.dumps(config))
        command = " ".join(
            [
                "env", *(shlex.quote(f"{key}={value}") for key, value in env.items()),
                shlex.quote(str(self.claude.executable)), "--dangerously-skip-permissions",
            ]
        )  # fmt: skip
        self._tmux(
            "new-session", "-d", "-s", self.name, "-x", "160", "-y", "50",
            "-c", str(self.claude.project), command,
        )  # fmt: skip
        assert wait_until(lambda: "bypass permissions" in self.screen()), self.screen()

    def send(self, text: str) -> None:
        self._tmux("send-keys", "-t", self.name, "-l", text)
        self._tmux("send-keys", "-t", self.name, "Enter")

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.name, check=False)

    def stop(self) -> None:
        self._tmux("kill-session", "-t", self.name, check=False)

    @staticmethod
    def _tmux(*args: str, check: bool = True) -> str:
        done = subprocess.run(["tmux", *args], capture_output=True, text=True, check=check)
        return done.stdout


def wait_until(condition, timeout: float = 60.0) -> bool:
    """Poll ``condition`` until it holds; False if it never did within ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.2)
    return False


def the_session() -> Session | None:
    return Session.objects.first()


@pytest.fixture
def tui(claude, tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    driver = Tui(claude, f"signet-{tmp_path.name}")
    yield driver
    driver.stop()


def test_in_the_tui_a_prompt_lost_in_an_outage_is_caught_up_before_the_next_one(
    tui, claude, model_api, hook_service
):
    vat = str(claude.project / "vat.py")
    outbox = Path(claude.env["SIGNET_OUTBOX"])
    tui.start()
    write = tool_use("Write", {"file_path": vat, "content": "RATE = 20\n"})
    model_api.script.extend([[text("Writing it."), write], [text("Wrote it.")]])
    tui.send("Add a VAT rate constant")
    assert wait_until(
        lambda: (s := the_session()) is not None and s.last_assistant_message == "Wrote it."
    )

    hook_service.stop()
    edit = tool_use("Edit", {"file_path": vat, "old_string": "20", "new_string": "21"})
    model_api.script.extend([[edit], [text("Edited it.")]])
    tui.send("Raise the rate to 21")
    # The turn's Stop, queued in the outbox.
    assert wait_until(lambda: outbox.exists() and '"Stop"' in outbox.read_text())
    hook_service.start()

    model_api.script.append([text("Carrying on.")])
    tui.send("Now the VAT breakdown on the invoice")
    assert wait_until(lambda: the_session().last_assistant_message == "Carrying on.")
    tui.send("/exit")
    assert wait_until(lambda: the_session().ended_at is not None)

    session = the_session()
    assert session.prompt_count == 3
    assert session.recent_prompts == [
        "Add a VAT rate constant",
        "Raise the rate to 21",
        "Now the VAT breakdown on the invoice",
    ]
    assert session.modified_files == [vat]
    assert session.end_reason == "prompt_input_exit"
