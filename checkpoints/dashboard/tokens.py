"""The tokens page: create (the raw token is shown in that one response, never stored or put
in a cookie), list, revoke; and the exact ``install_hooks`` command to paste."""

from __future__ import annotations

import shlex

from django import forms
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from checkpoints.models import ApiToken, Scope
from checkpoints.services.tokens import token_create, token_revoke
from hooks.install import DEFAULT_TOKEN_ENV


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, initial="laptop", help_text="To recognise it by.")
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices,
        initial=[Scope.INGEST, Scope.READ, Scope.WRITE],
        widget=forms.CheckboxSelectMultiple,
        help_text=(
            "Claude Code needs all three: ingest for the hooks, read for the MCP tools, and "
            "write for the agent's own checkpoints (session_digest)."
        ),
    )


def install_command(request: HttpRequest) -> str:
    """The command that installs the Claude Code hooks and MCP server pointing at this
    server, as the README gives it: run from a checkout, with its virtualenv's Python."""
    url = request.build_absolute_uri("/").rstrip("/")
    return f".venv/bin/python manage.py install_hooks claude-code --url {shlex.quote(url)}"


def _user(request: HttpRequest) -> User:
    assert isinstance(request.user, User)  # login_required
    return request.user


@never_cache
@require_http_methods(["GET", "HEAD", "POST"])
@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    """List the viewer's tokens; a POST creates one and shows it once in the response."""
    user = _user(request)
    raw = None
    status = 200
    if request.method == "POST":
        form = TokenForm(request.POST)
        if form.is_valid():
            _, raw = token_create(
                owner=user, name=form.cleaned_data["name"], scopes=form.cleaned_data["scopes"]
            )
            form = TokenForm()
        else:
            status = 400
    else:
        form = TokenForm()
    rows = ApiToken.objects.filter(owner=user).order_by("revoked_at", "-created_at")
    return render(
        request,
        "dashboard/tokens.html",
        {
            "form": form,
            "raw": raw,
            "tokens": rows,
            "scope_labels": dict(Scope.choices),
            "token_env": DEFAULT_TOKEN_ENV,
            "export_command": f"export {DEFAULT_TOKEN_ENV}={shlex.quote(raw)}" if raw else "",
            "install_command": install_command(request),
        },
        status=status,
    )


@require_POST
@login_required
def token_revoke_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Revoke one of the viewer's own tokens: requests carrying it get 401 from now on."""
    token = ApiToken.objects.filter(owner=_user(request), pk=pk).first()
    if token is None:
        raise Http404("No such token.")
    token_revoke(token=token)
    return HttpResponseRedirect(reverse("tokens"))
