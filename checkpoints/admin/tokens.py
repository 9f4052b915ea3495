"""API tokens: issued here with the secret shown once, revoked in bulk."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

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
        if change:
            super().save_model(request, obj, form, change)
            return
        raw = token_assign_secret(token=obj)
        super().save_model(request, obj, form, change)
        messages.warning(request, f"Token created. Copy it now, it will not be shown again: {raw}")

    @admin.action(description="Revoke selected tokens")
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            token_revoke(token=token)
        messages.success(request, f"Revoked {queryset.count()} token(s).")
