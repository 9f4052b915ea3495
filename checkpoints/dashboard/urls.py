from django.contrib.auth import views as auth_views
from django.urls import path

from checkpoints.dashboard import tokens, views

urlpatterns = [
    path("", views.sessions, name="dashboard"),
    path("sessions/rows/", views.session_rows, name="session_rows"),
    path("sessions/<int:pk>/", views.session_detail, name="session_detail"),
    path("sessions/<int:pk>/delete/", views.session_delete, name="session_delete"),
    path("checkpoints/<uuid:pk>/digest/", views.checkpoint_digest, name="checkpoint_digest"),
    path("checkpoints/<uuid:pk>/delete/", views.checkpoint_delete, name="checkpoint_delete"),
    path("projects/", views.projects, name="projects"),
    path("search/", views.search, name="search"),
    path("activity/", views.activity, name="activity"),
    path("retention/", views.retention, name="retention"),
    path("tokens/", tokens.tokens, name="tokens"),
    path("tokens/<int:pk>/revoke/", tokens.token_revoke_view, name="token_revoke"),
    path("api/docs/", views.api_docs, name="api_docs"),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=True),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "accounts/password/",
        auth_views.PasswordChangeView.as_view(),
        name="password_change",
    ),
    path(
        "accounts/password/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
]
