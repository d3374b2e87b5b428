"""The curation reports (issue 35 part 3, docs/usage.md "Curation reports"): what the recall
records, the feedback and the index say about the cards, for the people who curate them.

- **never recalled** (:meth:`Reports.never_recalled`): cards that no recall returned in the
  last ``days`` days (a younger card counts from its creation), with the last recall that
  returned each at all, or none since it was created;
- **unhelpful** (:meth:`Reports.unhelpful`): cards with ``not_helpful`` or ``wrong`` verdicts on
  the recalls of the window, with their recalls and every kind of verdict;
- **stale dependencies** (:meth:`Reports.stale_dependencies`): tables the cards' dependencies
  name that nothing of the window showed in use (no recall narrowed to them or returned a card
  depending on them, no schema-change run covered their schema without removing them);
- **conflicts** (:meth:`Reports.conflicts`): pairs of cards of one family whose scope and
  dependencies overlap and whose key texts (a clarification's term and definition, a rule's
  rule, a question, an error: the ``key`` vector, :mod:`shared.projection.documents`) are near
  each other in the workspace's own index: each current card's stored ``key`` vector is
  searched among the cards of its family (:meth:`shared.index.engine.IndexEngine.neighbours`),
  no second index. Pairs whose texts differ (the same term defined twice, two rules for one
  column: possible contradictions), those whose numbers or quoted values differ first, come
  before duplicates (the same words).

Each report filters its cards as the card list does (:class:`~shared.store.listing.ListQuery`:
text, family, origin, concepts, dependency), sorts and pages; each needs ``memory.manage``.
The conflicts are computed once per state of the workspace's cards and projections
(:func:`shared.store.reports.state`) and kept in the process, so paging, sorting and filtering
a report read no index again (``bench/conflicts_report.py`` measures both).
"""

from __future__ import annotations

import csv
import io
import re
import time
import unicodedata
import uuid
from datetime import datetime, timezone
from collections.abc import Awaitable, Callable
from typing import Any, Literal, get_args

import msgspec

from shared import models
from shared.auth import Principal
from shared.errors import EmbedderUnavailable, IndexUnavailable, InvalidInput
from shared.index.embedding import Embedder
from shared.index.engine import KEY, IndexEngine, IndexFilter
from shared.projection.documents import key_text
from shared.store import cards, reports, workspaces
from shared.store.database import Database
from shared.store.listing import ListQuery

#: the report names of the API and the administration
REPORTS = ("never-recalled", "unhelpful", "conflicts", "stale-dependencies")
#: bounds of the window in days (the records are kept ``MEMARC_RECALL_RETENTION_DAYS``)
MAX_DAYS = 3650
#: neighbours searched per card, and the default and lowest similarity of a listed pair
NEIGHBOURS = 5
DEFAULT_SIMILARITY, MIN_SIMILARITY = 0.8, 0.5
#: computed conflicts kept per process (workspace, families, similarity), the oldest dropped
CACHED_CONFLICTS = 16

NeverRecalledSort = Literal["idle", "created", "title", "family"]
UnhelpfulSort = Literal["unhelpful", "share", "recalls", "title", "family"]
ConflictSort = Literal["rank", "similarity", "family", "title"]
StaleSort = Literal["stale", "table", "cards"]


class NeverRecalledRow(msgspec.Struct, kw_only=True):
    """A card no recall of the window returned: ``last_recalled`` is the newest record that
    returned it at all (None: never since it was created, as far as the kept records go)."""

    id: str
    family: str
    title: str
    created_at: datetime
    last_recalled: datetime | None
    recalls: int


class NeverRecalledPage(msgspec.Struct, kw_only=True):
    """A page of the never-recalled report: ``rows``, how many cards are listed in all
    (``total``), the page, and the window in days."""

    rows: list[NeverRecalledRow]
    total: int
    page: int
    per_page: int
    days: int


class UnhelpfulRow(msgspec.Struct, kw_only=True):
    """A card with unhelpful verdicts: ``recalls`` is how many recalls of the window returned
    it, the verdicts are those given on them (every principal's)."""

    id: str
    family: str
    title: str
    created_at: datetime
    recalls: int
    helpful: int
    not_helpful: int
    wrong: int


class UnhelpfulPage(msgspec.Struct, kw_only=True):
    """A page of the unhelpful report (``min_feedback``: the fewest ``not_helpful`` + ``wrong``
    verdicts of a listed card)."""

    rows: list[UnhelpfulRow]
    total: int
    page: int
    per_page: int
    days: int
    min_feedback: int


class ConflictCard(msgspec.Struct, kw_only=True):
    """One card of a pair: its key text (what was compared), the words of that text the other
    card's lacks (``only``, at most 10), and the objects its dependencies name (to the table)."""

    id: str
    title: str
    scope: str | None
    text: str
    only: list[str]
    objects: list[str]


class ConflictPair(msgspec.Struct, kw_only=True):
    """Two cards of one family that may say the same thing twice or contradict each other.

    ``similarity``: the cosine similarity of their stored ``key`` vectors (-1..1); ``kind``:
    ``conflict`` when their key texts differ (near, not equal: a possible contradiction),
    ``duplicate`` when they have the same words (case, spacing, punctuation and word order
    aside); ``values_differ``: the two texts state different numbers or quoted values (30
    days and 90; ``'Female'`` and ``'Male'``); ``same_term``: both define the same term (the
    words before "refers to", "means", "is", ":" …). Conflicts of the same term whose values
    differ rank first, then other conflicts of the same term, then those whose values differ,
    each by similarity; duplicates last. ``why``: why the
    pair is a candidate (the shared scope, the shared objects or a workspace-wide side)."""

    family: str
    a: ConflictCard
    b: ConflictCard
    similarity: float
    kind: Literal["conflict", "duplicate"]
    values_differ: bool
    same_term: bool = False
    why: list[str]


class ConflictsPage(msgspec.Struct, kw_only=True):
    """A page of the conflicts report: ``pairs``, their ``total``, the lowest similarity
    listed, how many cards were compared, and when the pairs were computed (``computed_at``,
    ``seconds`` it took, ``cached``: this answer reused them)."""

    pairs: list[ConflictPair]
    total: int
    page: int
    per_page: int
    min_similarity: float
    compared: int
    computed_at: datetime
    seconds: float
    cached: bool


class CardRef(msgspec.Struct, kw_only=True):
    """A card named by a report row: id and title."""

    id: str
    title: str


class StaleTableRow(msgspec.Struct, kw_only=True):
    """A table (``database.schema.table``) that card dependencies name and nothing of the
    window showed in use: ``cards`` name it (``examples``: the first three by title);
    ``last_seen`` is the newest sign of use kept at all (None: none), ``seen_by`` which:
    ``filter`` (a recall narrowed to the table), ``result`` (a recall returned a card that
    depends on it) or ``schema_run`` (a schema-change run covered its schema and did not remove
    it)."""

    database: str
    schema: str
    table: str
    cards: int
    examples: list[CardRef]
    last_seen: datetime | None
    seen_by: Literal["filter", "result", "schema_run"] | None


class StaleTablesPage(msgspec.Struct, kw_only=True):
    """A page of the stale-dependencies report: ``rows`` (tables), their ``total``, the page
    and the window in days."""

    rows: list[StaleTableRow]
    total: int
    page: int
    per_page: int
    days: int


def _check(days: int, page: int, per_page: int) -> None:
    if not 1 <= days <= MAX_DAYS:
        raise InvalidInput(f"days must be 1..{MAX_DAYS}", field="days")
    if page < 1:
        raise InvalidInput("page must be 1 or more", field="page")
    if not 1 <= per_page <= models.MAX_PER_PAGE:
        raise InvalidInput(f"per_page must be 1..{models.MAX_PER_PAGE}", field="per_page")


def _sort(sort: str, allowed: tuple[str, ...]) -> str:
    if sort not in allowed:
        raise InvalidInput(f"unknown sort {sort!r}; allowed: {', '.join(allowed)}", field="sort")
    return sort


def _words(text: str) -> list[str]:
    """The words of a text (letters, digits, underscores; NFKC, case folded): what two texts
    are compared by, so that spacing and punctuation do not make two equal texts differ."""
    return re.findall(r"\w+", unicodedata.normalize("NFKC", text).casefold())


#: where a definition's term ends: "X refers to …", "X means …", "X is …", "X: …"
_TERM_END = re.compile(r"\s+(?:refers? to|means?|is|are|stands? for|denotes?)\s+|\s*[:=]\s+",
                       re.I)


def _term(text: str) -> str | None:
    """The term a text defines (the words before "refers to", "means", "is", ":" …), case
    folded and spacing normalised; None when the text has no such word in its first 80
    characters."""
    m = _TERM_END.search(text[:80])
    if m is None or m.start() == 0:
        return None
    return " ".join(text[:m.start()].casefold().split()) or None


def _defined_term(card: Any, key: str) -> str | None:
    """The term ``card`` defines: that of its definition (a clarification's key text starts
    with its title), else of its key text ``key``."""
    return _term(card.content.get("definition") or key)


def _values(text: str) -> set[str]:
    """The values a text states: its numbers and its quoted strings (an apostrophe inside a
    word, ``Women's``, starts none), case folded."""
    quoted = re.findall(r"(?<![A-Za-z])'([^'\n]{1,60})'(?![A-Za-z])", text)
    numbers = re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])", text)
    return {" ".join(v.casefold().split()) for v in quoted} | set(numbers)


def _only(words: list[str], other: list[str]) -> list[str]:
    """The words of ``words`` that ``other`` lacks, in order, each once, at most 10."""
    lacking = set(other)
    return list(dict.fromkeys(w for w in words if w not in lacking))[:10]


def _overlap(a: list[str], b: list[str]) -> list[str]:
    """The objects two cards both name, the more specific of two that contain one another
    (``db`` and ``db.t``: ``db.t``), sorted."""
    out = set()
    for x in a:
        for y in b:
            if x == y or y.startswith(x + "."):
                out.add(y)
            elif x.startswith(y + "."):
                out.add(x)
    return sorted(out)


def _why(a: dict[str, Any], b: dict[str, Any]) -> list[str] | None:
    """Why two cards overlap in scope and dependencies (None: they do not): the same scope or
    a card for every scope, and shared objects or a card for every object (no dependencies)."""
    if a["scope"] is not None and b["scope"] is not None and a["scope"] != b["scope"]:
        return None
    why = [f"same scope {a['scope']!r}" if a["scope"] is not None and b["scope"] is not None
           else "both for every scope" if a["scope"] is None and b["scope"] is None
           else "one is for every scope"]
    if a["tables"] and b["tables"]:
        shared = _overlap(a["tables"], b["tables"])
        if not shared:
            return None
        why.append("same objects: " + ", ".join(shared))
    elif a["tables"] or b["tables"]:
        why.append("one names no objects (the whole workspace)")
    else:
        why.append("neither names objects")
    return why


def to_csv(page: NeverRecalledPage | UnhelpfulPage | ConflictsPage | StaleTablesPage) -> str:
    """A report page as CSV (RFC 4180, a header row): the rows' fields, times in ISO 8601
    UTC, ``never`` for a card never recalled; a conflict pair's two cards side by side
    (``a_id``, ``a_title``, ``a_text``, ``a_only``: the words only it has, ``b_…``) and
    ``why`` joined by ``; ``."""
    out = io.StringIO()
    writer = csv.writer(out)
    if isinstance(page, ConflictsPage):
        writer.writerow(["family", "kind", "values_differ", "similarity", "a_id", "a_title",
                         "a_text", "a_only", "b_id", "b_title", "b_text", "b_only", "why"])
        for p in page.pairs:
            writer.writerow([p.family, p.kind, str(p.values_differ).lower(),
                             f"{p.similarity:.4f}", p.a.id, p.a.title, p.a.text,
                             " ".join(p.a.only), p.b.id, p.b.title, p.b.text, " ".join(p.b.only),
                             "; ".join(p.why)])
        return out.getvalue()
    if isinstance(page, StaleTablesPage):
        writer.writerow(["database", "schema", "table", "cards", "examples", "last_seen",
                         "seen_by"])
        for t in page.rows:
            writer.writerow([t.database, t.schema, t.table, t.cards,
                             "; ".join(f"{e.title} ({e.id})" for e in t.examples),
                             t.last_seen.isoformat() if t.last_seen else "never",
                             t.seen_by or ""])
        return out.getvalue()
    rows = msgspec.to_builtins(page.rows)
    fields = list(NeverRecalledRow.__struct_fields__ if isinstance(page, NeverRecalledPage)
                  else UnhelpfulRow.__struct_fields__)
    writer.writerow(fields)
    for row in rows:
        writer.writerow(["never" if f == "last_recalled" and row[f] is None else row[f]
                         for f in fields])
    return out.getvalue()


class Reports:
    """The curation reports over ``db`` and, for the conflicts, the workspace's index
    (``index``, ``embedder``: the archive's; None: the conflicts report is unavailable)."""

    def __init__(self, db: Database, index: IndexEngine | None,
                 embedder: Embedder | None) -> None:
        self.db, self.index, self.embedder = db, index, embedder
        #: (workspace, families, similarity) -> (state, computed_at, seconds, compared, pairs)
        self._conflicts: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    async def _read(self, principal: Principal, workspace: str, query: ListQuery, days: int,
                    sort: str, sorts: tuple[str, ...],
                    read: Callable[[Any], Awaitable[tuple[list[dict[str, Any]], int]]],
                    ) -> tuple[list[dict[str, Any]], int]:
        """A report's rows and total: the permission, the window, page and sort checked, then
        ``read(conn)`` in a read-only transaction of the workspace.

        :raises NotFound: another workspace. :raises Forbidden: no ``memory.manage``.
        :raises InvalidInput: days, page, per_page or sort out of bounds."""
        principal.require(workspace, "memory.manage")
        _check(days, query.page, query.per_page)
        _sort(sort, sorts)
        async with self.db.transaction(workspace, read_only=True) as conn:
            await workspaces.get(conn, workspace)
            return await read(conn)

    async def never_recalled(self, principal: Principal, workspace: str, query: ListQuery,
                             days: int = 30, sort: str = "idle",
                             desc: bool | None = None) -> NeverRecalledPage:
        """The cards matching ``query``'s filters that no recall returned in the last ``days``
        days (1..3650), a page of ``query.per_page`` (1..100): sorted by ``idle`` (default: the
        longest without a recall first, counted from the last recall, else the creation),
        ``created`` (newest first), ``title`` or ``family``; ``desc`` reverses; ties by id.

        :raises NotFound: another workspace. :raises Forbidden: no ``memory.manage``.
        :raises InvalidInput: days, page, per_page, sort or a filter out of bounds.
        """
        rows, total = await self._read(
            principal, workspace, query, days, sort, get_args(NeverRecalledSort),
            lambda conn: reports.never_recalled(conn, query, days, sort, desc))
        return NeverRecalledPage(rows=[NeverRecalledRow(
            id=models.card_id_str(r["id"]), family=r["family"], title=r["title"],
            created_at=r["created_at"], last_recalled=r["last_recalled"],
            recalls=r["recalls"]) for r in rows], total=total, page=query.page,
            per_page=query.per_page, days=days)

    async def unhelpful(self, principal: Principal, workspace: str, query: ListQuery,
                        days: int = 30, min_feedback: int = 1, sort: str = "unhelpful",
                        desc: bool | None = None) -> UnhelpfulPage:
        """The cards matching ``query``'s filters with at least ``min_feedback`` (1..1000)
        ``not_helpful`` + ``wrong`` verdicts on the recalls of the last ``days`` days: sorted by
        ``unhelpful`` (default: those verdicts, most first), ``share`` (their share of the
        card's verdicts), ``recalls``, ``title`` or ``family``; ``desc`` reverses; ties by id.

        :raises NotFound: another workspace. :raises Forbidden: no ``memory.manage``.
        :raises InvalidInput: a parameter or filter out of bounds.
        """
        principal.require(workspace, "memory.manage")
        if not 1 <= min_feedback <= 1000:
            raise InvalidInput("min_feedback must be 1..1000", field="min_feedback")
        rows, total = await self._read(
            principal, workspace, query, days, sort, get_args(UnhelpfulSort),
            lambda conn: reports.unhelpful(conn, query, days, min_feedback, sort, desc))
        return UnhelpfulPage(rows=[UnhelpfulRow(
            id=models.card_id_str(r["id"]), family=r["family"], title=r["title"],
            created_at=r["created_at"], recalls=r["recalls"], helpful=r["helpful"],
            not_helpful=r["not_helpful"], wrong=r["wrong"]) for r in rows],
            total=total, page=query.page, per_page=query.per_page, days=days,
            min_feedback=min_feedback)

    async def stale_dependencies(self, principal: Principal, workspace: str, query: ListQuery,
                                 days: int = 30, sort: str = "stale",
                                 desc: bool | None = None) -> StaleTablesPage:
        """The tables named by the dependencies of the cards matching ``query``'s filters that
        nothing of the last ``days`` days (1..3650) showed in use: no recall narrowed to the
        table (``filters.table``) or returned a card that depends on it, and no schema-change
        run covered its schema without removing it. The archive does not read the databases'
        catalogues, so these are the tables to check first, not tables known to be gone (a run
        that removed a table has deleted its cards already). A page of ``query.per_page``
        tables sorted by ``stale`` (default: never seen first, then the longest unseen),
        ``table`` or ``cards`` (most first); ``desc`` reverses.

        :raises NotFound: another workspace. :raises Forbidden: no ``memory.manage``.
        :raises InvalidInput: days, page, per_page, sort or a filter out of bounds.
        """
        rows, total = await self._read(
            principal, workspace, query, days, sort, get_args(StaleSort),
            lambda conn: reports.stale_dependencies(conn, query, days, sort, desc))
        return StaleTablesPage(rows=[StaleTableRow(
            database=r["database_name"], schema=r["schema_name"], table=r["table_name"],
            cards=r["cards"], examples=[CardRef(id=models.card_id_str(uuid.UUID(e["id"])),
                                                title=e["title"]) for e in r["examples"]],
            last_seen=r["last_seen"], seen_by=r["seen_by"]) for r in rows],
            total=total, page=query.page, per_page=query.per_page, days=days)

    async def conflicts(self, principal: Principal, workspace: str, query: ListQuery,
                        min_similarity: float = DEFAULT_SIMILARITY, sort: str = "rank",
                        desc: bool | None = None) -> ConflictsPage:
        """Pairs of cards of one family, overlapping in scope and dependencies, whose stored
        ``key`` vectors have a cosine similarity of at least ``min_similarity`` (0.5..1): each
        current card's :data:`NEIGHBOURS` nearest cards of its family in the workspace's index.
        A pair is listed when either card matches ``query``'s filters (its family filter also
        narrows the families compared). Sorted by ``rank`` (default: possible contradictions,
        texts near but with other words, before duplicates; among them first those whose
        numbers or quoted values differ; each by similarity, highest first),
        ``similarity``, ``family`` or ``title`` (the first card's); ``desc`` reverses the sort.
        Only cards whose current revision is projected are compared (a card saved seconds ago
        joins once its projection completes).

        :raises NotFound: another workspace. :raises Forbidden: no ``memory.manage``.
        :raises InvalidInput: a parameter or filter out of bounds.
        :raises IndexUnavailable / IndexIncompatible / EmbedderUnavailable: no usable index.
        """
        principal.require(workspace, "memory.manage")
        _check(1, query.page, query.per_page)
        if not MIN_SIMILARITY <= min_similarity <= 1.0:
            raise InvalidInput(f"min_similarity must be {MIN_SIMILARITY}..1", field="min_similarity")
        _sort(sort, ConflictSort.__args__)  # type: ignore[attr-defined]
        families = tuple(sorted(query.family or models.FAMILIES))
        filtered = msgspec.structs.replace(query, family=[], page=1)
        async with self.db.transaction(workspace, read_only=True) as conn:
            await workspaces.get(conn, workspace)
            matching = (await reports.matching_ids(conn, query)
                        if filtered != ListQuery(per_page=query.per_page) else None)
            current = await reports.state(conn)
        key = (workspace, families, round(min_similarity, 4))
        held = self._conflicts.get(key)
        cached = held is not None and held[0] == current
        if not cached:
            held = (current, *await self._compute(workspace, families, min_similarity))
            self._conflicts.pop(key, None)
            self._conflicts[key] = held
            while len(self._conflicts) > CACHED_CONFLICTS:
                self._conflicts.pop(next(iter(self._conflicts)))
        assert held is not None
        _, computed_at, seconds, compared, pairs = held
        if matching is not None:
            pairs = [p for p in pairs if models.parse_card_id(p.a.id) in matching
                     or models.parse_card_id(p.b.id) in matching]
        pairs = _sorted_pairs(pairs, sort, desc)
        start = (query.page - 1) * query.per_page
        return ConflictsPage(pairs=pairs[start:start + query.per_page], total=len(pairs),
                             page=query.page, per_page=query.per_page,
                             min_similarity=min_similarity, compared=compared,
                             computed_at=computed_at, seconds=seconds, cached=cached)

    async def _compute(self, workspace: str, families: tuple[str, ...], min_similarity: float
                       ) -> tuple[datetime, float, int, list[ConflictPair]]:
        """Every candidate pair of ``families`` (see :meth:`conflicts`), best first: ``(when,
        seconds, cards compared, pairs)``."""
        if self.index is None:
            raise IndexUnavailable("this process has no index: the conflicts report needs one")
        if self.embedder is None:
            raise EmbedderUnavailable("this process has no embedder: the conflicts report "
                                      "needs the index's layout")
        started = time.perf_counter()
        async with self.db.transaction(workspace, read_only=True) as conn:
            language = (await workspaces.get(conn, workspace))["language"]
            recorded = await workspaces.index_collection(conn)
            rows = await reports.conflict_cards(conn, list(families))
        layout = self.embedder.layout(language, model=workspaces.model_of(recorded))
        read = (recorded or {}).get("collection")
        serving = await self.index.check_collection(workspace, layout, collection=read) \
            if read else None
        if serving is None:
            serving = await self.index.check_collection(workspace, layout)
        by_id = {r["id"]: r for r in rows}
        found: dict[tuple[uuid.UUID, uuid.UUID], float] = {}
        for family in families:
            ids = [r["id"] for r in rows if r["family"] == family]
            if serving is None or not ids:
                continue
            near = await self.index.neighbours(workspace, ids, KEY,
                                               IndexFilter(families=(family,)), NEIGHBOURS,
                                               collection=serving)
            for source, hits in near.items():
                for hit in hits:
                    other = by_id.get(hit.id)
                    if hit.score < min_similarity or other is None \
                            or other["revision"] != hit.revision:
                        continue  # too far, or a point of no current card
                    pair = (min(source, hit.id), max(source, hit.id))
                    found[pair] = max(found.get(pair, -1.0), hit.score)
        candidates = [(pair, score, why) for pair, score in found.items()
                      if (why := _why(by_id[pair[0]], by_id[pair[1]])) is not None]
        async with self.db.transaction(workspace, read_only=True) as conn:
            full = await cards.get_many(conn, sorted({i for p, _, _ in candidates for i in p}))
        pairs = []
        for (a, b), score, why in candidates:
            if a not in full or b not in full:
                continue  # deleted meanwhile
            ca, cb = full[a], full[b]
            ta, tb = key_text(ca), key_text(cb)
            wa, wb = _words(ta), _words(tb)
            only_a, only_b = _only(wa, wb), _only(wb, wa)
            duplicate = sorted(wa) == sorted(wb)
            values = not duplicate and _values(ta) != _values(tb)
            term_a, term_b = _defined_term(ca, ta), _defined_term(cb, tb)
            pairs.append(ConflictPair(
                family=ca.family, similarity=round(score, 4), why=why,
                kind="duplicate" if duplicate else "conflict", values_differ=values,
                same_term=term_a is not None and term_a == term_b,
                a=ConflictCard(id=ca.id, title=ca.title, scope=ca.scope, text=ta, only=only_a,
                               objects=by_id[a]["tables"]),
                b=ConflictCard(id=cb.id, title=cb.title, scope=cb.scope, text=tb, only=only_b,
                               objects=by_id[b]["tables"])))
        return (datetime.now(timezone.utc), round(time.perf_counter() - started, 3), len(rows),
                _sorted_pairs(pairs, "rank", None))


def _sorted_pairs(pairs: list[ConflictPair], sort: str, desc: bool | None) -> list[ConflictPair]:
    """``pairs`` in the order of ``sort`` (see :meth:`Reports.conflicts`), ties by the two ids."""
    keys = {
        "rank": lambda p: (p.kind != "conflict", not (p.same_term and p.values_differ),
                           not p.same_term, not p.values_differ, -p.similarity, p.a.id, p.b.id),
        "similarity": lambda p: (-p.similarity, p.a.id, p.b.id),
        "family": lambda p: (p.family, p.kind != "conflict", not p.values_differ, -p.similarity,
                             p.a.id, p.b.id),
        "title": lambda p: (p.a.title.lower(), p.b.title.lower(), p.a.id, p.b.id),
    }
    return sorted(pairs, key=keys[sort], reverse=bool(desc))
