"""The dashboard in a real browser: Playwright driving the system's headless Chromium
(see ``tests/browser.py`` for which, and when these tests skip)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from checkpoints.models import ApiToken, Trigger
from tests.browser import CHROMIUM, SCREENSHOTS, requires_browser
from tests.factories import CheckpointFactory, InjectionFactory, SessionFactory, UserFactory

PASSWORD = "correct horse battery staple"
PHONE = {"width": 375, "height": 812}


pytestmark = [requires_browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls
    # between page actions are still plain synchronous code.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    print(f"\nbrowser tests: screenshots in {SCREENSHOTS}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def alice(db: Any) -> Any:
    """A user with a password and no staff rights, with a session of several checkpoints."""
    user = UserFactory(username="alice")
    session = SessionFactory(
        owner=user, session_key="alice-live-session", git_branch="feature/checkout", prompt_count=14
    )
    start = timezone.now() - timedelta(hours=3)
    first = CheckpointFactory(
        session=session,
        created_at=start,
        prompt_count=4,
        new_prompts=4,
        current_task="Build the checkout flow",
        decisions=["Use Stripe"],
        next_steps=["Write the cart view"],
        modified_files=["shop/cart.py"],
        digest="## Checkout\nThe **cart** works; payment next.",
    )
    second = CheckpointFactory(
        session=session,
        parent=first,
        created_at=start + timedelta(hours=1),
        prompt_count=9,
        new_prompts=5,
        current_task="Build the checkout flow",
        decisions=["Use Stripe", "Keep prices in integer cents"],
        next_steps=["Test the payment form"],
        modified_files=["shop/cart.py", "shop/payment.py"],
    )
    CheckpointFactory(
        session=session,
        parent=second,
        trigger=Trigger.PRE_COMPACTION,
        created_at=start + timedelta(hours=2),
        prompt_count=14,
        new_prompts=5,
        current_task="Wire the payment webhook",
        decisions=["Use Stripe", "Keep prices in integer cents"],
        next_steps=["Verify the webhook signature"],
        modified_files=["shop/cart.py", "shop/payment.py", "shop/webhooks.py"],
    )
    InjectionFactory(session=session, source="compact", omitted=["recent prompts"])
    return user


def _login(browser: Any, live_server: Any, **context: Any) -> Any:
    page = browser.new_context(**context).new_page()
    page.goto(f"{live_server.url}/")
    assert "/accounts/login/" in page.url
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    return page


def _no_sideways_scroll(page: Any) -> None:
    overflow = page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, f"{page.url} scrolls sideways by {overflow}px at 375px"


def test_a_user_follows_a_session_from_the_list_to_its_recovery_context(
    browser, live_server, alice
):
    page = _login(browser, live_server, viewport={"width": 1280, "height": 900})
    assert page.get_by_role("link", name="Log out").count() == 0  # a button, in a form
    page.screenshot(path=str(SCREENSHOTS / "sessions.png"), full_page=True)
    page.locator("#sessions a", has_text="/home/alice/src/shop").first.click()
    page.wait_for_selector("#timeline-h")
    # the diff between consecutive checkpoints
    diff = page.locator(".diff").first.inner_text()
    assert "Wire the payment webhook" in diff
    assert "+ shop/webhooks.py" in diff
    assert "\u2212 Test the payment form" in diff
    # the injections
    injections = page.locator("section[aria-labelledby=injections-h]").inner_text()
    assert "compact" in injections
    assert "recent prompts" in injections
    # the recovery context, and its copy button
    recovery = page.locator("#recovery-text").inner_text()
    assert recovery.startswith("## Session Recovery Context")
    assert "Verify the webhook signature" in recovery
    page.click("button.copy")
    page.wait_for_selector("button.copy:has-text('Copied')")
    # a digest rendered as Markdown
    page.locator("li.checkpoint").last.locator("summary").click()
    page.wait_for_selector(".markdown strong")
    assert page.locator(".markdown strong").first.inner_text() == "cart"
    page.screenshot(path=str(SCREENSHOTS / "session.png"), full_page=True)


def test_search_finds_a_checkpoint_with_a_highlighted_snippet(browser, live_server, alice):
    page = _login(browser, live_server)
    page.click("nav >> text=Search")
    page.fill("#q", "webhook signature")
    page.press("#q", "Enter")
    page.wait_for_selector(".hits li")
    marks = page.locator(".snippet mark").all_inner_texts()
    assert any(mark.lower().startswith("webhook") for mark in marks)
    page.screenshot(path=str(SCREENSHOTS / "search.png"), full_page=True)
    page.locator(".hits a").first.click()
    page.wait_for_selector("#timeline-h")


def test_a_user_creates_then_revokes_a_token(browser, live_server, alice):
    page = _login(browser, live_server)
    page.click("nav >> text=Tokens")
    page.fill("#id_name", "laptop")
    page.click("text=Create token")
    raw = page.locator("#new-token").inner_text().strip()
    assert raw.startswith("sig_")
    assert f"--url {live_server.url}" in page.locator("#install-cmd").inner_text()
    page.screenshot(path=str(SCREENSHOTS / "token-created.png"), full_page=True)
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("#token-list button:has-text('Revoke')")
    page.wait_for_selector("#token-list .badge:has-text('revoked')")
    assert ApiToken.objects.get(owner=alice, name="laptop").revoked_at is not None


def test_times_follow_the_browsers_time_zone(browser, live_server, alice):
    page = _login(browser, live_server, timezone_id="Asia/Tokyo")
    page.locator("#sessions a").first.click()
    page.wait_for_selector("#timeline-h")
    started = page.locator("dt:has-text('Started') + dd").inner_text()
    assert started.endswith("JST"), started


def test_pages_fit_a_375px_phone(browser, live_server, alice):
    page = _login(browser, live_server, viewport=PHONE)
    session_url = page.locator("#sessions a").first.get_attribute("href")
    for name, path in [
        ("sessions", "/"),
        ("session", session_url),
        ("projects", "/projects/"),
        ("search", "/search/?q=checkout"),
        ("activity", "/activity/"),
        ("tokens", "/tokens/"),
        ("retention", "/retention/"),
        ("api", "/api/docs/"),
    ]:
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
        _no_sideways_scroll(page)
        nav = page.locator("nav[aria-label=Main]").bounding_box()
        assert nav is not None
        assert nav["height"] < 90, f"{path}: the menu wraps into {nav['height']}px"
        page.screenshot(path=str(SCREENSHOTS / f"phone-{name}.png"), full_page=True)
