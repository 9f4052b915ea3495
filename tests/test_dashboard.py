"""The dashboard's pages through the test client: who may see what, what each page shows,
and how many queries each costs as the data grows."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from checkpoints.models import ApiToken, Checkpoint, Session, Trigger, hash_token
from checkpoints.services.config import config_get
from checkpoints.services.tokens import token_authenticate
from tests.factories import CheckpointFactory, InjectionFactory, SessionFactory

PASSWORD = "correct horse battery staple"  # the factories' password


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def alice_session(owner: Any) -> Any:
    session = SessionFactory(
        owner=owner,
        session_key="alice-session-1",
        git_branch="feature/checkout",
        prompt_count=12,
        compaction_count=1,
        context_percent=61.0,
    )
    start = timezone.now() - timedelta(hours=2)
    first = CheckpointFactory(
        new_prompts=5,
        session=session,
        created_at=start,
        prompt_count=5,
        current_task="Build the checkout flow",
        decisions=["Use Stripe"],
        next_steps=["Write the cart view"],
        modified_files=["shop/cart.py"],
        digest="# First\n<script>alert(1)</script>",
    )
    CheckpointFactory(
        session=session,
        parent=first,
        created_at=start + timedelta(hours=1),
        prompt_count=12,
        new_prompts=7,
        trigger=Trigger.PRE_COMPACTION,
        current_task="Build the checkout flow",
        decisions=["Use Stripe", "Keep prices in cents"],
        next_steps=["Test the payment form"],
        modified_files=["shop/cart.py", "shop/pay.py"],
    )
    InjectionFactory(session=session, source="compact", omitted=["recent prompts"])
    return session


# --- Accounts --------------------------------------------------------------------------------


def test_pages_need_login(db):
    for name in ("dashboard", "projects", "search", "activity", "tokens", "retention", "api_docs"):
        response = Client().get(reverse(name))
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login") + "?next=")


def test_a_non_staff_user_logs_in_on_the_dashboards_own_page(owner, alice_session):
    assert not owner.is_staff
    client = Client()
    page = client.get(reverse("login"))
    assert page.status_code == 200
    assert b'name="username"' in page.content
    response = client.post(reverse("login"), {"username": "alice", "password": PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == "/"
    sessions = client.get("/")
    assert b"feature/checkout" in sessions.content


def test_a_wrong_password_says_so(owner):
    response = Client().post(reverse("login"), {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert b"do not match" in response.content


def test_logout_and_password_change(owner):
    client = logged_in(owner)
    response = client.post(
        reverse("password_change"),
        {
            "old_password": PASSWORD,
            "new_password1": "a new long pass 42",
            "new_password2": "a new long pass 42",
        },
    )
    assert response.status_code == 302
    owner.refresh_from_db()
    assert owner.check_password("a new long pass 42")
    assert client.post(reverse("logout")).status_code == 302
    assert client.get("/").status_code == 302


def test_create_user_prints_a_password_that_logs_in(db, capsys):
    call_command("create_user", "carol")
    out = capsys.readouterr().out
    password = out.rsplit(": ", 1)[1].strip()
    assert Client().login(username="carol", password=password)
    call_command("create_user", "carol")
    assert "keeps its password" in capsys.readouterr().out


def test_create_user_takes_the_password_from_the_environment(db, capsys, monkeypatch):
    monkeypatch.setenv("CAROL_PASSWORD", "from the env 123")
    call_command("create_user", "carol", "--password-from-env", "CAROL_PASSWORD")
    assert "from the env 123" not in capsys.readouterr().out
    assert Client().login(username="carol", password="from the env 123")


def test_create_token_sets_up_an_account_that_can_log_in(db, capsys):
    call_command("create_token", "--user", "dave")
    lines = capsys.readouterr().out.strip().splitlines()
    password = lines[0].rsplit(": ", 1)[1].strip()
    assert Client().login(username="dave", password=password)
    assert token_authenticate(raw=lines[-1]) is not None


# --- Who sees what -----------------------------------------------------------------------------


def test_each_user_sees_only_their_own_sessions(owner, teammate, alice_session):
    SessionFactory(owner=teammate, session_key="bob-session", git_branch="bob-branch")
    alice_page = logged_in(owner).get("/").content.decode()
    bob_page = logged_in(teammate).get("/").content.decode()
    assert "feature/checkout" in alice_page
    assert "bob-branch" not in alice_page
    assert "bob-branch" in bob_page
    assert "feature/checkout" not in bob_page


def test_another_user_gets_404_for_every_object_page(teammate, alice_session):
    client = logged_in(teammate)
    checkpoint = alice_session.checkpoints.first()
    assert client.get(reverse("session_detail", args=[alice_session.pk])).status_code == 404
    for url in (
        reverse("session_delete", args=[alice_session.pk]),
        reverse("checkpoint_delete", args=[checkpoint.pk]),
    ):
        assert client.get(url).status_code == 404
        assert client.post(url).status_code == 404
    assert Session.objects.filter(pk=alice_session.pk).exists()
    assert Checkpoint.objects.filter(pk=checkpoint.pk).exists()


def test_another_user_sees_nothing_of_the_owners_on_any_list(teammate, alice_session):
    client = logged_in(teammate)
    for url in (
        "/",
        "/?owner=alice",
        "/?owner=all",
        reverse("session_rows") + "?owner=all",
        reverse("projects") + "?owner=all",
        reverse("search") + "?q=stripe&owner=all",
        reverse("activity") + "?owner=all",
    ):
        page = client.get(url).content.decode()
        assert "feature/checkout" not in page, url
        assert "/home/alice/src/shop" not in page, url
        assert "Stripe" not in page, url
    assert "0 prompts" in client.get(reverse("activity") + "?owner=alice").content.decode()


def test_bad_filters_and_pages_are_ignored_not_errors(owner, alice_session):
    client = logged_in(owner)
    for url in (
        "/?until=9999-12-31",
        "/?since=0001-01-01",
        "/?page=99999999999999999999",
        "/?page=-3",
        reverse("projects") + "?page=99999999999999999999",
        reverse("search") + "?q=stripe&page=99999999999999999999",
        reverse("session_rows") + "?page=abc",
    ):
        assert client.get(url).status_code == 200, url
    client.cookies["tz"] = "Asia/Tokyo"
    assert client.get("/?since=0001-01-01&until=9999-12-31").status_code == 200


def test_owner_filter_is_for_superusers_only(owner, teammate, superuser, alice_session):
    SessionFactory(owner=teammate, git_branch="bob-branch")
    bob = logged_in(teammate).get("/?owner=all").content.decode()
    assert "feature/checkout" not in bob
    assert 'name="owner"' not in bob
    root = logged_in(superuser)
    assert "No sessions yet" in root.get("/").content.decode()
    everyone = root.get("/?owner=all").content.decode()
    assert "feature/checkout" in everyone
    assert "bob-branch" in everyone
    only_alice = root.get("/?owner=alice").content.decode()
    assert "feature/checkout" in only_alice
    assert "bob-branch" not in only_alice
    assert root.get(reverse("session_detail", args=[alice_session.pk])).status_code == 200


# --- Sessions ----------------------------------------------------------------------------------


def test_sessions_list_columns_and_links(owner, alice_session):
    page = logged_in(owner).get("/").content.decode()
    assert reverse("session_detail", args=[alice_session.pk]) in page
    for text in ("feature/checkout", "Claude Code", "61%", "/home/alice/src/shop"):
        assert text in page
    row = re.search(r"<tr class=\"live\">(.*?)</tr>", page, re.S)
    assert row is not None
    numbers = re.findall(r'class="num">(\d+)<', row.group(1))
    assert numbers == ["12", "2", "1"]  # prompts, checkpoints, compactions


def test_sessions_filters(owner, alice_session):
    SessionFactory(
        owner=owner,
        project_normalized="/src/other",
        harness="codex",
        started_at=timezone.now() - timedelta(days=11),
        ended_at=timezone.now() - timedelta(days=10),
        git_branch="other-branch",
        last_activity_at=timezone.now() - timedelta(days=10),
    )
    client = logged_in(owner)

    def branches(query: str) -> set[str]:
        page = client.get("/?" + query).content.decode()
        return {b for b in ("feature/checkout", "other-branch") if b in page}

    assert branches("") == {"feature/checkout", "other-branch"}
    assert branches("harness=codex") == {"other-branch"}
    assert branches("state=live") == {"feature/checkout"}
    assert branches("state=ended") == {"other-branch"}
    assert branches("project=/src/other") == {"other-branch"}
    since = (timezone.localdate() - timedelta(days=1)).isoformat()
    assert branches(f"since={since}") == {"feature/checkout"}
    assert branches(f"until={since}") == {"other-branch"}
    assert branches("since=not-a-date&harness=bogus&state=weird") == {
        "feature/checkout",
        "other-branch",
    }


def test_sessions_are_paginated(owner):
    now = timezone.now()
    for i in range(55):
        SessionFactory(
            owner=owner, git_branch=f"b-{i:02d}", last_activity_at=now - timedelta(minutes=i)
        )
    client = logged_in(owner)
    # The branch cells: a session key is a random UUID, and "b-50" can occur in one.
    first = client.get("/").content.decode()
    assert "<code>b-00</code>" in first
    assert "<code>b-49</code>" in first
    assert "<code>b-50</code>" not in first
    assert "Page 1 of 2" in first
    second = client.get("/?page=2").content.decode()
    assert "<code>b-50</code>" in second
    assert "<code>b-54</code>" in second
    assert "<code>b-00</code>" not in second


def test_live_rows_poll_a_fragment(owner, alice_session):
    page = logged_in(owner).get("/").content.decode()
    poll = re.search(r'data-poll="([^"]+)"', page)
    assert poll is not None
    Session.objects.filter(pk=alice_session.pk).update(prompt_count=99)
    fragment = logged_in(owner).get(poll.group(1).replace("&amp;", "&"))
    assert fragment.status_code == 200
    body = fragment.content.decode()
    assert "<html" not in body
    assert ">99<" in body


def test_empty_state_says_what_to_do(owner):
    page = logged_in(owner).get("/").content.decode()
    assert "No sessions yet" in page
    assert reverse("tokens") in page
    assert "install_hooks claude-code --url http://testserver" in page


# --- Session detail ----------------------------------------------------------------------------


def test_session_detail_shows_timeline_diff_injections_and_recovery(owner, alice_session):
    page = logged_in(owner).get(reverse("session_detail", args=[alice_session.pk])).content.decode()
    # the diff between the two checkpoints
    assert "<ins>+ Keep prices in cents</ins>" in page
    assert "<ins>+ shop/pay.py</ins>" in page
    assert "<del>\u2212 Write the cart view</del>" in page
    assert "<ins>+ Test the payment form</ins>" in page
    assert "(7 prompts)" in page
    # trigger badges
    assert "trigger-pre_compaction" in page
    assert "trigger-periodic" in page
    # digests load on demand, from their own URL
    first = alice_session.checkpoints.order_by("created_at").first()
    assert reverse("checkpoint_digest", args=[first.pk]) in page
    # the injection
    assert "compact" in page
    assert "recent prompts" in page
    # the recovery context as it would be injected now, with its copy button
    assert "## Session Recovery Context" in page
    assert 'data-copy="recovery-text"' in page
    assert "Keep prices in cents" in page


def test_a_digest_is_markdown_with_raw_html_and_images_left_out(owner, teammate, alice_session):
    first = alice_session.checkpoints.order_by("created_at").first()
    first.digest = "# First\n<script>alert(1)</script>\n\n![x](https://tracker.test/p.png)"
    first.save()
    url = reverse("checkpoint_digest", args=[first.pk])
    html = logged_in(owner).get(url).content.decode()
    assert "<h1>First</h1>" in html
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img" not in html
    assert logged_in(teammate).get(url).status_code == 404


def test_session_detail_shows_recovery_without_recording_it(owner, alice_session):
    before = alice_session.injections.count()
    logged_in(owner).get(reverse("session_detail", args=[alice_session.pk]))
    assert alice_session.injections.count() == before


def test_session_detail_links_the_lineage(owner, alice_session):
    later = SessionFactory(
        owner=owner, session_key="alice-session-2", previous_session=alice_session
    )
    client = logged_in(owner)
    first = client.get(reverse("session_detail", args=[alice_session.pk])).content.decode()
    assert reverse("session_detail", args=[later.pk]) in first
    second = client.get(reverse("session_detail", args=[later.pk])).content.decode()
    assert reverse("session_detail", args=[alice_session.pk]) in second


# --- Deletes -----------------------------------------------------------------------------------


def test_deleting_a_checkpoint_asks_then_deletes(owner, alice_session):
    checkpoint = alice_session.checkpoints.order_by("created_at").first()
    client = logged_in(owner)
    url = reverse("checkpoint_delete", args=[checkpoint.pk])
    confirm = client.get(url)
    assert confirm.status_code == 200
    assert b"cannot be undone" in confirm.content
    assert Checkpoint.objects.filter(pk=checkpoint.pk).exists()
    response = client.post(url)
    assert response.status_code == 302
    assert not Checkpoint.objects.filter(pk=checkpoint.pk).exists()
    assert alice_session.checkpoints.count() == 1


def test_deleting_a_session_takes_its_checkpoints(owner, alice_session):
    client = logged_in(owner)
    response = client.post(reverse("session_delete", args=[alice_session.pk]))
    assert response.status_code == 302
    assert not Session.objects.filter(pk=alice_session.pk).exists()
    assert not Checkpoint.objects.filter(session_key="alice-session-1").exists()


def test_deletes_need_the_csrf_token(owner, alice_session):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.post(reverse("session_delete", args=[alice_session.pk])).status_code == 403
    assert Session.objects.filter(pk=alice_session.pk).exists()


# --- Tokens ------------------------------------------------------------------------------------


def test_creating_a_token_shows_it_once_and_stores_only_its_hash(owner):
    client = logged_in(owner)
    response = client.post(reverse("tokens"), {"name": "laptop", "scopes": ["ingest", "read"]})
    assert response.status_code == 200
    page = response.content.decode()
    raw = re.search(r'<pre id="new-token">(sig_[^<]+)</pre>', page)
    assert raw is not None
    token = ApiToken.objects.get(owner=owner, name="laptop")
    assert token.token_hash == hash_token(raw.group(1))
    assert raw.group(1) not in str(ApiToken.objects.filter(pk=token.pk).values().first())
    assert all(raw.group(1) not in morsel.value for morsel in response.cookies.values())
    assert "python manage.py install_hooks claude-code --url http://testserver" in page
    assert f"export SIGNET_TOKEN={raw.group(1)}" in page
    again = client.get(reverse("tokens")).content.decode()
    assert raw.group(1) not in again
    assert token.prefix in again
    assert "Ingest (hooks), Read" in again


def test_the_suggested_token_may_write_the_agents_digests(owner):
    """The install registers the MCP server, whose session_digest (which the pressure
    reminders ask for) needs write: the form proposes every scope Claude Code uses."""
    page = logged_in(owner).get(reverse("tokens")).content.decode()
    checked = re.findall(r'<input type="checkbox" name="scopes" value="(\w+)"[^>]*checked', page)
    assert sorted(checked) == ["ingest", "read", "write"]
    assert ".venv/bin/python manage.py install_hooks claude-code --url http://testserver" in page


def test_a_token_form_without_scopes_is_refused(owner):
    response = logged_in(owner).post(reverse("tokens"), {"name": "x"})
    assert response.status_code == 400
    assert not ApiToken.objects.filter(owner=owner).exists()


def test_revoking_a_token(owner, teammate, make_token):
    raw = make_token(owner, "ingest")
    token = ApiToken.objects.get(owner=owner)
    assert logged_in(teammate).post(reverse("token_revoke", args=[token.pk])).status_code == 404
    assert token_authenticate(raw=raw) is not None
    assert logged_in(owner).get(reverse("token_revoke", args=[token.pk])).status_code == 405
    assert logged_in(owner).post(reverse("token_revoke", args=[token.pk])).status_code == 302
    assert token_authenticate(raw=raw) is None


def test_tokens_page_lists_only_the_viewers_tokens(owner, teammate, make_token):
    make_token(owner, "read", name="alice-laptop")
    make_token(teammate, "read", name="bob-laptop")
    page = logged_in(owner).get(reverse("tokens")).content.decode()
    assert "alice-laptop" in page
    assert "bob-laptop" not in page


# --- Other pages -------------------------------------------------------------------------------


def test_projects_page_has_one_row_per_project_with_its_recovery_context(owner, alice_session):
    SessionFactory(owner=owner, project_normalized="/home/alice/src/shop")
    SessionFactory(owner=owner, project_normalized="/src/blog")
    page = logged_in(owner).get(reverse("projects")).content.decode()
    assert page.count("/home/alice/src/shop</a>") == 1
    assert "/src/blog</a>" in page
    assert "## Session Recovery Context" in page
    assert "2</td>" in page.replace(" ", "") or ">2 <" in page


def test_activity_draws_accessible_svg(owner, alice_session):
    page = logged_in(owner).get(reverse("activity")).content.decode()
    assert page.count('role="img"') == 4
    today = timezone.localdate().isoformat()
    assert "Prompts per day" in page
    assert f"{today}: 1 injections" in page
    assert "1 pre-compaction" in page
    assert "12 prompts" in page


def test_retention_page_and_its_preview(owner, superuser):
    page = logged_in(owner).get(reverse("retention")).content.decode()
    assert "Checkpoints kept" in page
    assert "Preview (dry run)" not in page
    assert (
        "What the next prune" not in logged_in(owner).get("/retention/?preview=1").content.decode()
    )
    root = logged_in(superuser)
    assert "Preview (dry run)" in root.get(reverse("retention")).content.decode()
    preview = root.get(reverse("retention") + "?preview=1").content.decode()
    assert "0 checkpoints, 0 sessions" in preview


def test_api_docs_serve_swagger_from_our_static_files(owner):
    page = logged_in(owner).get(reverse("api_docs")).content.decode()
    assert "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    assert "cdn" not in page.lower()
    assert reverse("api:schema") in page


def test_favicon(db):
    assert 'rel="icon"' in Client().get(reverse("login")).content.decode()
    response = Client().get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"].endswith("favicon.svg")


def test_times_appear_in_the_viewers_time_zone(owner):
    started = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
    session = SessionFactory(owner=owner, started_at=started, last_activity_at=started)
    client = logged_in(owner)
    url = reverse("session_detail", args=[session.pk])
    assert "12:00 UTC" in client.get(url).content.decode()
    client.cookies["tz"] = "Asia/Tokyo"
    assert "21:00 JST" in client.get(url).content.decode()
    client.cookies["tz"] = "../../etc/passwd"
    assert "12:00 UTC" in client.get(url).content.decode()


# --- Query counts ------------------------------------------------------------------------------


def _queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return len(captured.captured_queries)


def test_list_and_detail_query_counts_do_not_grow_with_rows(owner):
    config_get()  # the settings row and its cache entry exist, as on a running service
    client = logged_in(owner)
    session = SessionFactory(owner=owner)
    CheckpointFactory(session=session, prompt_count=1)
    InjectionFactory(session=session)
    counts_small = {
        "list": _queries(client, "/"),
        "detail": _queries(client, reverse("session_detail", args=[session.pk])),
        "projects": _queries(client, reverse("projects")),
        "activity": _queries(client, reverse("activity")),
    }
    for i in range(30):
        other = SessionFactory(
            owner=owner, project_normalized=f"/src/p{i}", previous_session=session
        )
        CheckpointFactory(session=other)
        CheckpointFactory(session=session, prompt_count=i + 2, decisions=[f"d{i}"])
        InjectionFactory(session=session)
    counts_large = {
        "list": _queries(client, "/"),
        "detail": _queries(client, reverse("session_detail", args=[session.pk])),
        "projects": _queries(client, reverse("projects")),
        "activity": _queries(client, reverse("activity")),
    }
    assert counts_small == counts_large
    # Pinned. Every page: the login session, the user. Then
    #   list: the count, the page of sessions, their checkpoint counts, the project menu;
    #   detail: the session, its timeline, its injections, the recovery look-up, the
    #           lineage;
    #   projects: the page of projects, their latest checkpoints;
    #   activity: checkpoints per hour and trigger, injections per hour.
    # (The continuity config is this process's copy: SIGNET_CONFIG_LOCAL_SECONDS.)
    assert counts_large == {"list": 6, "detail": 7, "projects": 4, "activity": 4}


def test_a_long_timeline_shows_the_newest_and_diffs_the_oldest_shown(owner, monkeypatch):
    monkeypatch.setattr("checkpoints.dashboard.views.TIMELINE_LIMIT", 2)
    session = SessionFactory(owner=owner)
    start = timezone.now() - timedelta(hours=1)
    for i in range(4):
        CheckpointFactory(
            session=session,
            created_at=start + timedelta(minutes=i),
            decisions=[f"decision {j}" for j in range(i + 1)],
        )
    page = logged_in(owner).get(reverse("session_detail", args=[session.pk])).content.decode()
    assert 'Checkpoints <span class="muted">(4)</span>' in page
    assert "Showing the newest 2." in page
    assert "First checkpoint" not in page
    assert "<ins>+ decision 2</ins>" in page  # the oldest shown, against the one before it
    assert "<ins>+ decision 0</ins>" not in page
