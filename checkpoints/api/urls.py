from django.urls import path

from checkpoints.api.views import WhoAmIApi

app_name = "api"

urlpatterns = [
    path("whoami/", WhoAmIApi.as_view(), name="whoami"),
]
