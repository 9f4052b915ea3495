from django.urls import path

from checkpoints.api import reads
from checkpoints.api.hooks import HookIngestApi
from checkpoints.api.views import WhoAmIApi

app_name = "api"

urlpatterns = [
    path("whoami/", WhoAmIApi.as_view(), name="whoami"),
    path("hooks/<slug:harness>/", HookIngestApi.as_view(), name="hook-ingest"),
    path("checkpoints/", reads.CheckpointListApi.as_view(), name="checkpoint-list"),
    path(
        "checkpoints/<str:session_key>/",
        reads.SessionCheckpointsApi.as_view(),
        name="session-checkpoints",
    ),
    path(
        "checkpoints/<str:session_key>/latest/",
        reads.CheckpointLatestApi.as_view(),
        name="checkpoint-latest",
    ),
    path(
        "checkpoints/<str:session_key>/<str:checkpoint_id>/",
        reads.CheckpointDetailApi.as_view(),
        name="checkpoint-detail",
    ),
    path("sessions/", reads.SessionListApi.as_view(), name="session-list"),
    path("sessions/<str:session_key>/", reads.SessionDetailApi.as_view(), name="session-detail"),
    path("recovery/", reads.RecoveryApi.as_view(), name="recovery"),
]
