from django.contrib import admin
from django.urls import include, path

from checkpoints import views

admin.site.site_header = "Signet Continuity"
admin.site.site_title = "Signet Continuity admin"
admin.site.index_title = "Administration"

urlpatterns = [
    path("", include("checkpoints.dashboard.urls")),
    path("favicon.ico", views.favicon, name="favicon"),
    path("healthz", views.healthz, name="healthz"),
    path("api/", include("checkpoints.api.urls")),
    path("admin/", admin.site.urls),
]
