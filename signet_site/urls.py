from django.contrib import admin
from django.urls import include, path

from checkpoints import views
from checkpoints.api import errors
from checkpoints.mcp.http import McpApi

admin.site.site_header = "Signet Continuity"
admin.site.site_title = "Signet Continuity admin"
admin.site.index_title = "Administration"

urlpatterns = [
    # First: the hooks are most of the traffic, and each pattern tried before costs them.
    # A path under /api/ that the API does not have falls through to the dashboard's
    # (/api/docs/).
    path("api/", include("checkpoints.api.urls")),
    path("", include("checkpoints.dashboard.urls")),
    path("favicon.ico", views.favicon, name="favicon"),
    path("healthz", views.healthz, name="healthz"),
    path("mcp/", McpApi.as_view(), name="mcp"),
    # MCP clients are often configured with ".../mcp": a redirect would turn their POST
    # into a GET.
    path("mcp", McpApi.as_view(), name="mcp-bare"),
    path("admin/", admin.site.urls),
]

# Under /api/ these answer in the API's JSON shape; elsewhere, Django's pages.
handler400 = errors.bad_request
handler403 = errors.permission_denied
handler404 = errors.page_not_found
handler500 = errors.server_error
