"""The workflow's rules (DESIGN §6), pure, no I/O: proposals, links, reuse, staleness, changes.

What a proposal is (an :class:`Addition` or an :class:`Update`) and the checks of one, the card
body it would write, its link targets, the reuse of an existing card, the staleness of an update,
and what an update would change.

The use cases (:mod:`shared.archive.sessions`) read the archive's state through the store and hand
it to these functions; every rule is written once here and used by propose, summary and review.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import msgspec

from shared.errors import ArchiveError, InvalidInput
from shared.models import (FAMILY_FIELDS, Card, CardWrite, Dependency, LinkIn, card_id_str,
                           normalize_card_ref, parse_card_id, reject_nul,
                           validate_card_write)
from shared.workflow.normalise import normalised_text
from shared.workflow.requests import (CardPreview, CardRevision, DecideRequest, FieldChange,
                                      PossibleDuplicate, Proposal, ProposalLink, ReviewEdits,
                                      ReviewRequest)

#: When an addition reuses an existing card instead of creating one (DESIGN §6): it is the same
#: card, field by field (:func:`identity`): same family; every content field equal up to
#: whitespace at its ends and runs of whitespace
#: (:func:`~shared.workflow.normalise.normalised_text`: collapsed in prose and between SQL tokens,
#: never inside a SQL string literal, quoted identifier or comment, or a quoted literal or code
#: span in prose; case is never folded); the same scope; the same set of concepts and of
#: dependencies. The title and links do not decide. Anything else is an addition; an existing
#: card whose content matches loosely (PostgreSQL ``normalized_content()``, migration 003:
#: whitespace collapsed and lower-cased) is shown as a *possible duplicate*, never reused.
NORMALISATION = ("same family; content equal up to whitespace at the ends and runs of whitespace "
                 "(never inside SQL string literals, never case-folded); same scope, concepts and "
                 "dependencies")

#: The content fields holding SQL (compared as SQL: whitespace between tokens only).
SQL_FIELDS: dict[str, frozenset[str]] = {"solved_question": frozenset({"sql"})}

#: The fields of a card that decide whether an addition is the same card (besides the family).
IDENTITY_FIELDS = ("content", "scope", "concepts", "dependencies")

#: What each family needs to be reusable knowledge (the family's required content fields).
REUSABLE: dict[str, str] = {
    "domain_clarification": "a definition",
    "sql_rule": "a rule",
    "solved_question": "a question and its SQL",
    "explained_error": "an error and its correction",
}

Action = Literal["create", "reuse", "update"]
#: What a review did, by what it would do (a receipt's ``items[].action``).
DONE: dict[Action, Literal["created", "reused", "updated"]] = {
    "create": "created", "reuse": "reused", "update": "updated"}


# ---- what a proposal is ----

class Addition(msgspec.Struct, frozen=True, kw_only=True):
    """A proposed new card: family, title and reusable content are required."""

    kind: ClassVar[str] = "addition"
    key: str
    decision_ids: list[str]
    family: str
    title: str
    content: dict[str, str]
    scope: str | None = None
    concepts: list[str] = []
    dependencies: list[Dependency] = []
    links: list[ProposalLink] = []


class Update(msgspec.Struct, frozen=True, kw_only=True):
    """A proposed change of card ``card_id``, drafted against its ``revision``. Every field given
    (not None) replaces the card's (``content`` as a whole); ``family``, when given, must be the
    card's."""

    kind: ClassVar[str] = "update"
    key: str
    decision_ids: list[str]
    card_id: uuid.UUID
    revision: int
    family: str | None = None
    title: str | None = None
    content: dict[str, str] | None = None
    scope: str | None = None
    concepts: list[str] | None = None
    dependencies: list[Dependency] | None = None
    links: list[ProposalLink] | None = None


Draft = Addition | Update


def approved(decisions: Iterable[Any]) -> list[str]:
    """The ids of the decisions whose status is ``approved`` (any case), trimmed."""
    return [d.id.strip() for d in decisions if d.status.strip().lower() == "approved"]


def at_item(where: str, key: str, exc: ArchiveError) -> ArchiveError:
    """``exc`` again, naming the failing item (``where`` and its key) in message and field."""
    field = exc.extra.get("field")
    extra = {**exc.extra, "field": f"{where}.{field}" if field else where, "item": key}
    return type(exc)(f"{where} (key {key!r}): {exc.message}", **extra)


def _refused(where: str, key: str, message: str, field: str) -> InvalidInput:
    return InvalidInput(f"{where} (key {key!r}): {message}", field=f"{where}.{field}", item=key)


def check_decisions(req: DecideRequest) -> list[tuple[uuid.UUID, str]]:
    """The decisions of a decide request as ``(card uuid, decision)`` in request order: each a
    card id (any spelling :func:`~shared.models.parse_card_id` accepts), each card once.

    :raises InvalidInput: a card id that is not one, or a card named twice (in any spelling;
    the later one is named).
    """
    out: dict[uuid.UUID, str] = {}
    for i, d in enumerate(req.decisions):
        where = f"decisions[{i}].card_id"
        cid = parse_card_id(d.card_id)
        if cid is None:
            raise InvalidInput(f"{where} {d.card_id!r} is not a card id (mem-<uuid>)", field=where)
        if cid in out:
            raise InvalidInput(f"{where}: card {card_id_str(cid)} is decided twice in this "
                               "request (one decision per card)", field=where,
                               card_id=card_id_str(cid))
        out[cid] = d.decision
    return list(out.items())


def check_reusable(family: str, content: dict[str, str], where: str, key: str) -> None:
    """A proposal is reusable knowledge only with every required content field of its family
    (:data:`REUSABLE`): a bare table choice or an unexplained failure is not.

    :raises InvalidInput: a required field is missing or blank (``field``: ``<where>.content``).
    """
    required, _ = FAMILY_FIELDS[family]
    missing = [f for f in required if not (content.get(f) or "").strip()]
    if missing:
        raise InvalidInput(f"{where} (key {key!r}): no reusable content: a {family} needs "
                           f"{REUSABLE[family]} (missing {', '.join(missing)})",
                           field=f"{where}.content", item=key)


def draft(p: Proposal, where: str) -> Draft:
    """The proposal a wire :class:`Proposal` states, after the checks that need no database: NUL
    characters, a well-formed key, an approved decision, and the fields its kind requires (an
    addition: family, title and reusable content, no card; an update: the card and the revision
    it was drafted against, and at least one changed field).

    Card ids in ``p`` (``card_id``, link targets) are normalised in place first
    (:func:`~shared.models.normalize_card_ref`), so that its digest, what is stored and every
    comparison see one spelling.

    :raises InvalidInput: naming the proposal (``item`` = its key, ``field`` under ``where``).
    """
    if p.card_id is not None:
        p.card_id = normalize_card_ref(p.card_id)
    if p.links is not None:
        p.links = [ProposalLink(target=normalize_card_ref(link.target), meaning=link.meaning)
                   for link in p.links]
    for text, field in ((p.key, "key"), (p.rationale, "rationale"),
                        *((f"{d.id}{d.status}", f"decisions[{i}]")
                          for i, d in enumerate(p.decisions))):
        if "\x00" in text:
            raise _refused(where, p.key, "must not contain NUL characters", field)
    if not p.key.strip() or p.key != p.key.strip():
        raise _refused(where, p.key, "a key is non-empty and has no surrounding whitespace", "key")
    if parse_card_id(p.key) is not None:
        raise _refused(where, p.key, "a key must not look like a card id (mem-<uuid>)", "key")
    decision_ids = approved(p.decisions)
    if not decision_ids:
        found = ", ".join(sorted({d.status for d in p.decisions})) or "none"
        raise _refused(where, p.key, "no approved decision: only knowledge from an approved "
                       f"decision can be proposed (decision statuses: {found})", "decisions")
    if p.kind == "addition":
        return _addition(p, where, decision_ids)
    return _update(p, where, decision_ids)


def _addition(p: Proposal, where: str, decision_ids: list[str]) -> Addition:
    if p.card_id is not None or p.revision is not None:
        raise _refused(where, p.key, "an addition names no card_id or revision (use kind 'update')",
                       "card_id")
    if p.family is None:
        raise _refused(where, p.key, "an addition needs a family", "family")
    if p.title is None or not p.title.strip():
        raise _refused(where, p.key, "an addition needs a title", "title")
    check_reusable(p.family, p.content or {}, where, p.key)
    return Addition(key=p.key, decision_ids=decision_ids, family=p.family, title=p.title,
                    content=dict(p.content or {}), scope=p.scope, concepts=list(p.concepts or []),
                    dependencies=list(p.dependencies or []), links=list(p.links or []))


def _update(p: Proposal, where: str, decision_ids: list[str]) -> Update:
    card_id = parse_card_id(p.card_id) if p.card_id is not None else None
    if card_id is None:
        raise _refused(where, p.key, "an update names the card it edits (card_id: mem-<uuid>)",
                       "card_id")
    if p.revision is None:
        raise _refused(where, p.key, "an update names the revision it was drafted against",
                       "revision")
    if all(v is None for v in (p.title, p.content, p.scope, p.concepts, p.dependencies, p.links)):
        raise _refused(where, p.key, "an update changes at least one field", "content")
    if p.content is not None and p.family is not None:
        check_reusable(p.family, p.content, where, p.key)
    return Update(key=p.key, decision_ids=decision_ids, card_id=card_id, revision=p.revision,
                  family=p.family, title=p.title, content=p.content, scope=p.scope,
                  concepts=p.concepts, dependencies=p.dependencies, links=p.links)


def check_batch(proposals: Sequence[Proposal]) -> list[Draft]:
    """Every proposal of a batch checked (:func:`draft`), and its keys distinct.

    :raises InvalidInput: the first failing proposal (``proposals[i]``), or a duplicate key.
    """
    drafts: list[Draft] = []
    first: dict[str, int] = {}
    for i, p in enumerate(proposals):
        where = f"proposals[{i}]"
        drafts.append(draft(p, where))
        if p.key in first:
            raise InvalidInput(f"{where}: duplicate key {p.key!r} (also proposals"
                               f"[{first[p.key]}])", field=f"{where}.key", item=p.key)
        first[p.key] = i
    return drafts


def check_review(req: ReviewRequest) -> str:
    """The review id (trimmed) of a well-formed review request: a selection of distinct keys, or
    ``decline_all`` with no selection.

    :raises InvalidInput: blank review id, NUL characters, both or neither of a selection and
        ``decline_all``, a key selected twice (``item`` names it).
    """
    review_id = req.review_id.strip()
    if not review_id:
        raise InvalidInput("review_id must not be blank", field="review_id")
    reject_nul(review_id, "review_id")
    reject_nul(req.note, "note")
    if req.decline_all and req.selected:
        raise InvalidInput("decline_all declines every proposal: send no selection with it",
                           field="selected")
    if not req.decline_all and not req.selected:
        raise InvalidInput("select at least one proposal, or decline all with "
                           "decline_all: true", field="selected")
    seen: set[str] = set()
    for i, sel in enumerate(req.selected):
        if sel.key in seen:
            raise InvalidInput(f"selected[{i}]: key {sel.key!r} is selected twice",
                               field=f"selected[{i}].key", item=sel.key)
        seen.add(sel.key)
    return review_id


# ---- the card a proposal would write ----

_OVERLAID = ("title", "scope", "concepts", "dependencies", "links")


def _overlay(fields: dict[str, Any], patch: Update | ReviewEdits) -> None:
    """Every field ``patch`` gives (not None) replaces the current one."""
    for name in _OVERLAID:
        value = getattr(patch, name)
        if value is not None:
            fields[name] = list(value) if isinstance(value, list) else value


def _starting_point(d: Draft, card: Card | None) -> tuple[str, dict[str, Any], dict[str, str]]:
    """``(family, fields, content)`` before a reviewer's edits: an addition's own, or the card's
    current state with the update's given fields over it."""
    if isinstance(d, Addition):
        return d.family, {"title": d.title, "scope": d.scope, "concepts": list(d.concepts),
                          "dependencies": list(d.dependencies), "links": list(d.links)}, \
            dict(d.content)
    assert card is not None, "an update is built on its card's current state"
    fields: dict[str, Any] = {"title": card.title, "scope": card.scope,
                              "concepts": list(card.concepts),
                              "dependencies": list(card.dependencies),
                              "links": [ProposalLink(target=link.target, meaning=link.meaning)
                                        for link in card.links]}
    _overlay(fields, d)
    # a proposal's content replaces the card's as a whole
    return card.family, fields, dict(card.content if d.content is None else d.content)


def card_body(d: Draft, card: Card | None, edits: ReviewEdits | None, where: str) -> CardWrite:
    """The validated card body a proposal (plus a reviewer's edits) would write.

    For an update, ``card`` is the card's current state and fields the proposal leaves out keep
    their current values. A reviewer's given fields replace the proposal's; ``content`` edits
    merge field by field; a solved question's SQL is read-only in review. Links keep their
    targets as given (card ids or proposal keys).

    :raises InvalidInput: no reusable content, an invalid field, or an edit of the approved SQL.
    """
    family, fields, content = _starting_point(d, card)
    if edits is not None:
        if edits.content is not None:
            if family == "solved_question" and "sql" in edits.content and \
                    edits.content["sql"].strip() != (content.get("sql") or "").strip():
                raise _refused(where, d.key, "the session's approved SQL is read-only in review "
                               "(changing it means going back to SQL review); its question and "
                               "context can be edited", "edits.content.sql")
            content.update(edits.content)
        _overlay(fields, edits)
    check_reusable(family, content, where, d.key)
    body = CardWrite(family=family, title=fields["title"], content=content,  # type: ignore[arg-type]
                     scope=fields["scope"], concepts=fields["concepts"],
                     dependencies=fields["dependencies"],
                     links=[LinkIn(target=link.target.strip(), meaning=link.meaning.strip())
                            for link in fields["links"]])
    try:
        validate_card_write(body)
    except InvalidInput as exc:
        raise at_item(where, d.key, exc) from exc
    return body


def edited_card(d: Draft) -> uuid.UUID | None:
    """The card an update edits; None for an addition."""
    return d.card_id if isinstance(d, Update) else None


def proposal_body(d: Draft, cards: dict[uuid.UUID, Card], where: str) -> CardWrite:
    """:func:`card_body` of a proposal as it is sent, against the current cards (by id).

    :raises InvalidInput: an update of a card that is not in ``cards`` (not in this workspace),
        or one that names another family than the card's; or as :func:`card_body`.
    """
    card = target_card(d, cards, where, "card_id") if isinstance(d, Update) else None
    return card_body(d, card, None, where)


def target_card(d: Update, cards: dict[uuid.UUID, Card], where: str, field: str) -> Card:
    """The card update ``d`` edits, among the current ``cards`` (by id).

    :raises InvalidInput: it is not in ``cards`` (not in this workspace), or ``d`` names another
        family than the card's (``field`` names the card id's field).
    """
    card = cards.get(d.card_id)
    if card is None:
        raise _refused(where, d.key, f"{card_id_str(d.card_id)} is not a card of this "
                       "workspace", field)
    if d.family is not None and d.family != card.family:
        raise _refused(where, d.key, f"a card's family cannot change ({card.family} -> "
                       f"{d.family})", "family")
    return card


def as_update(p: Proposal, d: Draft, target: CardRevision, where: str) -> Update:
    """The update a reviewer makes of addition ``d`` (stored as ``p``) by applying it to an
    existing card (``as_update_of``: typically its possible duplicate): the fields the proposal
    gives replace the card's, those it leaves out keep theirs, drafted against ``target``'s
    revision (so a card changed since the reviewer saw it makes it stale).

    :raises InvalidInput: ``d`` is an update (it names its card already), or the card id is not
        a ``mem-`` id (``field``: ``<where>.as_update_of``).
    """
    if not isinstance(d, Addition):
        raise _refused(where, d.key, "as_update_of applies an addition to an existing card; an "
                       "update proposal names its card already", "as_update_of")
    card_id = parse_card_id(target.card_id)
    if card_id is None:
        raise _refused(where, d.key, "as_update_of.card_id is a card id (mem-<uuid>)",
                       "as_update_of.card_id")
    return Update(key=d.key, decision_ids=d.decision_ids, card_id=card_id,
                  revision=target.revision, family=d.family, title=d.title,
                  content=dict(d.content), scope=p.scope, concepts=p.concepts,
                  dependencies=p.dependencies, links=p.links)


# ---- link targets ----

def card_targets(bodies: Iterable[CardWrite]) -> list[uuid.UUID]:
    """Every link target of ``bodies`` that is a card id (not a proposal key), sorted, once."""
    return sorted({cid for body in bodies for link in body.links
                   if (cid := parse_card_id(link.target)) is not None})


def link_problems(links: Sequence[LinkIn], *, key: str, card_id: uuid.UUID | None,
                  written: Mapping[str, uuid.UUID | None], session: Collection[str],
                  cards: Collection[uuid.UUID]) -> list[tuple[int, str]]:
    """The links of proposal ``key`` that break the link rule, as ``(index, problem)``.

    A link target is either a card of this workspace (``cards``: the ids that exist) or the key of
    another proposal written with it (``written``: the session's proposals at propose time, the
    selected ones in a review, each with the card it writes when that is known), and never the
    card the proposal itself writes (``card_id``, when known). A key of the session (``session``)
    that is not written with it is one not selected in this review. Two links that name one
    card (by id, or by id and by the key of a proposal that writes or reuses it) are a duplicate,
    as two equal targets are.
    """
    problems: list[tuple[int, str]] = []
    first: dict[uuid.UUID, int] = {}
    for j, link in enumerate(links):
        problem, target = None, parse_card_id(link.target)
        if target is not None:
            if target == card_id:
                problem = f"links[{j}]: a card cannot link to itself"
            elif target not in cards:
                problem = f"links[{j}].target {card_id_str(target)} is not a card of this workspace"
        elif link.target == key:
            problem = f"links[{j}]: a proposal cannot link to itself"
        elif link.target in written:
            target = written[link.target]
            if card_id is not None and target == card_id:
                problem = f"links[{j}]: a card cannot link to itself"
        elif link.target in session:
            problem = (f"links[{j}] names proposal {link.target!r}, which is not selected in "
                       "this review")
        else:
            problem = (f"links[{j}].target {link.target!r} is neither a card id nor the key of a "
                       "proposal of this session")
        if problem is None and target is not None:
            if target in first:
                problem = (f"links[{j}]: duplicate link to {card_id_str(target)} (also "
                           f"links[{first[target]}])")
            else:
                first[target] = j
        if problem is not None:
            problems.append((j, problem))
    return problems


def check_links(links: Sequence[LinkIn], where: str, *, key: str, card_id: uuid.UUID | None,
                written: Mapping[str, uuid.UUID | None], session: Collection[str],
                cards: Collection[uuid.UUID]) -> None:
    """:raises InvalidInput: the first of :func:`link_problems` (``field``:
    ``<where>.links[j].target``, ``item``: the key)."""
    problems = link_problems(links, key=key, card_id=card_id, written=written, session=session,
                             cards=cards)
    if problems:
        j, problem = problems[0]
        raise _refused(where, key, problem, f"links[{j}].target")


def resolve_links(links: Sequence[LinkIn],
                  ids: dict[str, uuid.UUID]) -> list[tuple[uuid.UUID, str]]:
    """``(target card, meaning)`` of links that passed :func:`check_links`: a key becomes the id
    of the card its proposal writes (``ids``: key -> card id)."""
    return [(parse_card_id(link.target) or ids[link.target], link.meaning.strip())
            for link in links]


# ---- reuse of an existing card ----

def identity(body: CardWrite | Card) -> tuple[Any, ...]:
    """What makes two cards the same card (:data:`NORMALISATION`), hashable: family, normalised
    content by field, scope, and the sets of concepts and dependencies. ``body`` is a validated
    card body (fields trimmed, empty content fields dropped) or a stored card."""
    sql = SQL_FIELDS.get(body.family, frozenset())
    content = tuple(sorted((name, normalised_text(value, name in sql))
                           for name, value in body.content.items() if value.strip()))
    return (body.family, content, body.scope or None, tuple(sorted(set(body.concepts))),
            tuple(sorted({d.key() for d in body.dependencies},
                         key=lambda k: tuple(p or "" for p in k))))


def differences(body: CardWrite, card: Card) -> list[str]:
    """The fields of :data:`IDENTITY_FIELDS` in which ``card`` is not the card ``body`` would
    write (both of one family); empty when it is the same card."""
    mine, theirs = identity(body), identity(card)
    return [name for name, a, b in zip(IDENTITY_FIELDS, mine[1:], theirs[1:]) if a != b]


class Match(msgspec.Struct, frozen=True):
    """The reuse rule's answer for one addition: the existing card it reuses (the oldest that is
    the same card), else the existing card shown as a possible duplicate (content matching
    loosely, other fields not: the one with the fewest ``differs``, then the oldest), or neither."""

    reuse: uuid.UUID | None = None
    possible: PossibleDuplicate | None = None


def match(body: CardWrite, candidates: Sequence[Card]) -> Match:
    """The reuse rule over ``candidates``: the existing cards of the body's family whose content
    matches it loosely (PostgreSQL ``normalized_content()``), oldest first. Only the same card
    (:func:`identity`) is reused; similar content alone never is."""
    best: tuple[int, Card, list[str]] | None = None
    for n, card in enumerate(candidates):
        differs = differences(body, card)
        if not differs:
            return Match(reuse=parse_card_id(card.id))
        if best is None or len(differs) < len(best[2]):
            best = (n, card, differs)
    if best is None:
        return Match()
    _, card, differs = best
    return Match(possible=PossibleDuplicate(card_id=card.id, revision=card.revision,
                                            title=card.title, differs=differs))


def action(d: Draft, reuse: uuid.UUID | None) -> Action:
    """What a review does with a proposal: an update updates its card; an addition reuses the
    existing card that is the same card (:func:`match`; ``reuse``), else creates one."""
    if isinstance(d, Update):
        return "update"
    return "reuse" if reuse is not None else "create"


def first_duplicate(created: Sequence[Hashable]) -> tuple[int, int] | None:
    """Among the additions a review would create, the :func:`identity` of each, the first pair
    that would be the same card twice, as ``(earlier index, later index)``; None if none."""
    seen: dict[Hashable, int] = {}
    for j, key in enumerate(created):
        if key in seen:
            return seen[key], j
        seen[key] = j
    return None


def same_content(first: tuple[str, str], second: tuple[str, str]) -> InvalidInput:
    """The refusal of ``second`` for being the same card as ``first``, each ``(where, key)``."""
    (where1, key1), (where2, key2) = first, second
    return InvalidInput(f"{where2} (key {key2!r}): the same card as {where1} (key {key1!r}): "
                        "same family, content, scope, concepts and dependencies",
                        field=f"{where2}.content", item=key2)


# ---- staleness of an update ----

def stale_reason(d: Draft, card: Card | None) -> str | None:
    """Why an update is stale: its card was deleted, or moved past the revision the proposal was
    drafted against (``card``: the card now, None when gone). None when current, and for an
    addition."""
    if not isinstance(d, Update):
        return None
    if card is None:
        return f"card {card_id_str(d.card_id)} was deleted since the proposal was drafted"
    if card.revision != d.revision:
        return (f"card {card_id_str(d.card_id)} is at revision {card.revision}, the proposal "
                f"was drafted against revision {d.revision}")
    return None


# ---- what an update would change ----

def changes(card: Card, body: CardWrite) -> dict[str, FieldChange]:
    """Changed fields between a card and the body an update would write: ``title``,
    ``content.<field>``, ``scope``, ``concepts``, ``dependencies`` and ``links`` (as sorted
    ``{target, meaning}`` lists), each ``{before, after}``."""
    diff: dict[str, FieldChange] = {}
    if card.title != body.title:
        diff["title"] = FieldChange(card.title, body.title)
    for name in sorted(set(card.content) | set(body.content)):
        before, after = card.content.get(name), body.content.get(name)
        if before != after:
            diff[f"content.{name}"] = FieldChange(before, after)
    if card.scope != body.scope:
        diff["scope"] = FieldChange(card.scope, body.scope)
    if card.concepts != body.concepts:
        diff["concepts"] = FieldChange(card.concepts, body.concepts)
    before_deps = [msgspec.to_builtins(d) for d in card.dependencies]
    after_deps = [msgspec.to_builtins(d) for d in body.dependencies]
    if before_deps != after_deps:
        diff["dependencies"] = FieldChange(before_deps, after_deps)
    before_links = sorted((link.target, link.meaning) for link in card.links)
    after_links = sorted((link.target, link.meaning) for link in body.links)
    if before_links != after_links:
        diff["links"] = FieldChange([{"target": t, "meaning": m} for t, m in before_links],
                                    [{"target": t, "meaning": m} for t, m in after_links])
    return diff


def preview(body: CardWrite) -> CardPreview:
    """The card fields a body would write, as the summary shows them."""
    return CardPreview(family=body.family, title=body.title, content=body.content,
                       scope=body.scope, concepts=body.concepts, dependencies=body.dependencies,
                       links=[ProposalLink(target=link.target, meaning=link.meaning)
                              for link in body.links])
