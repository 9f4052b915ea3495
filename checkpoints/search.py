"""Full-text search over checkpoints: digests, tasks and the list fields, owner-scoped.

SQLite searches an FTS5 table, ``checkpoint_search``, whose rowid is the checkpoint row's
rowid and which triggers keep in sync with ``checkpoints_checkpoint``; PostgreSQL searches
a stored generated ``tsvector`` column, ``search_vector``, through a GIN index. Both are
made by ``search_index_create`` (migration 0003), so every write path keeps them current:
the ORM, bulk deletes, cascades, raw SQL. Any other database scans digests and tasks.

All three read a query as PostgreSQL's ``websearch_to_tsquery`` does: every word must
match, ``"quoted words"`` match as a phrase, ``or`` between words matches either side, and
``-word`` excludes. Words match whole, without stemming; SQLite also matches without
accents ("cafe" finds "café"). A run of CJK text with no separator inside is one word to
both databases: "日本" matches "日本、東京" but not "日本語".

On SQLite, a migration that rebuilds ``checkpoints_checkpoint`` (Django does for most field
changes: a new table, rows copied, the old one dropped) drops the triggers and renumbers
the rowids; it must end with ``search_index_rebuild``. On PostgreSQL, a column that
``search_vector`` is computed from cannot change type until ``search_index_drop``.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import connection
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.models import Q
from django.db.models.query import RawQuerySet
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from checkpoints.models import Checkpoint

# Longer queries are cut here: the view caps its input too, and a query of hundreds of
# words only costs time.
MAX_QUERY_CHARS = 200
SNIPPET_WORDS = 24
SCAN_SNIPPET_CHARS = 160
# PostgreSQL looks for matches among this many newest checkpoints before using the index:
# a word in more than about 1 % of them is found there.
RECENT_WINDOW = 2000
ELLIPSIS = "…"

# Private-use characters mark matches inside the database's snippet: the text is escaped
# first, then they become <mark> tags, so nothing in a checkpoint can inject HTML.
MARK_START = "\ue000"
MARK_END = "\ue001"
# PostgreSQL's parser reads '/' as part of a word and '<…>' as an HTML tag to drop: the
# index and the query see spaces there, the snippet these stand-ins, turned back after.
PG_SEPARATORS = "/<>"
PG_STAND_INS = "\ue002\ue003\ue004"

_HIT_COLUMNS = (
    "c.id, c.session_id, c.session_key, c.project_normalized, c.harness, c.trigger, c.created_at"
)

# What PostgreSQL indexes: the text, then the list items (strings anywhere in the JSON).
PG_DOCUMENT = """
    to_tsvector('simple'::regconfig, translate(digest || ' ' || current_task, '/<>', '   '))
    || jsonb_to_tsvector(
        'simple'::regconfig,
        translate(
            (decisions || open_questions || blockers || next_steps || modified_files
             || recent_prompts || tags)::text,
            '/<>', '   '
        )::jsonb,
        '["string"]'::jsonb
    )
"""
PG_QUERY = "websearch_to_tsquery('simple'::regconfig, translate(%s, '/<>', '   '))"
# What the snippet is cut from: the indexed text, list items one per line.
PG_HEADLINE_TEXT = """translate(
    c.digest || E'\\n' || c.current_task || E'\\n' || coalesce((
        SELECT string_agg(item #>> '{}', E'\\n')
        FROM jsonb_path_query(
            c.decisions || c.open_questions || c.blockers || c.next_steps || c.modified_files
            || c.recent_prompts || c.tags,
            'strict $.** ? (@.type() == "string")'
        ) AS item
    ), ''),
    '/<>', %s
)"""


@dataclass(frozen=True)
class SearchHit:
    """One matching checkpoint, with the text around the match (escaped, matches marked)."""

    checkpoint_id: uuid.UUID
    session_id: int
    session_key: str
    project_normalized: str
    harness: str
    trigger: str
    created_at: datetime
    snippet: SafeString


@dataclass(frozen=True)
class _Term:
    text: str
    negated: bool


# A quoted phrase (its closing quote optional) or a bare word, either perhaps after '-'.
_QUERY_TOKEN = re.compile(r'(-?)(?:"([^"]*)"?|([^\s"]+))')


def _query_groups(query: str) -> list[list[_Term]]:
    """The query as alternatives (split at ``or``), each a list of terms that must all
    hold. Terms without a letter or digit go (no database could match them), and so do
    alternatives with nothing left to match, only exclusions."""
    clean = "".join(ch for ch in query[:MAX_QUERY_CHARS] if ch != "\x00" and not _surrogate(ch))
    groups: list[list[_Term]] = [[]]
    for match in _QUERY_TOKEN.finditer(clean):
        minus, phrase, word = match.groups()
        if word is not None and not minus and word.casefold() == "or":
            groups.append([])
            continue
        text = " ".join((phrase if phrase is not None else word).split())
        if any(ch.isalnum() for ch in text):
            groups[-1].append(_Term(text=text, negated=bool(minus)))
    return [group for group in groups if any(not term.negated for term in group)]


def _surrogate(ch: str) -> bool:
    return "\ud800" <= ch <= "\udfff"


def checkpoint_search(
    *, owner: User | None, query: str, limit: int = 20, offset: int = 0
) -> list[SearchHit]:
    """Checkpoints of ``owner`` (of every owner when None) matching ``query``, newest first.

    A blank query, or one with no word to match, finds nothing. Any text is a valid query:
    operators of the database's own syntax are matched as plain words. To paginate, ask for
    ``limit + 1`` hits: one more than ``limit`` means there is a next page (counting every
    match would cost as much as the search itself).
    """
    groups = _query_groups(query)
    limit, offset = max(0, limit), max(0, offset)
    if not groups or not limit:
        return []
    owner_id = None if owner is None else owner.pk
    search = _SEARCHES.get(connection.vendor, _search_scan)
    return search(groups=groups, owner_id=owner_id, limit=limit, offset=offset)


def _search_sqlite(
    *, groups: list[list[_Term]], owner_id: int | None, limit: int, offset: int
) -> list[SearchHit]:
    # Newest first is the FTS table's own rowid order, walked backwards without sorting,
    # and a checkpoint's rowid grows with each write: the walk stops after ``limit`` hits.
    owned = "AND c.owner_id = %s" if owner_id is not None else ""
    sql = f"""
        SELECT {_HIT_COLUMNS},
               snippet(checkpoint_search, -1, %s, %s, %s, {SNIPPET_WORDS}) AS snippet
        FROM checkpoint_search AS s
        JOIN checkpoints_checkpoint AS c ON c.rowid = s.rowid AND c.id = s.checkpoint_id
        WHERE checkpoint_search MATCH %s {owned}
        ORDER BY s.rowid DESC
        LIMIT %s OFFSET %s
    """  # noqa: S608
    params: list[Any] = [MARK_START, MARK_END, ELLIPSIS, _fts5_expression(groups)]
    if owner_id is not None:
        params.append(owner_id)
    return _hits(Checkpoint.objects.raw(sql, [*params, limit, offset]))


def _fts5_expression(groups: list[list[_Term]]) -> str:
    """FTS5 query syntax for ``groups``: every term a quoted string, so nothing the user
    typed is read as an operator; FTS5 splits it into words as it did the text."""

    def quoted(term: _Term) -> str:
        return '"' + term.text.replace('"', '""') + '"'

    alternatives = []
    for group in groups:
        expression = " AND ".join(quoted(term) for term in group if not term.negated)
        for term in group:
            if term.negated:
                expression = f"({expression}) NOT {quoted(term)}"
        alternatives.append(f"({expression})")
    return " OR ".join(alternatives)


def _search_postgresql(
    *, groups: list[list[_Term]], owner_id: int | None, limit: int, offset: int
) -> list[SearchHit]:
    # Newest first by id (time-ordered, as rowids are on SQLite). No one plan suits every
    # word, and the planner cannot tell them apart (a word it has no statistics for looks
    # as frequent as a rare one): walking the newest rows finds a common word at once and
    # a missing one never, while the GIN index finds a rare one at once and a common one
    # only among all its rows. So the newest RECENT_WINDOW rows are tried first; only when
    # they hold too few matches does the index give them all, to be sorted (the one-time
    # filters run one branch or the other). bench/search.py: 0.8 s for a missing word in
    # 200,000 rows when the planner walked them all; 12 ms this way.
    # The page is picked first and only its rows get a headline, which parses the text.
    owner = "owner_id = %s" if owner_id is not None else "TRUE"
    sql = f"""
        WITH recent AS (
            SELECT id FROM (
                SELECT id, search_vector FROM checkpoints_checkpoint WHERE {owner}
                ORDER BY id DESC LIMIT %s
            ) AS newest
            WHERE search_vector @@ {PG_QUERY}
            ORDER BY id DESC LIMIT %s
        ), matched AS (
            SELECT id FROM recent WHERE (SELECT count(*) FROM recent) >= %s
            UNION ALL
            SELECT id FROM (
                SELECT id FROM checkpoints_checkpoint
                WHERE search_vector @@ {PG_QUERY} AND {owner}
                OFFSET 0
            ) AS every
            WHERE (SELECT count(*) FROM recent) < %s
        ), page AS (
            SELECT id FROM matched ORDER BY id DESC LIMIT %s OFFSET %s
        )
        SELECT {_HIT_COLUMNS},
               ts_headline('simple'::regconfig, {PG_HEADLINE_TEXT}, {PG_QUERY}, %s) AS snippet
        FROM page JOIN checkpoints_checkpoint AS c ON c.id = page.id
        ORDER BY c.id DESC
    """  # noqa: S608
    websearch = _websearch_text(groups)
    owned = [owner_id] if owner_id is not None else []
    wanted = offset + limit
    headline_options = (
        f"StartSel={MARK_START}, StopSel={MARK_END}, "
        f"MaxWords={SNIPPET_WORDS}, MinWords={SNIPPET_WORDS // 3}"
    )
    params: list[Any] = [
        *owned, RECENT_WINDOW, websearch, wanted,
        wanted, websearch, *owned, wanted,
        limit, offset,
        PG_STAND_INS, websearch, headline_options,
    ]  # fmt: skip
    restore = str.maketrans(PG_STAND_INS, PG_SEPARATORS)
    return _hits(Checkpoint.objects.raw(sql, params), restore=restore)


def _websearch_text(groups: list[list[_Term]]) -> str:
    """``groups`` written back in ``websearch_to_tsquery``'s syntax, every term quoted: the
    query PostgreSQL runs is the one SQLite runs."""
    return " or ".join(
        " ".join(("-" if term.negated else "") + f'"{term.text}"' for term in group)
        for group in groups
    )


def _search_scan(
    *, groups: list[list[_Term]], owner_id: int | None, limit: int, offset: int
) -> list[SearchHit]:
    """Any other database: a case-insensitive scan of digests and tasks."""

    def contains(term: _Term) -> Q:
        return Q(digest__icontains=term.text) | Q(current_task__icontains=term.text)

    matches = Q()
    for group in groups:
        alternative = Q()
        for term in group:
            alternative &= ~contains(term) if term.negated else contains(term)
        matches |= alternative
    rows = Checkpoint.objects.filter(matches)
    if owner_id is not None:
        rows = rows.filter(owner_id=owner_id)
    found = rows.order_by("-id")[offset : offset + limit]
    wanted = [term.text for group in groups for term in group if not term.negated]
    return [
        _hit(row, _marked(_scan_snippet(f"{row.digest}\n{row.current_task}", wanted)))
        for row in found
    ]


def _scan_snippet(text: str, terms: list[str]) -> str:
    """The text around the first of ``terms``, each occurrence between the markers."""
    pattern = re.compile("|".join(re.escape(term) for term in terms), re.IGNORECASE)
    first = pattern.search(text)
    start = max(0, first.start() - SCAN_SNIPPET_CHARS // 3) if first else 0
    end = min(len(text), start + SCAN_SNIPPET_CHARS)
    piece = pattern.sub(lambda found: MARK_START + found.group() + MARK_END, text[start:end])
    return (ELLIPSIS if start else "") + piece + (ELLIPSIS if end < len(text) else "")


_SEARCHES = {"sqlite": _search_sqlite, "postgresql": _search_postgresql}


def _hits(rows: RawQuerySet[Checkpoint], restore: dict[int, int] | None = None) -> list[SearchHit]:
    """The rows, with their ``snippet`` column (its stand-ins ``restore``d) marked up."""
    hits = []
    for row in rows:
        snippet: str = getattr(row, "snippet", None) or ""
        hits.append(_hit(row, _marked(snippet.translate(restore) if restore else snippet)))
    return hits


def _hit(checkpoint: Checkpoint, snippet: SafeString) -> SearchHit:
    return SearchHit(
        checkpoint_id=checkpoint.id,
        session_id=checkpoint.session_id,
        session_key=checkpoint.session_key,
        project_normalized=checkpoint.project_normalized,
        harness=checkpoint.harness,
        trigger=checkpoint.trigger,
        created_at=checkpoint.created_at,
        snippet=snippet,
    )


def _marked(text: str) -> SafeString:
    """``text`` HTML-escaped, its marked matches in ``<mark>``; whitespace runs become one
    space. Markers the text itself held cannot unbalance the tags: a start inside a match
    or an end outside one is dropped."""
    html = []
    inside = False
    for part in re.split(f"([{MARK_START}{MARK_END}])", text):
        if part == MARK_START:
            if not inside:
                html.append("<mark>")
            inside = True
        elif part == MARK_END:
            if inside:
                html.append("</mark>")
            inside = False
        else:
            html.append(escape(re.sub(r"\s+", " ", part)))
    if inside:
        html.append("</mark>")
    return mark_safe("".join(html).strip())  # noqa: S308


# --- The index: made by migrations --------------------------------------------------------

# The list fields are JSON text (ASCII-escaped on SQLite): json_each decodes the items.
_SQLITE_LISTS = """(SELECT group_concat(value, char(10)) FROM (
    SELECT value FROM json_each({row}.decisions)
    UNION ALL SELECT value FROM json_each({row}.open_questions)
    UNION ALL SELECT value FROM json_each({row}.blockers)
    UNION ALL SELECT value FROM json_each({row}.next_steps)
    UNION ALL SELECT value FROM json_each({row}.modified_files)
    UNION ALL SELECT value FROM json_each({row}.recent_prompts)
    UNION ALL SELECT value FROM json_each({row}.tags)
))"""
_SQLITE_INSERT = f"""INSERT INTO checkpoint_search
    (rowid, owner_id, checkpoint_id, digest, task, lists)
    VALUES (NEW.rowid, NEW.owner_id, NEW.id, NEW.digest, NEW.current_task,
            {_SQLITE_LISTS.format(row="NEW")})"""  # noqa: S608

_CREATE = {
    "sqlite": [
        # unicode61 without diacritics: "cafe" finds "café"; words split at punctuation, so
        # a file name matches inside its path. (trigram would match inside CJK runs, but
        # not words under three characters such as "日本", and keeps accents.)
        """CREATE VIRTUAL TABLE checkpoint_search USING fts5(
            owner_id UNINDEXED, checkpoint_id UNINDEXED, digest, task, lists,
            tokenize = 'unicode61 remove_diacritics 2'
        )""",
        f"""INSERT INTO checkpoint_search (rowid, owner_id, checkpoint_id, digest, task, lists)
            SELECT rowid, owner_id, id, digest, current_task, {_SQLITE_LISTS.format(row="c")}
            FROM checkpoints_checkpoint AS c""",  # noqa: S608
        # One segment out of the fill: else the next writes merge into it, a little each
        # (measured after filling 50,000 rows: 1.2 ms a write on average, up to 140 ms).
        "INSERT INTO checkpoint_search (checkpoint_search) VALUES ('optimize')",
        f"""CREATE TRIGGER checkpoint_search_insert AFTER INSERT ON checkpoints_checkpoint
            BEGIN {_SQLITE_INSERT}; END""",
        # Only the searched columns: the prune's "parent = NULL" updates must not re-index.
        f"""CREATE TRIGGER checkpoint_search_update AFTER UPDATE OF
            id, owner_id, digest, current_task, decisions, open_questions, blockers,
            next_steps, modified_files, recent_prompts, tags
            ON checkpoints_checkpoint
            BEGIN
                DELETE FROM checkpoint_search WHERE rowid = OLD.rowid;
                {_SQLITE_INSERT};
            END""",  # noqa: S608
        """CREATE TRIGGER checkpoint_search_delete AFTER DELETE ON checkpoints_checkpoint
            BEGIN DELETE FROM checkpoint_search WHERE rowid = OLD.rowid; END""",
    ],
    # A stored column rather than an index on the expression: whenever the planner walks
    # rows instead of the index (a common word, newest first), or rechecks them, an
    # expression is computed again per row, about 90 µs for a checkpoint; bench/search.py
    # measured 0.3 s for a page of a word in 1 % of 20,000 rows that way, 1.3 ms stored.
    "postgresql": [
        f"""ALTER TABLE checkpoints_checkpoint ADD COLUMN search_vector tsvector
            GENERATED ALWAYS AS ({PG_DOCUMENT}) STORED""",
        "CREATE INDEX checkpoint_search ON checkpoints_checkpoint USING gin (search_vector)",
    ],
}
_DROP = {
    "sqlite": [
        "DROP TRIGGER IF EXISTS checkpoint_search_delete",
        "DROP TRIGGER IF EXISTS checkpoint_search_update",
        "DROP TRIGGER IF EXISTS checkpoint_search_insert",
        "DROP TABLE IF EXISTS checkpoint_search",
    ],
    "postgresql": [
        "DROP INDEX IF EXISTS checkpoint_search",
        "ALTER TABLE checkpoints_checkpoint DROP COLUMN IF EXISTS search_vector",
    ],
}


def search_index_create(*, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Create what ``checkpoint_search`` searches, indexing the checkpoints there are."""
    for statement in _CREATE.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, params=None)


def search_index_drop(*, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Drop the search index, whatever of it exists."""
    for statement in _DROP.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, params=None)


def search_index_rebuild(*, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """On SQLite, drop and create the search index: for the end of a migration that rebuilt
    the checkpoint table, which took the triggers with it and renumbered the rows. Nothing
    elsewhere (PostgreSQL alters a table in place)."""
    if schema_editor.connection.vendor == "sqlite":
        search_index_drop(schema_editor=schema_editor)
        search_index_create(schema_editor=schema_editor)
