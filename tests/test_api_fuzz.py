"""Schemathesis against the OpenAPI document: every operation, a fixed seed, bounded
examples. No 5xx, and every response matches the schema it documents.

Excluded: "a schema-valid request is accepted". Some rules span fields and OpenAPI cannot
say them (a capture needs a digest or some structured field; recovery takes a session or a
project, not both; a hook payload must carry its event's fields): those answer 400 with the
reason, as they should.

The operations are driven through Hypothesis directly (schemathesis' pytest plugin does not
run under pytest 9), against the WSGI application in the test's own database transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from checkpoints.services.tokens import token_create
from signet_site.wsgi import application
from tests.factories import CheckpointFactory, SessionFactory, UserFactory

EXAMPLES_PER_OPERATION = 20


def _load_schema() -> Any:
    document = json.loads(
        OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True))
    )
    loaded = schemathesis.openapi.from_dict(document)
    loaded.app = application
    return loaded


SCHEMA = _load_schema()
OPERATIONS = {result.ok().label: result.ok() for result in SCHEMA.get_all_operations()}


@pytest.fixture
def in_test_transaction() -> Iterator[None]:
    """Keep the WSGI app on the test's connection, as Django's test client does."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def bearer(db: Any, in_test_transaction: None) -> dict[str, str]:
    owner: Any = UserFactory(username="fuzz")
    session = SessionFactory(owner=owner, session_key="fuzz-session")
    CheckpointFactory(session=session)
    _, raw = token_create(owner=owner, name="fuzz", scopes=["ingest", "read", "write"])
    return {"Authorization": f"Bearer {raw}", "Host": "localhost"}


def test_the_schema_documents_every_route() -> None:
    assert sorted(OPERATIONS) == [
        "DELETE /api/checkpoints/{session_key}/",
        "DELETE /api/checkpoints/{session_key}/{checkpoint_id}/",
        "GET /api/checkpoints/",
        "GET /api/checkpoints/{session_key}/",
        "GET /api/checkpoints/{session_key}/latest/",
        "GET /api/checkpoints/{session_key}/{checkpoint_id}/",
        "GET /api/recovery/",
        "GET /api/sessions/",
        "GET /api/sessions/{session_key}/",
        "GET /api/sessions/{session_key}/export/",
        "GET /api/whoami/",
        "POST /api/checkpoints/",
        "POST /api/hooks/{harness}/",
        "POST /api/hooks/{harness}/{event_name}/",
    ]


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_every_operation_conforms(label: str, bearer: dict[str, str]) -> None:
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=OPERATIONS[label].as_strategy())
    def check(case: Any) -> None:
        sent.append(case)
        case.call_and_validate(headers=bearer, excluded_checks=[positive_data_acceptance])

    sent: list[Any] = []
    check()
    assert sent, "no example was generated"
    print(f"{label}: {len(sent)} examples")
