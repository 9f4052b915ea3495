"""The dashboard's pages. Login is required everywhere; each user sees their own data, and a
superuser may choose another user's, or everyone's, with ``?owner=``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from functools import cached_property
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_safe

from checkpoints.dashboard import selectors
from checkpoints.dashboard.charts import Series, bar_chart
from checkpoints.dashboard.diff import checkpoint_diff
from checkpoints.dashboard.tokens import install_command
from checkpoints.markdown import render_markdown
from checkpoints.models import Harness, Trigger
from checkpoints.search import checkpoint_search
from checkpoints.selectors import retention_overview
from checkpoints.services import store
from checkpoints.services.config import config_get
from checkpoints.services.recovery import recovery_prepare, recovery_render
from checkpoints.services.retention import RULE_TITLES, RuleTally, prune_preview
from hooks.install import DEFAULT_TOKEN_ENV

SESSIONS_PER_PAGE = 50
TIMELINE_LIMIT = 100
INJECTIONS_SHOWN = 50
PROJECTS_PER_PAGE = 25
SEARCH_PER_PAGE = 20
ACTIVITY_DAYS = 30
OWNER_CHOICES = 200
MAX_PAGE = 10_000  # deeper page numbers are clamped (and would overflow SQLite's integers)
OLDEST_DAY = date(1970, 1, 1)  # date filters outside these are ignored
NEWEST_DAY = date(9000, 1, 1)


@dataclass(frozen=True)
class Viewer:
    """Whose data a request shows: ``owner`` None means every user's (superusers only)."""

    user: User
    owner: User | None
    param: str  # the ``owner`` query value to carry in links ("" for the viewer's own)

    @property
    def reach(self) -> User | None:
        """Whose single objects (a session, a checkpoint) the viewer may open by link."""
        return None if self.user.is_superuser else self.user

    @cached_property
    def choices(self) -> list[str]:
        """The user names a superuser's owner menu offers (empty for anyone else)."""
        if not self.user.is_superuser:
            return []
        names = list(
            User.objects.order_by("username").values_list("username", flat=True)[:OWNER_CHOICES]
        )
        if self.param and self.param != "all" and self.param not in names:
            names.append(self.param)
        return names


def viewer_for(request: HttpRequest) -> Viewer:
    """The request's viewer. ``?owner=`` is honoured for superusers only; for anyone else it
    is ignored, so a link cannot widen what they see."""
    user = request.user
    assert isinstance(user, User)  # login_required
    wanted = request.GET.get("owner", "").strip()
    if not user.is_superuser or not wanted or wanted == user.get_username():
        return Viewer(user=user, owner=user, param="")
    if wanted == "all":
        return Viewer(user=user, owner=None, param="all")
    other = User.objects.filter(username=wanted).first()
    if other is None:
        return Viewer(user=user, owner=user, param="")
    return Viewer(user=user, owner=other, param=wanted)


def _day(value: str) -> date | None:
    """A filter's ISO date, or None when it is absent, malformed or out of range."""
    try:
        day = date.fromisoformat(value) if value else None
    except ValueError:
        return None
    return day if day is not None and OLDEST_DAY <= day <= NEWEST_DAY else None


def _page_number(request: HttpRequest) -> int:
    try:
        return min(max(1, int(request.GET.get("page", "1"))), MAX_PAGE)
    except ValueError:
        return 1


def _kept_params(request: HttpRequest) -> list[tuple[str, str]]:
    """The query's parameters but the owner and the page: what the owner menu carries."""
    return [(key, str(value)) for key, value in request.GET.items() if key not in ("owner", "page")]


def _session_filters(request: HttpRequest) -> selectors.SessionFilters:
    harness = request.GET.get("harness", "")
    state = request.GET.get("state", "")
    return selectors.SessionFilters(
        project=request.GET.get("project", "")[:1024],
        harness=harness if harness in Harness.values else "",
        state=state if state in ("live", "ended") else "",
        since=_day(request.GET.get("since", "")),
        until=_day(request.GET.get("until", "")),
    )


def _sessions_context(request: HttpRequest) -> dict[str, Any]:
    viewer = viewer_for(request)
    filters = _session_filters(request)
    sessions = selectors.sessions_page_queryset(
        owner=viewer.owner, filters=filters, zone=timezone.get_current_timezone()
    )
    page = Paginator(sessions, SESSIONS_PER_PAGE).get_page(_page_number(request))
    rows = list(page.object_list)
    selectors.sessions_count_checkpoints(sessions=rows)
    kept = {
        key: value
        for key, value in request.GET.items()
        if key in ("project", "harness", "state", "since", "until", "owner") and value
    }
    return {
        "viewer": viewer,
        "filters": filters,
        "page": page,
        "sessions": rows,
        "query": urlencode(kept),
        "has_live": any(session.ended_at is None for session in rows),
        # Page 1 polls whatever it shows, so a session that starts meanwhile appears too.
        "poll": page.number == 1 or any(session.ended_at is None for session in rows),
        "filtered": bool(kept.keys() - {"owner"}),
    }


@require_safe
@login_required
def sessions(request: HttpRequest) -> HttpResponse:
    """Live and ended sessions, filtered and paginated."""
    context = _sessions_context(request)
    context.update(
        projects=selectors.project_choices(owner=context["viewer"].owner),
        harnesses=Harness.choices,
        owner_menu=_kept_params(request),
        install_command=install_command(request),
        token_env=DEFAULT_TOKEN_ENV,
    )
    return render(request, "dashboard/sessions.html", context)


@require_safe
@login_required
def session_rows(request: HttpRequest) -> HttpResponse:
    """The sessions table's rows alone: what the list polls to keep live rows current."""
    return render(request, "dashboard/_session_rows.html", _sessions_context(request))


@require_safe
@login_required
def session_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A session: lineage, checkpoint timeline with diffs, injections, recovery context now."""
    viewer = viewer_for(request)
    session = selectors.session_for_page(owner=viewer.reach, pk=pk)
    if session is None:
        raise Http404("No such session.")
    found = selectors.session_timeline(session=session, limit=TIMELINE_LIMIT)
    shown = found.checkpoints
    timeline = [
        (checkpoint, checkpoint_diff(before=shown[i - 1] if i else found.before, after=checkpoint))
        for i, checkpoint in enumerate(shown)
    ]
    timeline.reverse()  # newest first on the page
    injections, injection_total = selectors.session_injections(
        session=session, limit=INJECTIONS_SHOWN
    )
    config = config_get()
    now = timezone.now()
    prepared = recovery_prepare(owner=session.owner, session=session, config=config, now=now)
    return render(
        request,
        "dashboard/session_detail.html",
        {
            "viewer": viewer,
            "session": session,
            "continuations": selectors.session_continuations(session=session),
            "timeline": timeline,
            "checkpoint_total": found.total,
            "timeline_cut": found.total > len(shown),
            "injections": injections,
            "injection_total": injection_total,
            "recovery": prepared[1] if prepared else None,
            "recovery_match": prepared[0] if prepared else None,
        },
    )


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
def session_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """Confirm, then delete a whole session with its checkpoints and injections."""
    viewer = viewer_for(request)
    session = selectors.session_for_page(owner=viewer.reach, pk=pk)
    if session is None:
        raise Http404("No such session.")
    if request.method == "POST":
        store.session_delete(session=session)
        return HttpResponseRedirect(reverse("dashboard"))
    return render(
        request,
        "dashboard/confirm_delete.html",
        {
            "what": f"session {session.session_key}",
            "detail": "its checkpoints and the record of its injections go with it",
            "cancel": reverse("session_detail", args=[session.pk]),
        },
    )


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
def checkpoint_delete(request: HttpRequest, pk: str) -> HttpResponse:
    """Confirm, then delete one checkpoint (injections made from it keep their text)."""
    viewer = viewer_for(request)
    checkpoint = selectors.checkpoint_for_page(owner=viewer.reach, pk=str(pk))
    if checkpoint is None:
        raise Http404("No such checkpoint.")
    back = reverse("session_detail", args=[checkpoint.session_id])
    if request.method == "POST":
        store.checkpoints_delete(
            owner=checkpoint.owner, session_key=checkpoint.session_key, checkpoint_id=str(pk)
        )
        return HttpResponseRedirect(back)
    return render(
        request,
        "dashboard/confirm_delete.html",
        {
            "what": f"the {checkpoint.get_trigger_display().lower()} checkpoint of "
            f"{timezone.localtime(checkpoint.created_at):%Y-%m-%d %H:%M}",
            "detail": "injections made from it keep their text",
            "cancel": back,
        },
    )


@require_safe
@login_required
def checkpoint_digest(request: HttpRequest, pk: str) -> HttpResponse:
    """One checkpoint's digest as HTML: fetched when its section is opened, so a long
    timeline does not render every digest up front."""
    checkpoint = selectors.checkpoint_for_page(owner=viewer_for(request).reach, pk=str(pk))
    if checkpoint is None:
        raise Http404("No such checkpoint.")
    return HttpResponse(render_markdown(checkpoint.digest) or "<p>(no digest)</p>")


@require_safe
@login_required
def projects(request: HttpRequest) -> HttpResponse:
    """One row per normalised project with its current recovery context."""
    viewer = viewer_for(request)
    page = _page_number(request)
    rows, more = selectors.projects_page(
        owner=viewer.owner, offset=(page - 1) * PROJECTS_PER_PAGE, limit=PROJECTS_PER_PAGE
    )
    config = config_get()
    now = timezone.now()
    contexts = {
        row.project: recovery_render(
            checkpoint=row.latest,
            match="project",
            config=config,
            now=now,
            # What a new session in the project gets: the compaction summary travels too.
            compact_summary=getattr(row.latest, "session_summary", ""),
        ).text
        for row in rows
        if row.latest is not None and now - row.latest.created_at <= config.recovery_window
    }
    return render(
        request,
        "dashboard/projects.html",
        {
            "viewer": viewer,
            "rows": [(row, contexts.get(row.project)) for row in rows],
            "page": page,
            "more": more,
            "window_minutes": config.recovery_window_minutes,
            "owner_menu": _kept_params(request),
        },
    )


@require_safe
@login_required
def search(request: HttpRequest) -> HttpResponse:
    """Full text over digests and structured fields, newest matches first."""
    viewer = viewer_for(request)
    query = request.GET.get("q", "").strip()[:200]
    page = _page_number(request)
    hits = (
        checkpoint_search(
            owner=viewer.owner,
            query=query,
            limit=SEARCH_PER_PAGE + 1,
            offset=(page - 1) * SEARCH_PER_PAGE,
        )
        if query
        else []
    )
    return render(
        request,
        "dashboard/search.html",
        {
            "viewer": viewer,
            "q": query,
            "hits": hits[:SEARCH_PER_PAGE],
            "more": len(hits) > SEARCH_PER_PAGE,
            "page": page,
            "query": urlencode({"q": query, **({"owner": viewer.param} if viewer.param else {})}),
            "owner_menu": _kept_params(request),
        },
    )


@require_safe
@login_required
def activity(request: HttpRequest) -> HttpResponse:
    """Prompts, checkpoints by trigger, compactions and injections per day, as SVG bars."""
    viewer = viewer_for(request)
    zone = timezone.get_current_timezone()
    data = selectors.activity_by_day(
        owner=viewer.owner, days=ACTIVITY_DAYS, today=timezone.localdate(), zone=zone
    )
    labels = dict(Trigger.choices)
    charts = [
        bar_chart(
            title="Prompts per day", days=data.days, series=[Series("Prompts", data.prompts)]
        ),
        bar_chart(
            title="Checkpoints per day, by trigger",
            days=data.days,
            series=[Series(labels.get(t, t), values) for t, values in data.checkpoints.items()],
        ),
        bar_chart(
            title="Compactions per day",
            days=data.days,
            series=[Series("Compactions", data.compactions)],
        ),
        bar_chart(
            title="Injections per day",
            days=data.days,
            series=[Series("Injections", data.injections)],
        ),
    ]
    totals = {
        "prompts": sum(data.prompts),
        "checkpoints": sum(sum(v) for v in data.checkpoints.values()),
        "compactions": sum(data.compactions),
        "injections": sum(data.injections),
    }
    return render(
        request,
        "dashboard/activity.html",
        {
            "viewer": viewer,
            "charts": charts,
            "totals": totals,
            "days": ACTIVITY_DAYS,
            "owner_menu": _kept_params(request),
        },
    )


@require_safe
@login_required
def retention(request: HttpRequest) -> HttpResponse:
    """The retention policy, the next and last runs; superusers also get the dry-run preview
    (it names every owner's projects)."""
    viewer = viewer_for(request)
    preview = None
    rules: list[tuple[str, RuleTally, list[tuple[str, int]]]] = []
    if viewer.user.is_superuser and request.GET.get("preview"):
        preview = prune_preview()
        rules = [
            (RULE_TITLES[rule], tally, tally.by_project.most_common(10))
            for rule, tally in preview.rules.items()
        ]
    return render(
        request,
        "dashboard/retention.html",
        {
            "viewer": viewer,
            "config": config_get(),
            "overview": retention_overview(),
            "preview": preview,
            "rules": rules,
        },
    )


@require_safe
@login_required
def api_docs(request: HttpRequest) -> HttpResponse:
    """The API's schema in Swagger UI, served from our own static files."""
    return render(request, "dashboard/api_docs.html", {"schema_url": reverse("api:schema")})
