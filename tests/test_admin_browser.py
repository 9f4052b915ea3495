"""The admin's lists at 1280 px in Debian's Chromium: every column in view, none scrolled off."""

from __future__ import annotations

import pytest

from checkpoints.models import RetentionRun
from checkpoints.services.tokens import token_create
from tests.browser import CHROMIUM, requires_browser
from tests.factories import CheckpointFactory, InjectionFactory, SessionFactory, UserFactory

pytestmark = [requires_browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LISTS = ["session", "checkpoint", "injection", "retentionrun", "apitoken"]

# How far the result table reaches past its box, and past the window.
OVERFLOW = """() => {
    const results = document.querySelector("#changelist .results");
    return [results.scrollWidth - results.clientWidth,
            document.documentElement.scrollWidth - window.innerWidth];
}"""


def test_admin_lists_fit_at_1280_px_beside_both_sidebars(live_server, superuser):
    from playwright.sync_api import sync_playwright

    # The widest values the columns meet: a long owner name, session key and project path.
    owner = UserFactory(username="alice.longname@example.test")
    for n in range(3):
        session = SessionFactory(
            owner=owner,
            session_key=f"0199a4c2-7d1e-7b3a-9f00-5c3e2d1a0b9{n}",
            project_normalized=f"/home/alice/src/clients/acme/platform/services/checkout-api-{n}",
            prompt_count=12345,
            compaction_count=123,
        )
        checkpoint = CheckpointFactory(session=session, trigger="pre_compaction")
        InjectionFactory(session=session, checkpoint=checkpoint, size_chars=9999)
    RetentionRun.objects.create(
        kind=RetentionRun.Kind.IDLE_CLOSE,
        duration_seconds=12.34,
        checkpoints_by_age=123456,
        sessions_deleted=1234,
        sessions_closed=1234,
        bytes_reclaimed=123456789,
    )
    token_create(owner=owner, name="laptop hooks", scopes=("ingest", "read", "write"))

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{live_server.url}/admin/login/")
        page.fill("#id_username", superuser.username)
        page.fill("#id_password", "correct horse battery staple")
        page.click("input[type=submit]")
        overflows = {}
        for name in LISTS:
            page.goto(f"{live_server.url}/admin/checkpoints/{name}/")
            assert page.locator("#nav-sidebar").is_visible(), name
            assert page.locator("#changelist-filter").is_visible(), name
            overflows[name] = page.evaluate(OVERFLOW)
        browser.close()
    assert overflows == {name: [0, 0] for name in LISTS}
