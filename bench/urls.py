"""The service's routes plus ``/bench/bare/``: a bare Django JSON view, same middleware."""

from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt


@csrf_exempt
def bare(request: HttpRequest) -> JsonResponse:
    return JsonResponse({})


urlpatterns = [
    path("bench/bare/", bare),
    path("", include("signet_site.urls")),
]
