"""factory-boy factories for the models."""

from __future__ import annotations

import factory
from django.contrib.auth.models import User

from checkpoints.models import Checkpoint, Harness, Injection, Session, Trigger


class UserFactory(factory.django.DjangoModelFactory[User]):
    class Meta:
        model = User
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda user: f"{user.username}@example.test")
    password = factory.django.Password("correct horse battery staple")


class SessionFactory(factory.django.DjangoModelFactory[Session]):
    class Meta:
        model = Session

    owner = factory.SubFactory(UserFactory)
    session_key = factory.Faker("uuid4")
    harness = Harness.CLAUDE_CODE
    project = "/home/alice/src/shop"
    project_normalized = "/home/alice/src/shop"


class CheckpointFactory(factory.django.DjangoModelFactory[Checkpoint]):
    class Meta:
        model = Checkpoint

    session = factory.SubFactory(SessionFactory)
    owner = factory.SelfAttribute("session.owner")
    session_key = factory.SelfAttribute("session.session_key")
    project_normalized = factory.SelfAttribute("session.project_normalized")
    harness = factory.SelfAttribute("session.harness")
    trigger = Trigger.PERIODIC
    digest = "## Session Checkpoint\n\nWorking on the checkout flow."


class InjectionFactory(factory.django.DjangoModelFactory[Injection]):
    class Meta:
        model = Injection

    session = factory.SubFactory(SessionFactory)
    source = "compact"
    match = "session"
    content = "## Session Recovery Context\n\nTask: finish the checkout flow."
    size_chars = factory.LazyAttribute(lambda injection: len(injection.content))
