"""Evaluation cases (issue 34, ``docs/evaluation.md``): what recall is asked, and which cards it
should return.

Two sources:

- **derived**, rebuilt from the archive at every run (nothing stored), from each solved question
  projected in the current format:

  - ``solved``: the question asks for its own card in ``solved`` mode. Leave-one-out: the card's
    key vectors (``key``, ``key_bm25``: the stored question itself, which would match exactly)
    are left out for this case, and the card stands in those branches with the scores of its
    content vectors (question, SQL and context: ``dense`` for ``key``, ``bm25`` for
    ``key_bm25``), while every other card keeps its own key vectors;
  - ``linked``: for each card it links to (projected), the question asks for that card, in
    ``rules`` mode for an SQL rule or an explained error and in ``search`` mode for a
    clarification, filtered to the solved question's database when its dependencies name exactly
    one. Leave-one-out: a clarification or a rule is indexed with the questions of the solved
    cards that link to it (document expansion, :mod:`shared.projection.documents`), so its
    ``dense`` and ``bm25`` vectors contain this very question; for this case the card stands in
    those branches with the scores of its own-text vectors (``own``, ``own_bm25``: the same
    text without any linked question), while every other card keeps its expanded vectors. This
    is stricter than a new question meets (the other linking questions, left out too, would
    still help it), so derived ``search`` figures are a lower bound. The stand-in holds in every
    mode: the production ``rules`` profile fuses no vector with linked questions (nothing changes
    for it), but a profile that does (a peer's ``dense``/``bm25``, or a future one) is measured
    without the case's own question too.

- **title** (issue 42), rebuilt at every run too: a stable sample of :data:`TITLE_SAMPLE` cards
  other than solved questions (by the md5 of their title: the same sample in every import), each asked by its own title in the mode
  of its family (``search`` for a clarification, ``rules`` for a rule or an explained error),
  expected first (any card of the same title counts). Nothing is left out: the title is in the
  card's own text, so recall should put it first; it guards ranking against a defect that buries
  an obvious direct hit (a link formula that lifted linked cards above it), and is kept apart
  from the derived figures so that those keep measuring recall of new questions.

- **curated**: cases people write (``memory.manage``: API, CLI, administration), stored in
  ``eval_cases`` (migration 024): a question, a mode, optional filters and one to 20 expected
  cards, of which recall should return ``any`` (the best-ranked counts) or ``all`` (the
  worst-ranked counts). Nothing is left out.

A case's ``key`` names it across runs (``solved:<card>``, ``linked:<solved card>:<card>``,
``title:<card>``, ``curated:<case id>``): two runs are compared on the keys they share.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from shared import models
from shared.auth import Principal
from shared.errors import InvalidInput
from shared.index.engine import BM25, DENSE, KEY, KEY_BM25, OWN, OWN_BM25
from shared.models import (CardRef, Filters, Mode, SearchRequest, card_id_str, parse_card_id,
                           reject_nul)
from shared.projection.documents import EXPANDED_FAMILIES
from shared.recall.eligibility import build_filter
from shared.store import evaluations as store
from shared.store.database import Connection

Source = Literal["derived", "title", "curated"]
Match = Literal["any", "all"]
SOURCES: tuple[Source, ...] = ("derived", "title", "curated")
#: cards a run asks by their own title (the ``title`` cases): about 6 % more recalls on BIRD
TITLE_SAMPLE = 100
#: the recall mode of a derived ``linked`` case, by the linked card's family
LINKED_MODE: dict[str, Mode] = {"sql_rule": "rules", "explained_error": "rules",
                                "domain_clarification": "search"}
MAX_EXPECTED = 20


class Case(msgspec.Struct, frozen=True, kw_only=True):
    """One evaluation case as a run asks it. ``stand_in``: the vectors of a card left out of
    the branches for this case (the leave-one-out of derived cases; empty for curated ones),
    as ``{card: {branch: the branch whose score it takes}}``
    (:func:`shared.recall.verified.recall`'s ``stand_in``)."""

    key: str
    source: Source
    kind: Literal["solved", "linked", "title", "curated"]
    question: str
    mode: Mode
    filters: Filters | None = None
    expected: tuple[uuid.UUID, ...]
    match: Match = "any"
    stand_in: dict[uuid.UUID, dict[str, str]] = {}


class CaseWrite(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Body of a curated case (create, update, import): the question recall is asked, its mode,
    optional filters, the expected card ids (1..20) and whether ``any`` or ``all`` of them must
    be returned; ``note``: why the case exists (for people)."""

    question: Annotated[str, Meta(min_length=1, max_length=models.MAX_QUERY)]
    mode: Mode
    expected: Annotated[list[CardRef], Meta(min_length=1, max_length=MAX_EXPECTED)]
    filters: Filters | None = None
    match: Match = "any"
    note: Annotated[str, Meta(max_length=2000)] | None = None


class CuratedCase(msgspec.Struct, kw_only=True):
    """A stored curated case, as the API answers it (``expected``: card ids ``mem-…``)."""

    id: str
    question: str
    mode: Mode
    filters: Filters | None
    expected: list[str]
    match: Match
    note: str | None
    created_by: str
    created_at: datetime
    updated_at: datetime


def curated_view(row: dict[str, Any]) -> CuratedCase:
    """A stored row as :class:`CuratedCase`."""
    filters = msgspec.convert(row["filters"], Filters) if row["filters"] else None
    return CuratedCase(id=str(row["id"]), question=row["question"], mode=row["mode"],
                       filters=filters, expected=[card_id_str(c) for c in row["expected"]],
                       match=row["match"], note=row["note"], created_by=row["created_by"],
                       created_at=row["created_at"], updated_at=row["updated_at"])


def case_values(body: CaseWrite, principal: Principal | None = None) -> dict[str, Any]:
    """The stored values of a curated case body. A case is asked as a recall is, so its
    question and filters are checked as ``POST …/search`` checks them
    (:func:`shared.recall.eligibility.build_filter`), for ``principal``'s database/schema
    binding when given: a case no caller could send is refused, not stored.

    :raises InvalidInput: a blank question, a NUL character in the question, the note or a
        filter, a physical filter with a gap, an expected id that is not a card id, or one
        named twice. :raises Forbidden: a filter outside ``principal``'s binding.
    """
    if not body.question.strip():
        raise InvalidInput("the question is blank", field="question")
    reject_nul(body.question, "question")
    reject_nul(body.note, "note")
    build_filter(principal or Principal(workspace="", permissions=frozenset(), actor=""),
                 SearchRequest(query=body.question, mode=body.mode, filters=body.filters))
    expected: list[uuid.UUID] = []
    for n, ref in enumerate(body.expected):
        cid = parse_card_id(ref)
        if cid is None:
            raise InvalidInput(f"expected[{n}] {ref!r} is not a card id", field="expected")
        if cid in expected:
            raise InvalidInput(f"expected[{n}] names {ref} twice", field="expected")
        expected.append(cid)
    return {"question": body.question, "mode": body.mode,
            "filters": msgspec.to_builtins(body.filters) if body.filters else {},
            "expected": expected, "match": body.match, "note": body.note}


def _curated(row: dict[str, Any]) -> Case:
    filters = msgspec.convert(row["filters"], Filters) if row["filters"] else None
    return Case(key=f"curated:{row['id']}", source="curated", kind="curated",
                question=row["question"], mode=row["mode"], filters=filters,
                expected=tuple(row["expected"]), match=row["match"])


def derived_cases(rows: list[dict[str, Any]]) -> list[Case]:
    """The derived cases of the solved questions ``rows``
    (:func:`shared.store.evaluations.solved_cards`), in row order: each one's ``solved`` case,
    then its ``linked`` cases in target-id order (see the module docstring)."""
    out: list[Case] = []
    for row in rows:
        cid, question = row["id"], row["question"]
        dbs = row["databases"] or []
        out.append(Case(key=f"solved:{card_id_str(cid)}", source="derived", kind="solved",
                        question=question, mode="solved", expected=(cid,),
                        stand_in={cid: {KEY: DENSE, KEY_BM25: BM25}}))
        flt = Filters(database=dbs[0]) if len(dbs) == 1 else None
        for target, family in zip(row["targets"] or [], row["target_families"] or []):
            mode = LINKED_MODE.get(family)
            if mode is None:  # a link to another solved question: not a rule to recall
                continue
            # in every mode: a profile that fuses ``dense``/``bm25`` (search; a peer's or a
            # future profile in rules mode) must not find the card by this very question
            swap = {target: {DENSE: OWN, BM25: OWN_BM25}} if family in EXPANDED_FAMILIES else {}
            out.append(Case(key=f"linked:{card_id_str(cid)}:{card_id_str(target)}",
                            source="derived", kind="linked", question=question, mode=mode,
                            filters=flt, expected=(target,), stand_in=swap))
    return out


def title_cases(rows: list[dict[str, Any]]) -> list[Case]:
    """The ``title`` cases of ``rows`` (:func:`shared.store.evaluations.title_cards`), in row
    order: each card asked by its title in its family's mode, any card of that title expected."""
    out: list[Case] = []
    for row in rows:
        mode = LINKED_MODE.get(row["family"])
        if mode is None:
            continue
        expected = tuple(row["same_title"] or (row["id"],))
        out.append(Case(key=f"title:{card_id_str(row['id'])}", source="title", kind="title",
                        question=row["title"], mode=mode, expected=expected))
    return out


async def gather(conn: Connection) -> tuple[list[Case], int]:
    """Every case of the workspace (derived, title, then curated) and how many curated cases were
    left out because an expected card is missing or not projected in the current format (a
    deleted card, or one whose index update is still pending)."""
    fmt = models.PROJECTION_FORMAT
    cases = derived_cases(await store.solved_cards(conn, fmt))
    cases += title_cases(await store.title_cards(conn, fmt, TITLE_SAMPLE))
    curated = [_curated(r) for r in await store.cases(conn)]
    wanted = sorted({c for case in curated for c in case.expected}, key=str)
    present = await store.projected(conn, wanted, fmt) if wanted else set()
    kept = [c for c in curated if all(e in present for e in c.expected)]
    return cases + kept, len(curated) - len(kept)
