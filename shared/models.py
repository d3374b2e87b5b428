"""Cards and requests as msgspec Structs, the archive's input bounds, the projection format.

DESIGN §2, §4, §5, §8. Request structs forbid unknown fields. :func:`validate_card_write`
applies the rules msgspec cannot express (family content, dependency gaps, duplicate links) and
normalises whitespace.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, get_args

import msgspec
from msgspec import Meta

from shared.enum_errors import with_allowed
from shared.errors import InvalidInput

# ---- bounds (each named in the 422 that enforces it) ----
MAX_TITLE = 200
MAX_SCOPE = 200
MAX_CONCEPT = 100
MAX_CONCEPTS = 50
MAX_DEPENDENCIES = 50
MAX_LINKS = 50
MAX_MEANING = 200
MAX_NAME = 200
MAX_TEXT = 20_000
MAX_SQL = 50_000
MAX_QUERY = 2_000
MAX_EXCLUDE = 500
MAX_TOP = 100
MAX_PER_PAGE = 100
MAX_WAIT_SECONDS = 30.0
MAX_BODY_BYTES = 1_000_000

# ---- projection format ----
#: Version of the projected text, payload and model set, recorded with every projection and
#: point. Raising it makes every older projection pending (DESIGN §4); ship a numbered migration
#: that records the change. Read it as ``models.PROJECTION_FORMAT`` when it is used, never copy
#: it at import time (a test raises it with ``monkeypatch``).
#: 1: migrations/002; 2: the privacy filter redacts secrets in the text and payload (migrations/005);
#: 3: four named vectors and linked questions (shared/projection/documents.py, migrations/006);
#: 4: two more named vectors on the card's own text, without linked questions (migrations/014).
PROJECTION_FORMAT = 4

# ---- the vocabulary: each word list written once, as a Literal; its tuple derived from it ----
Family = Literal["domain_clarification", "sql_rule", "solved_question", "explained_error"]
FAMILIES: tuple[str, ...] = get_args(Family)
Origin = Literal["manual", "workflow", "import"]
ORIGINS: tuple[str, ...] = get_args(Origin)
Mode = Literal["search", "rules", "solved"]
MODES: tuple[str, ...] = get_args(Mode)
#: What an import does with a line whose key is already a card's key in the workspace.
OnConflict = Literal["skip", "update"]
ON_CONFLICT: tuple[str, ...] = get_args(OnConflict)
#: how an import treats a line's provenance: ``import`` (the default) writes ``import`` or
#: ``manual`` cards and refuses a line that claims a review (origin ``workflow``, or a source
#: naming a session or decisions); ``restore`` keeps origin and source as written, for a file
#: that ``export`` wrote from this archive (issue 25, case 8)
ImportMode = Literal["import", "restore"]
IMPORT_MODES: tuple[str, ...] = get_args(ImportMode)
#: The orders of a card listing (API, CLI, explorer); :mod:`shared.store.listing` maps each to
#: its column and default direction.
Sort = Literal["updated", "created", "title", "family"]
SORTS: tuple[str, ...] = get_args(Sort)
#: A workspace's language: the stemmer of its BM25 side (and, for ``it``, its dense model when
#: ``MEMARC_DENSE_MODEL_IT`` is set).
Language = Literal["en", "it"]
LANGUAGES: tuple[str, ...] = get_args(Language)
#: A card's projection: ``current`` (recorded valid projection of its revision and format),
#: ``pending`` (not yet projected, so excluded from recall), ``failed`` (an operation exhausted
#: its attempts).
IndexStatus = Literal["current", "pending", "failed"]

#: Families each recall mode may return (DESIGN §5).
MODE_FAMILIES: dict[str, tuple[str, ...]] = {
    "search": ("domain_clarification", "sql_rule", "explained_error"),
    "rules": ("sql_rule", "explained_error"),
    "solved": ("solved_question",),
}

#: Content fields per family: (required, optional).
FAMILY_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "domain_clarification": (("definition",), ("context",)),
    "sql_rule": (("rule",), ("rationale",)),
    "solved_question": (("question", "sql"), ("context",)),
    "explained_error": (("error", "correction"), ("rationale",)),
}

CARD_ID_RE = re.compile(r"^mem-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")

Name = Annotated[str, Meta(min_length=1, max_length=MAX_NAME)]
CardRef = Annotated[str, Meta(min_length=1, max_length=60)]


def card_id_str(card_uuid: uuid.UUID) -> str:
    """The public id of a card: ``mem-<UUID>``."""
    return f"mem-{card_uuid}"


def parse_card_id(card_id: str) -> uuid.UUID | None:
    """The UUID inside a ``mem-<UUID>`` id, or None when the text is not such an id.

    The one parser of card ids: an id is accepted in any case and with surrounding whitespace
    (``' MEM-<UUID> '``); a bare UUID, another prefix or a malformed UUID is not an id.
    """
    m = CARD_ID_RE.match(card_id.strip().lower()) if isinstance(card_id, str) else None
    return uuid.UUID(m.group(1)) if m else None


def normalize_card_ref(ref: str) -> str:
    """A reference that may name a card, in the spelling every comparison uses: a card id
    (as :func:`parse_card_id` accepts it) becomes ``mem-<uuid>`` (lower case, trimmed); anything
    else (the key of a proposal or of an import line, a malformed id) is returned unchanged, for
    the caller to resolve or refuse."""
    cid = parse_card_id(ref)
    return card_id_str(cid) if cid is not None else ref


def parse_time_bound(name: str, raw: str | None) -> datetime | None:
    """A list bound such as ``updated_after``: a date (``YYYY-MM-DD``, midnight UTC) or an ISO 8601
    timestamp (UTC when it has no offset); empty means no bound.

    :raises InvalidInput: neither a date nor a timestamp (names ``name``).
    """
    text = (raw or "").strip()
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise InvalidInput(f"{name} must be a date (YYYY-MM-DD) or an ISO timestamp, not {text[:40]!r}",
                           field=name) from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


class Dependency(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=False):
    """A prefix of ``database.schema.table.column``: database required, no gaps."""

    database: Name
    schema: Name | None = None
    table: Name | None = None
    column: Name | None = None

    def key(self) -> tuple[str, str | None, str | None, str | None]:
        """Tuple form, for sorting and de-duplication."""
        return (self.database, self.schema, self.table, self.column)

    def qualified(self) -> str:
        """Dotted name, e.g. ``db.public.orders.id``."""
        return ".".join(p for p in self.key() if p)


class LinkIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """An outgoing link to a card of the same workspace."""

    target: CardRef
    meaning: Annotated[str, Meta(max_length=MAX_MEANING)] = ""


class Source(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """Where a card came from: a reviewed workflow session, or an imported dataset record."""

    session_id: Annotated[str, Meta(max_length=200)] | None = None
    decision_ids: Annotated[list[Annotated[str, Meta(max_length=200)]], Meta(max_length=50)] = []
    dataset: Annotated[str, Meta(max_length=200)] | None = None
    record: Annotated[str, Meta(max_length=200)] | None = None


class CardWrite(msgspec.Struct, forbid_unknown_fields=True):
    """Body of a card create (``revision`` absent) or update (``revision`` = the one edited)."""

    family: Family
    title: Annotated[str, Meta(max_length=MAX_TITLE)]
    content: Annotated[dict[str, str], Meta(max_length=8)]
    scope: Annotated[str, Meta(max_length=MAX_SCOPE)] | None = None
    concepts: Annotated[list[Annotated[str, Meta(max_length=MAX_CONCEPT)]], Meta(max_length=MAX_CONCEPTS)] = []
    dependencies: Annotated[list[Dependency], Meta(max_length=MAX_DEPENDENCIES)] = []
    links: Annotated[list[LinkIn], Meta(max_length=MAX_LINKS)] = []
    revision: Annotated[int, Meta(ge=1)] | None = None


class ImportCard(msgspec.Struct, forbid_unknown_fields=True):
    """One line of a cards file: a card with its ``key`` (what makes an import idempotent: a
    card imported under a key is that key's card in its workspace); links name other lines' keys,
    keys of cards already in the workspace, or card ids."""

    key: Annotated[str, Meta(min_length=1, max_length=200)]
    family: Family
    title: Annotated[str, Meta(max_length=MAX_TITLE)]
    content: Annotated[dict[str, str], Meta(max_length=8)]
    scope: Annotated[str, Meta(max_length=MAX_SCOPE)] | None = None
    concepts: Annotated[list[Annotated[str, Meta(max_length=MAX_CONCEPT)]], Meta(max_length=MAX_CONCEPTS)] = []
    dependencies: Annotated[list[Dependency], Meta(max_length=MAX_DEPENDENCIES)] = []
    links: Annotated[list[LinkIn], Meta(max_length=MAX_LINKS)] = []
    source: Source | None = None
    #: the origin of the card it creates (an export keeps each card's); absent: ``import``
    origin: Origin | None = None


class CaseEntry(msgspec.Struct, forbid_unknown_fields=True):
    """A curated recall evaluation case in a cards file (issue 34): its ``key`` (``case-<id>``
    as exported; a key names the case in later imports of the same workspace), the question,
    mode, filters, expected cards by key or card id (as links name them), ``match`` and note."""

    key: Annotated[str, Meta(min_length=1, max_length=200)]
    question: Annotated[str, Meta(min_length=1, max_length=MAX_QUERY)]
    mode: Mode
    expected: Annotated[list[CardRef], Meta(min_length=1, max_length=20)]
    filters: Filters | None = None
    match: Literal["any", "all"] = "any"
    note: Annotated[str, Meta(max_length=2000)] | None = None


class CaseLine(msgspec.Struct, forbid_unknown_fields=True):
    """A cards-file line that holds a curated evaluation case instead of a card."""

    evaluation_case: CaseEntry


class Link(msgspec.Struct, frozen=True):
    """A link as stored: target card id and meaning."""

    target: str
    meaning: str


class IncomingLink(msgspec.Struct, frozen=True):
    """A link into a card: the source card id, its title and the meaning."""

    source: str
    title: str
    meaning: str


class Card(msgspec.Struct, kw_only=True):
    """A card rebuilt from PostgreSQL.

    ``index_status``: ``current`` (recorded valid projection of this revision and format),
    ``pending`` (not yet projected, so excluded from recall) or ``failed`` (an operation exhausted
    its attempts; retry it).
    """

    id: str
    workspace: str
    family: Family
    title: str
    scope: str | None
    origin: Origin
    source: Source | None
    concepts: list[str]
    dependencies: list[Dependency]
    links: list[Link]
    content: dict[str, str]
    revision: int
    created_at: datetime
    updated_at: datetime
    index_status: IndexStatus = "pending"


class Filters(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """Recall filters (DESIGN §5): scope exact, concepts all required, physical context by one entry."""

    scope: Annotated[str, Meta(max_length=MAX_SCOPE)] | None = None
    concepts: Annotated[list[Annotated[str, Meta(max_length=MAX_CONCEPT)]], Meta(max_length=MAX_CONCEPTS)] = []
    database: Name | None = None
    schema: Name | None = None
    table: Name | None = None
    column: Name | None = None

    def physical(self) -> tuple[str | None, str | None, str | None, str | None]:
        """The physical context as a tuple."""
        return (self.database, self.schema, self.table, self.column)


class ShadowRequest(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Body of ``POST .../index`` for a shadow rebuild (docs/evaluation.md, "Changing the model
    safely"): build the workspace's index anew with another dense model, ``model_path`` (a
    model folder under ``MEMARC_MODEL_ROOT``) and/or ``model`` (its fastembed model id;
    default: the configured ``MEMARC_DENSE_MODEL``), while recall keeps serving the current
    one; evaluate both on the same cases and switch only when the new one is not worse, or
    when ``force`` says so."""

    model_path: Annotated[str, Meta(min_length=1, max_length=1000)] | None = None
    model: Annotated[str, Meta(min_length=1, max_length=200)] | None = None
    force: bool = False


class EmptyRequest(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The body of a ``POST`` that takes no member (``POST …/evaluations``,
    ``POST …/index/switch-back``): none, or ``{}``; an unknown member is a 400, so a caller
    that sends one learns it had no effect."""


class IndexRequest(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Body of ``POST .../index`` (optional): ``shadow`` makes it a shadow rebuild."""

    shadow: ShadowRequest | None = None


class SearchRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of ``POST .../search``: query text, result count, mode, families, filters, exclusions,
    and optionally the caller's workflow ``session``: the cards decided in that session (accepted
    or rejected, ``POST .../sessions/{id}/decisions``) are excluded like ``exclude`` and never act
    as bridges in link expansion (DESIGN §5). ``min_score``: leave out results whose
    ``similarity`` is below this cosine similarity (-1..1), or below the workspace's floor for
    the mode with ``"floor"`` (none known: nothing is left out); see
    :mod:`shared.recall.floor`."""

    query: Annotated[str, Meta(min_length=1, max_length=MAX_QUERY)]
    top: Annotated[int, Meta(ge=1, le=MAX_TOP)] = 10
    mode: Mode = "search"
    family: Annotated[list[Family], Meta(max_length=4)] | None = None
    filters: Filters | None = None
    exclude: Annotated[list[CardRef], Meta(max_length=MAX_EXCLUDE)] = []
    session: Annotated[str, Meta(min_length=1, max_length=200)] | None = None
    min_score: Annotated[float, Meta(ge=-1.0, le=1.0)] | Literal["floor"] | None = None


class Retrieval(msgspec.Struct, omit_defaults=True):
    """Why a result was returned: the strongest link path and, for seeds, the seed rank and the
    rank in each branch that found it (absent: not found by that branch, or not searched by the
    mode): ``dense`` and ``bm25`` on the card's text, ``key`` and ``key_bm25`` on its key text,
    ``own`` and ``own_bm25`` on its own text (without linked questions)."""

    path: list[str]
    seed_rank: int | None = None
    dense_rank: int | None = None
    bm25_rank: int | None = None
    key_rank: int | None = None
    key_bm25_rank: int | None = None
    own_rank: int | None = None
    own_bm25_rank: int | None = None


class RecallResult(msgspec.Struct):
    """One verified recall result; ``score`` is a ranking score, not a similarity.
    ``similarity``: the strongest cosine similarity between the query and the card's dense
    vectors that the mode searches, or, for a card reached through a link, that of the card
    it was reached from when higher (None: the card has none of those vectors);
    ``below_floor``: the similarity is below the workspace's floor for the mode, under which
    an evaluation almost never found an expected card (:mod:`shared.recall.floor`)."""

    card: Card
    score: float
    retrieval: Retrieval
    similarity: float | None = None
    below_floor: bool = False


#: The budgets of link expansion a recall can hit (DESIGN §5 step 3,
#: :mod:`shared.recall.expansion`).
ExpansionBudget = Literal["links_per_card", "links", "lookups"]


class ExpansionSummary(msgspec.Struct):
    """How a recall's link expansion went (DESIGN §5 step 3): ``truncated`` when one of its
    budgets cut it short, ``budgets`` naming which (``links_per_card``: a card had more outgoing
    links than the 20 followed; ``links``: the 400 links in total; ``lookups``: the 200 card
    look-ups), with the links it inspected and the cards it looked up. All zero and false when
    nothing was expanded (no verified seed)."""

    truncated: bool
    lookups: int
    links_inspected: int
    budgets: list[ExpansionBudget]

    @classmethod
    def none(cls) -> "ExpansionSummary":
        """The summary of a recall that expanded nothing."""
        return cls(truncated=False, lookups=0, links_inspected=0, budgets=[])


class RecallResponse(msgspec.Struct):
    """Recall response; ``excluded`` counts index hits dropped by verification, ``expansion``
    says how link expansion went (and whether a budget cut it short). ``not_indexed``: how many
    of the workspace's cards were saved but are not indexed yet (their projection is pending,
    running or failed), which no recall can return until the worker indexes them: 0 when the
    index is up to date; a caller should say that the answer may be incomplete otherwise.
    ``floor``: the workspace's similarity floor for the mode (None: no evaluation of the
    serving model has made one yet). ``recall_id``: the id of this recall's record (migration
    026, docs/usage.md); None when none was written: PostgreSQL refused or could not take it,
    or the recall is not one a caller asked (an evaluation run's)."""

    results: list[RecallResult]
    excluded: int
    expansion: ExpansionSummary
    not_indexed: int = 0
    floor: float | None = None
    recall_id: str | None = None


Verdict = Literal["helpful", "not_helpful", "wrong"]
#: how feedback reached the archive (``recall_feedback.via``, migration 027)
FeedbackVia = Literal["api", "mcp", "explorer", "admin", "review"]
MAX_FEEDBACK_NOTE = 2000


class CardVerdict(msgspec.Struct, forbid_unknown_fields=True):
    """One card's verdict in ``POST .../recalls/{recall_id}/feedback``: ``helpful`` (the card
    applied and was used), ``not_helpful`` (it did not apply to the question), ``wrong`` (its
    content is wrong or stale); ``note``: why, for the curators (through the privacy filter)."""

    card_id: CardRef
    verdict: Verdict
    note: Annotated[str, Meta(max_length=MAX_FEEDBACK_NOTE)] | None = None


class FeedbackRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of ``POST .../recalls/{recall_id}/feedback``: verdicts on 1..100 of the cards that
    recall returned, each card at most once."""

    cards: Annotated[list[CardVerdict], Meta(min_length=1, max_length=MAX_TOP)]


def reject_nul(text: str | None, field: str) -> None:
    """:raises InvalidInput: ``text`` contains a NUL character (PostgreSQL text cannot)."""
    if text and "\x00" in text:
        raise InvalidInput(f"{field} must not contain NUL characters", field=field)


def clean_session_id(session_id: str, field: str = "session_id") -> str:
    """A workflow session id, trimmed (the id of the caller's workflow session: its proposals,
    its decided cards, the session a recall runs in).

    :raises InvalidInput: blank, over 200 characters, a ``/`` (no session route can name it, so
        no such session can hold proposals or decided cards), ``.`` or ``..`` (browsers and
        proxies resolve such a path segment away, so its review page could not be opened) or a
        NUL character (names ``field``).
    """
    session_id = session_id.strip()
    if not session_id or len(session_id) > 200:
        raise InvalidInput("a session id is 1..200 characters", field=field)
    if "/" in session_id:
        raise InvalidInput("a session id cannot contain '/'", field=field)
    if session_id in (".", ".."):
        raise InvalidInput(f"a session id cannot be {session_id!r}: it names no page in a URL",
                           field=field)
    reject_nul(session_id, field)
    return session_id


def _clean(text: str) -> str:
    return text.strip()


def _bad(message: str, field: str) -> InvalidInput:
    return InvalidInput(message, field=field)


def content_limit(name: str) -> int:
    """Longest text, in characters, of the content field ``name``: :data:`MAX_SQL` for ``sql``,
    ``error`` and ``correction`` (they hold SQL), :data:`MAX_TEXT` for the others."""
    return MAX_SQL if name in ("sql", "correction", "error") else MAX_TEXT


def validate_card_write(body: CardWrite | ImportCard) -> None:
    """Normalise and check a card body in place.

    Link targets that are card ids are normalised (:func:`normalize_card_ref`).

    :raises InvalidInput: empty title, missing or unknown content field, over-long text,
        a dependency with a gap, NUL characters, or duplicate links (two spellings of one card
        id are the same target).
    """
    body.title = _clean(body.title)
    if not body.title:
        raise _bad("title must not be empty", "title")
    if body.scope is not None:
        body.scope = body.scope.strip() or None
    required, optional = FAMILY_FIELDS[body.family]
    content: dict[str, str] = {}
    for name, value in body.content.items():
        if name not in required and name not in optional:
            allowed = ", ".join(required + optional)
            raise _bad(f"content field {name!r} is not allowed for {body.family} (allowed: {allowed})",
                       f"content.{name}")
        value = value.strip()
        limit = content_limit(name)
        if len(value) > limit:
            raise _bad(f"content.{name} is longer than {limit} characters", f"content.{name}")
        if value:
            content[name] = value
    for name in required:
        if name not in content:
            raise _bad(f"content.{name} is required for {body.family}", f"content.{name}")
    body.content = content
    named = [("title", body.title), ("scope", body.scope or ""),
             *((f"content.{k}", v) for k, v in content.items()),
             *((f"concepts[{i}]", c) for i, c in enumerate(body.concepts)),
             *((f"dependencies[{i}]", p or "") for i, d in enumerate(body.dependencies)
               for p in d.key()),
             *((f"links[{i}]", f"{link.target}{link.meaning}") for i, link in enumerate(body.links))]
    source = getattr(body, "source", None)
    if source is not None:
        named += [("source", str(msgspec.to_builtins(source)))]
    for field, text in named:
        if "\x00" in text:
            raise _bad(f"{field} must not contain NUL characters", field)
    concepts: list[str] = []
    for c in body.concepts:
        c = c.strip()
        if not c:
            raise _bad("concepts must not be empty strings", "concepts")
        if c not in concepts:
            concepts.append(c)
    body.concepts = concepts
    seen_deps: set[tuple] = set()
    deps: list[Dependency] = []
    for i, d in enumerate(body.dependencies):
        parts = [p.strip() if p is not None else None for p in d.key()]
        if any(p == "" for p in parts):
            raise _bad(f"dependencies[{i}] has an empty name", f"dependencies[{i}]")
        if parts[3] is not None and parts[2] is None:
            raise _bad(f"dependencies[{i}]: a column needs its table", f"dependencies[{i}]")
        if parts[2] is not None and parts[1] is None:
            raise _bad(f"dependencies[{i}]: a table needs its schema (use 'public' for sources "
                       "without schemas)", f"dependencies[{i}]")
        dep = Dependency(*parts)  # type: ignore[arg-type]
        if dep.key() not in seen_deps:
            seen_deps.add(dep.key())
            deps.append(dep)
    body.dependencies = deps
    # card ids in one spelling first, so that two spellings of one card are a duplicate
    body.links = [link if (target := normalize_card_ref(link.target)) == link.target
                  else msgspec.structs.replace(link, target=target) for link in body.links]
    targets: set[str] = set()
    for i, link in enumerate(body.links):
        if link.target in targets:
            raise _bad(f"links[{i}]: duplicate link to {link.target}", f"links[{i}]")
        targets.add(link.target)


def decode_json(data: bytes, type_: Any) -> Any:
    """Decode and validate JSON into ``type_``.

    :raises BadRequest: malformed JSON. :raises InvalidInput: wrong shape or out of bounds.
    """
    from shared.errors import BadRequest

    try:
        return msgspec.json.decode(data, type=type_)
    except msgspec.ValidationError as exc:
        raise InvalidInput(with_allowed(str(exc), type_)) from exc
    except msgspec.DecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc}") from exc


def convert(obj: Any, type_: Any) -> Any:
    """Validate an already-decoded object into ``type_``.

    :raises InvalidInput: wrong shape or out of bounds (an enum error lists the allowed values).
    """
    try:
        return msgspec.convert(obj, type=type_)
    except msgspec.ValidationError as exc:
        raise InvalidInput(with_allowed(str(exc), type_)) from exc
