"""API tokens: issued here with the secret shown once, revoked in bulk."""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from checkpoints.admin.columns import (
    OWNER_CHARS,
    short_column,
    time_column,
)
from checkpoints.models import (
    ApiToken,
    Scope,
)
from checkpoints.services.tokens import token_assign_secret, token_revoke


class ApiTokenForm(forms.ModelForm[ApiToken]):
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices, widget=forms.CheckboxSelectMultiple, required=True
    )

    class Meta:
        model = ApiToken
        fields = ["owner", "name", "scopes", "revoked_at"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    form = ApiTokenForm
    list_display = ["name", "prefix", "owner_name", "scope_names", "created", "last_used", "active"]
    list_filter = ["owner"]
    search_fields = ["name", "prefix", "owner__username"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    list_select_related = ["owner"]
    actions = ["revoke_tokens"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The raw secret goes from save_model to response_add of the same request, and only
        # into that response's page: a message would carry it in the (signed, not encrypted)
        # messages cookie, or in the session table.
        self._raw_secrets: WeakKeyDictionary[HttpRequest, str] = WeakKeyDictionary()

    @admin.display(boolean=True)
    def active(self, obj: ApiToken) -> bool:
        return obj.is_active

    owner_name = short_column("owner__username", "owner", limit=OWNER_CHARS)
    created = time_column("created_at", "created")
    last_used = time_column("last_used_at", "last used")

    @admin.display(description="scopes")
    def scope_names(self, obj: ApiToken) -> str:
        known = [label for value, label in Scope.choices if value in obj.scopes]
        unknown = [str(value) for value in obj.scopes if value not in Scope.values]
        return ", ".join(known + unknown) or "-"

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if not change:
            self._raw_secrets[request] = token_assign_secret(token=obj)
        super().save_model(request, obj, form, change)

    def response_add(
        self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None
    ) -> HttpResponse:
        """The new token's secret, shown once in this response, with the way back."""
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Copy the new token",
            "token": obj,
            "raw": self._raw_secrets.pop(request),
            "scope_names": self.scope_names(obj),
        }
        return TemplateResponse(request, "admin/checkpoints/apitoken/created.html", context)

    @admin.action(description="Revoke selected tokens")
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            token_revoke(token=token)
        messages.success(request, f"Revoked {queryset.count()} token(s).")
