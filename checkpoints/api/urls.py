from django.urls import path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import AllowAny

import checkpoints.api.schema  # noqa: F401  (registers the bearer scheme)
from checkpoints.api import resources
from checkpoints.api.exports import SessionExportApi
from checkpoints.api.hooks import HookIngestApi
from checkpoints.api.views import WhoAmIApi

app_name = "api"

urlpatterns = [
    path("whoami/", WhoAmIApi.as_view(), name="whoami"),
    path("hooks/<slug:harness>/", HookIngestApi.as_view(), name="hook-ingest"),
    # For a harness whose hooks cannot name the event in the body (its adapter says so).
    path(
        "hooks/<slug:harness>/<slug:event_name>/",
        HookIngestApi.as_view(),
        name="hook-ingest-event",
    ),
    path("checkpoints/", resources.CheckpointListApi.as_view(), name="checkpoint-list"),
    path(
        "checkpoints/<str:session_key>/",
        resources.SessionCheckpointsApi.as_view(),
        name="session-checkpoints",
    ),
    path(
        "checkpoints/<str:session_key>/latest/",
        resources.CheckpointLatestApi.as_view(),
        name="checkpoint-latest",
    ),
    path(
        "checkpoints/<str:session_key>/<str:checkpoint_id>/",
        resources.CheckpointDetailApi.as_view(),
        name="checkpoint-detail",
    ),
    path("sessions/", resources.SessionListApi.as_view(), name="session-list"),
    path(
        "sessions/<str:session_key>/", resources.SessionDetailApi.as_view(), name="session-detail"
    ),
    path("sessions/<str:session_key>/export/", SessionExportApi.as_view(), name="session-export"),
    path("recovery/", resources.RecoveryApi.as_view(), name="recovery"),
    path(
        "schema/",
        SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[AllowAny]),
        name="schema",
    ),
]
