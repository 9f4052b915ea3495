"""The service's routes plus a bare Django JSON view: at ``/bench/bare/`` behind the site's
middleware (the baseline the hook path is judged by), and at ``/api/hooks/bare/`` behind the
hooks' shorter list (``signet_site/handlers.py``), shown beside it."""

from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt


@csrf_exempt
def bare(request: HttpRequest) -> JsonResponse:
    return JsonResponse({})


urlpatterns = [
    path("bench/bare/", bare),
    path("api/hooks/bare/", bare),  # before the hook routes, which would take "bare"
    path("", include("signet_site.urls")),
]
