from django.urls import path

from checkpoints.api.hooks import HookIngestApi
from checkpoints.api.views import WhoAmIApi

app_name = "api"

urlpatterns = [
    path("whoami/", WhoAmIApi.as_view(), name="whoami"),
    path("hooks/<slug:harness>/", HookIngestApi.as_view(), name="hook-ingest"),
]
