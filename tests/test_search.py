"""Full-text search: what it finds, whose, how it marks matches, and that every write path
(saves, updates, deletes, cascades, the prune, the hooks) keeps the index in sync."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from checkpoints import search
from checkpoints.models import Checkpoint, Session
from checkpoints.search import SearchHit, checkpoint_search
from checkpoints.services.retention import prune_run
from checkpoints.services.store import CheckpointContent, checkpoint_capture, checkpoints_delete
from tests.factories import CheckpointFactory, SessionFactory
from tests.hookutil import payload, send

pytestmark = pytest.mark.django_db

on_sqlite = pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's FTS5 table")
on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="PostgreSQL's GIN index"
)


def found(owner, query, **kwargs):
    """The ids of the checkpoints ``query`` finds, in the order found."""
    return [hit.checkpoint_id for hit in checkpoint_search(owner=owner, query=query, **kwargs)]


def checkpoint_of(owner, **fields):
    return CheckpointFactory(session=SessionFactory(owner=owner), **fields)


def test_finds_by_digest_task_and_list_items(owner):
    by_digest = checkpoint_of(owner, digest="Refactored the invoicing pipeline")
    by_task = checkpoint_of(owner, digest="", current_task="Migrate the ledger to Decimal")
    by_decision = checkpoint_of(owner, digest="", decisions=["Use idempotency keys"])
    by_file = checkpoint_of(owner, digest="", modified_files=["src/checkout/payment.py"])
    by_prompt = checkpoint_of(owner, digest="", recent_prompts=["why is the cron flaky?"])
    by_tag = checkpoint_of(owner, digest="", tags=["hotfix"])
    by_step = checkpoint_of(owner, digest="", next_steps=["Ship the changelog"])

    assert found(owner, "invoicing") == [by_digest.id]
    assert found(owner, "ledger decimal") == [by_task.id]
    assert found(owner, "IDEMPOTENCY") == [by_decision.id]
    assert found(owner, "payment.py") == [by_file.id]  # a file name inside its path
    assert found(owner, "src/checkout/payment.py") == [by_file.id]
    assert found(owner, "cron") == [by_prompt.id]
    assert found(owner, "hotfix") == [by_tag.id]
    assert found(owner, "changelog") == [by_step.id]
    assert found(owner, "nowhere") == []


def test_every_word_must_match_and_the_hit_carries_its_checkpoint(owner):
    checkpoint = checkpoint_of(owner, digest="retry the payment webhook", trigger="explicit")
    checkpoint_of(owner, digest="payment form styling")

    [hit] = checkpoint_search(owner=owner, query="payment webhook")

    session = checkpoint.session
    assert hit == SearchHit(
        checkpoint_id=checkpoint.id,
        session_id=session.pk,
        session_key=session.session_key,
        project_normalized=session.project_normalized,
        harness=session.harness,
        trigger="explicit",
        created_at=checkpoint.created_at,
        snippet=hit.snippet,
    )
    assert timezone.is_aware(hit.created_at)
    assert str(hit.snippet) == "retry the payment webhook".replace(
        "payment webhook", "<mark>payment</mark> <mark>webhook</mark>"
    )


def test_phrases_alternatives_and_exclusions_read_as_websearch_does(owner):
    red = checkpoint_of(owner, digest="the red button stays")
    green = checkpoint_of(owner, digest="the button is green now, red later")
    checkpoint_of(owner, digest="nothing to see")

    assert set(found(owner, "red button")) == {red.id, green.id}
    assert found(owner, '"red button"') == [red.id]
    assert found(owner, '"red button') == [red.id]  # an unclosed quote runs to the end
    assert found(owner, "button -green") == [red.id]
    assert set(found(owner, "stays or green")) == {red.id, green.id}
    assert found(owner, "-button") == []  # nothing left to match


def test_accents_and_cjk_are_searchable_from_the_json_lists_too(owner):
    accented = checkpoint_of(owner, digest="Le café est prêt", decisions=["Garder la crème"])
    cjk = checkpoint_of(owner, digest="", decisions=["対応言語: 日本、中国"])
    # Stored ASCII-escaped on SQLite; the index must hold the decoded text.
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT decisions FROM checkpoints_checkpoint WHERE id = %s", [cjk.id.hex]
            )
            assert "\\u65e5" in cursor.fetchone()[0]

    assert found(owner, "café") == [accented.id]
    assert found(owner, "CRÈME") == [accented.id]
    assert found(owner, "日本") == [cjk.id]
    assert found(owner, "対応言語") == [cjk.id]
    [hit] = checkpoint_search(owner=owner, query="日本")
    assert "<mark>日本</mark>" in hit.snippet


@on_sqlite
def test_sqlite_matches_without_diacritics(owner):
    accented = checkpoint_of(owner, digest="Le café est prêt")
    assert found(owner, "cafe pret") == [accented.id]


@pytest.mark.parametrize(
    "text",
    [
        "Ran the sanitizer on <script>alert('x')</script> again",
        "<b>bold</b> & <img src=x onerror=alert(1)> sanitizer",
        "markers \ue000 \ue001 \ue001 sanitizer \ue000 left open",
    ],
)
def test_snippets_escape_the_text_and_mark_only_the_matches(owner, text):
    checkpoint_of(owner, digest=text)

    [hit] = checkpoint_search(owner=owner, query="sanitizer")

    html = str(hit.snippet)
    assert "<mark>sanitizer</mark>" in html
    without_marks = html.replace("<mark>", "").replace("</mark>", "")
    assert "<" not in without_marks
    assert ">" not in without_marks
    assert html.count("<mark>") == html.count("</mark>")
    if "<script>" in text:
        assert "&lt;script&gt;" in html


def test_snippet_of_a_long_digest_is_cut_around_the_match(owner):
    filler = " ".join(f"word{number}" for number in range(300))
    checkpoint_of(owner, digest=f"{filler} needle {filler}")

    [hit] = checkpoint_search(owner=owner, query="needle")

    assert "<mark>needle</mark>" in hit.snippet
    assert len(hit.snippet) < 400


def test_only_the_owners_checkpoints_unless_the_owner_is_none(owner, teammate, stranger):
    alices = checkpoint_of(owner, digest="the shared word quokka")
    bobs = checkpoint_of(teammate, digest="quokka as well")

    assert found(owner, "quokka") == [alices.id]
    assert found(teammate, "quokka") == [bobs.id]
    assert found(stranger, "quokka") == []
    assert set(found(None, "quokka")) == {alices.id, bobs.id}


def test_newest_first_and_pages_by_limit_and_offset(owner):
    session = SessionFactory(owner=owner)
    now = timezone.now()
    ids = [
        CheckpointFactory(
            session=session, digest=f"pager step {n}", created_at=now + timedelta(minutes=n)
        ).id
        for n in range(5)
    ]
    newest_first = ids[::-1]

    assert found(owner, "pager") == newest_first
    assert found(owner, "pager", limit=2) == newest_first[:2]
    # The view asks for one more than a page: three back means there is a next page.
    assert found(owner, "pager", limit=3, offset=2) == newest_first[2:]
    assert found(owner, "pager", limit=0) == []
    assert found(owner, "pager", limit=2, offset=10) == []


@pytest.mark.parametrize("window", [1, 3, 4, 100])
def test_pages_are_the_same_whether_the_newest_rows_hold_them_or_not(owner, monkeypatch, window):
    # PostgreSQL looks among the newest RECENT_WINDOW rows first, then in the index.
    monkeypatch.setattr(search, "RECENT_WINDOW", window)
    session = SessionFactory(owner=owner)
    digests = ["needle old"] * 3 + ["hay"] * 3 + ["needle new"] * 2 + ["hay"]
    ids = [CheckpointFactory(session=session, digest=digest).id for digest in digests]
    newest_first = [id for id, digest in zip(ids, digests, strict=True) if "needle" in digest][::-1]

    assert found(owner, "needle") == newest_first
    assert found(owner, "needle", limit=2) == newest_first[:2]
    assert found(owner, "needle", limit=2, offset=2) == newest_first[2:4]
    assert found(owner, "needle", limit=3, offset=4) == newest_first[4:]
    assert found(None, "needle old") == newest_first[2:]


def test_one_query_per_search(owner, django_assert_num_queries):
    for _ in range(3):
        checkpoint_of(owner, digest="count me")
    with django_assert_num_queries(1):  # the page with its snippets
        assert len(checkpoint_search(owner=owner, query="count")) == 3


@pytest.mark.parametrize(
    "query",
    [
        '"',
        '""',
        "'",
        '"unbalanced',
        "(",
        ")",
        "((a)",
        "AND",
        "a AND",
        "OR",
        "or or",
        "NOT a",
        "NEAR(a b)",
        "NEAR/2",
        "*",
        "a*",
        "-",
        "--a",
        "- a",
        "digest:a",
        "owner_id:1",
        "{digest task}: a",
        "^a",
        ":",
        "a:b:c",
        "\\",
        "%",
        "_",
        "a & b | !c <-> d",
        "a:*",
        "'a' & 'b'",
        "<script>",
        "\x00a",
        "a\ud800b",
        "\ue000",
        "word " * 200,
        "   ",
        "",
    ],
)
def test_hostile_queries_never_raise(owner, query):
    checkpoint_of(owner, digest="a b c d word digest")
    hits = checkpoint_search(owner=owner, query=query)
    assert isinstance(hits, list)


def test_blank_and_wordless_queries_find_nothing(owner):
    checkpoint_of(owner, digest="anything at all")
    assert checkpoint_search(owner=owner, query="") == []
    assert checkpoint_search(owner=owner, query="  \n ") == []
    assert checkpoint_search(owner=owner, query="-- * ()") == []


def test_sync_after_save_and_queryset_update(owner):
    checkpoint = checkpoint_of(owner, digest="before the edit", tags=["alpha"])

    checkpoint.digest = "after the edit"
    checkpoint.save()
    assert found(owner, "before") == []
    assert found(owner, "after") == [checkpoint.id]

    Checkpoint.objects.filter(pk=checkpoint.pk).update(current_task="renamed", tags=["omega"])
    assert found(owner, "renamed omega") == [checkpoint.id]
    assert found(owner, "alpha") == []

    # A change to a column the index does not hold leaves it as it was.
    Checkpoint.objects.filter(pk=checkpoint.pk).update(parent=None, prompt_count=7)
    assert found(owner, "after renamed") == [checkpoint.id]


def test_sync_after_deletes(owner):
    single = checkpoint_of(owner, digest="single delete")
    by_service = checkpoint_of(owner, digest="service delete")
    by_queryset = checkpoint_of(owner, digest="queryset delete")
    survivor = checkpoint_of(owner, digest="survivor delete")

    single.delete()
    checkpoints_delete(owner=owner, session_key=by_service.session_key)
    Checkpoint.objects.filter(pk=by_queryset.pk).delete()

    assert found(owner, "delete") == [survivor.id]


def test_sync_after_a_session_or_its_owner_goes(owner, teammate):
    session = SessionFactory(owner=owner)
    for _ in range(3):
        CheckpointFactory(session=session, digest="cascade check")
    bobs = checkpoint_of(teammate, digest="cascade check")

    session.delete()
    assert found(None, "cascade") == [bobs.id]

    teammate.delete()
    assert found(None, "cascade") == []


def test_sync_after_the_prune(owner):
    now = timezone.now()
    active = SessionFactory(owner=owner, last_activity_at=now)
    CheckpointFactory(session=active, digest="obsolete aged", created_at=now - timedelta(days=30))
    kept = CheckpointFactory(session=active, digest="current aged", created_at=now)
    expired = SessionFactory(
        owner=owner,
        started_at=now - timedelta(days=120),
        last_activity_at=now - timedelta(days=100),
    )
    CheckpointFactory(session=expired, digest="ancient aged", created_at=now - timedelta(days=100))

    report = prune_run()

    assert report.sessions == 1
    assert found(owner, "aged") == [kept.id]
    assert found(owner, "obsolete") == []
    assert found(owner, "ancient") == []


def test_checkpoints_written_by_the_service_and_the_hooks_are_found(owner, client_for):
    captured = checkpoint_capture(
        owner=owner,
        session_key="captured",
        project="/src/shop",
        harness="api",
        trigger="explicit",
        content=CheckpointContent(
            current_task="Tune the búsqueda", decisions=["Keep the 東京 mirror"]
        ),
    )
    assert found(owner, "busqueda" if connection.vendor == "sqlite" else "búsqueda") == [
        captured.id
    ]
    assert found(owner, "東京 mirror") == [captured.id]

    hook = client_for(owner, "ingest")
    send(hook, payload("session_start_startup", session_id="hooked"))
    send(hook, payload("user_prompt_submit", session_id="hooked", prompt="wombat migration"))
    response = send(hook, payload("session_end", session_id="hooked"))
    assert response.status_code == 200
    final = Session.objects.get(session_key="hooked").checkpoints.get()
    assert found(owner, "wombat") == [final.id]


def test_other_databases_scan_digests_and_tasks(owner, teammate, monkeypatch):
    monkeypatch.setattr(search, "_SEARCHES", {})
    hit = checkpoint_of(owner, digest="Scan <b>me</b> please", current_task="ticket")
    checkpoint_of(owner, digest="scan but not this one, it lacks the other word")
    checkpoint_of(teammate, digest="scan me too, ticket")

    assert found(owner, "scan ticket") == [hit.id]
    assert found(owner, "scan -lacks") == [hit.id]
    [result] = checkpoint_search(owner=owner, query="ME")
    assert str(result.snippet).startswith("Scan &lt;b&gt;<mark>me</mark>&lt;/b&gt; please")


@on_postgresql
def test_postgresql_finds_through_the_gin_index(owner):
    checkpoint_of(owner, digest="plan check")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        where = f"search_vector @@ {search.PG_QUERY}"
        sql = f"EXPLAIN SELECT 1 FROM checkpoints_checkpoint WHERE {where}"  # noqa: S608
        cursor.execute(sql, [search._websearch_text(search._query_groups("plan"))])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "checkpoint_search" in plan, plan


@on_sqlite
def test_sqlite_index_is_whole_after_every_migration(owner):
    # A migration that rebuilds the checkpoint table drops the triggers and renumbers the
    # rows: it must end with search_index_rebuild, or this fails.
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
        triggers = [row[0] for row in cursor.fetchall()]
    assert triggers == [
        "checkpoint_search_delete",
        "checkpoint_search_insert",
        "checkpoint_search_update",
    ]
    for _ in range(3):
        checkpoint_of(owner, digest="aligned")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM checkpoint_search AS s JOIN checkpoints_checkpoint AS c"
            " ON c.rowid = s.rowid AND c.id = s.checkpoint_id"
        )
        assert cursor.fetchone()[0] == Checkpoint.objects.count() == 3


@on_sqlite
def test_sqlite_walks_newest_first_without_sorting(owner):
    checkpoint_of(owner, digest="plan check")
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN QUERY PLAN SELECT s.rowid FROM checkpoint_search AS s"
            " JOIN checkpoints_checkpoint AS c ON c.rowid = s.rowid"
            " WHERE checkpoint_search MATCH ? AND c.owner_id = ? ORDER BY s.rowid DESC LIMIT 3",
            ['"plan"', owner.pk],
        )
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "VIRTUAL TABLE" in plan
    assert "TEMP B-TREE" not in plan, plan


@pytest.mark.django_db(transaction=True)
def test_the_migration_indexes_existing_checkpoints_and_reverses(owner):
    earlier = checkpoint_of(owner, digest="written before the index", decisions=["kept"])
    executor = MigrationExecutor(connection)
    executor.migrate([("checkpoints", "0002_retention")])
    assert not _search_objects()

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())  # every migration after, too

    assert found(owner, "written before") == [earlier.id]
    assert found(owner, "kept") == [earlier.id]


def _search_objects():
    """Names of the search table (SQLite) or index (PostgreSQL) present."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT name FROM sqlite_master WHERE name LIKE 'checkpoint_search%'")
        else:
            cursor.execute(
                "SELECT indexname FROM pg_indexes WHERE indexname = 'checkpoint_search'"
                " UNION SELECT column_name FROM information_schema.columns"
                " WHERE column_name = 'search_vector'"
            )
        return {row[0] for row in cursor.fetchall()}


def test_list_items_with_quotes_and_newlines_are_decoded(owner):
    checkpoint = checkpoint_of(owner, digest="", blockers=['say "hi"\nthen leave'])
    assert found(owner, '"say hi then leave"') == [checkpoint.id]
    [hit] = checkpoint_search(owner=owner, query="leave")
    assert str(hit.snippet) == "say &quot;hi&quot; then <mark>leave</mark>"
