"""Import and export of cards files (:class:`Transfer`): the archive's use cases that move a
workspace's cards in and out in bulk, as JSON Lines (:mod:`shared.cards_file`).

An import runs in one PostgreSQL transaction under the workspace advisory lock, through the same
validation as the API, idempotent by key, and enqueues its projection operations after the
commit; an export streams the cards from one read-only transaction. Like every use case, each
method checks the principal again (DESIGN §8), and a rejected import leaves only its activity
record (:func:`~shared.archive.activity.audited`).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from typing import Any

import msgspec

from shared import models
from shared.archive.activity import audited
from shared.archive.responses import ImportResult
from shared.auth import Principal
from shared.errors import InvalidInput
from shared.models import (Card, CardWrite, CaseEntry, CaseLine, ImportCard, card_id_str, parse_card_id,
                           reject_nul, validate_card_write)
from shared.projection.project import BATCH_SIZE
from shared.projection.queue import ProjectionQueue
from shared.evaluation.cases import CaseWrite, case_values
from shared.store import activity, cards, evaluations, outbox, workspaces
from shared.store.database import Database

MAX_IMPORT_CARDS = 20_000


async def _import_refs(conn: Any, items: list[ImportCard], line_of: dict[str, int]
                       ) -> tuple[dict[str, uuid.UUID], set[str]]:
    """Resolve an import's keys and link targets in its transaction: ``(refs, existing)``, where
    ``refs`` maps every key of the file and every link target to its card (an existing card of
    the key, else a new id) and ``existing`` holds the file's keys that are cards already.

    :raises InvalidInput: a link target that is no key of the file and neither the key nor the
        id of a card of this workspace; a line that links to itself; a line with two links to
        one card (its key and its id, say).
    """
    outside = list(dict.fromkeys(link.target for c in items for link in c.links
                                 if link.target not in line_of))
    found = await cards.ids_by_key(conn, [*line_of, *outside])
    found.update(await _adopt_unkeyed(conn, [c for c in items if c.key not in found]))
    existing = {k for k in line_of if k in found}
    refs = {k: found.get(k) or uuid.uuid4() for k in line_of}
    unresolved = [t for t in outside if t not in found]
    by_id = {t: parse_card_id(t) for t in unresolved}
    for target, cid in by_id.items():
        if cid is None:
            raise InvalidInput(f"link target {target!r} is neither a key of this file nor the "
                               "key or id of a card of this workspace")
    present = await cards.existing_ids(conn, list(by_id.values())) if by_id else set()
    for target, cid in by_id.items():
        if cid not in present:
            raise InvalidInput(f"link target {target} is not a card of this workspace")
        refs[target] = cid  # type: ignore[assignment]
    refs.update({t: found[t] for t in outside if t in found})
    for c in items:
        if any(refs[link.target] == refs[c.key] for link in c.links):
            raise InvalidInput(f"line {line_of[c.key]}: key {c.key!r} links to itself")
        seen: dict[uuid.UUID, str] = {}
        for link in c.links:  # a key and an id (or two keys) can name the same card
            first = seen.setdefault(refs[link.target], link.target)
            if first != link.target:
                raise InvalidInput(f"line {line_of[c.key]}: links {first!r} and "
                                   f"{link.target!r} name the same card; link to it once")
    return refs, existing


#: the namespace of the ids of imported evaluation cases (uuid5 of ``<workspace>:<key>``)
CASE_NAMESPACE = uuid.UUID("6f1d3c2e-5b0a-4f7e-9c4d-2a8b7e6f5d10")


async def _import_cases(conn: Any, workspace: str, actor: str,
                        lines: list[tuple[int, CaseLine]], refs: dict[str, uuid.UUID]) -> int:
    """Store the file's curated cases (see :meth:`Transfer.import_cards`); returns how many.

    :raises InvalidInput: an expected card that is neither a key of the file nor the key or id
        of a card of this workspace; two lines with one key; an invalid case.
    """
    if not lines:
        return 0
    wanted = [r for _, line in lines for r in line.evaluation_case.expected if r not in refs]
    found = await cards.ids_by_key(conn, list(dict.fromkeys(wanted)))
    by_id = {r: parse_card_id(r) for r in wanted if r not in found}
    present = await cards.existing_ids(conn, [c for c in by_id.values() if c is not None])
    seen: set[str] = set()
    for n, line in lines:
        entry = line.evaluation_case
        if entry.key in seen:
            raise InvalidInput(f"line {n}: duplicate evaluation case key {entry.key!r}")
        seen.add(entry.key)
        expected = []
        for ref in entry.expected:
            cid = refs.get(ref) or found.get(ref) or by_id.get(ref)
            if cid is None or (ref in by_id and cid not in present):
                raise InvalidInput(f"line {n}: evaluation case {entry.key!r} expects {ref!r}, "
                                   "neither a key of this file nor the key or id of a card of "
                                   "this workspace", line=n)
            expected.append(card_id_str(cid))
        try:
            reject_nul(entry.key, "key")
            values = case_values(CaseWrite(question=entry.question, mode=entry.mode,
                                           expected=expected, filters=entry.filters,
                                           match=entry.match, note=entry.note))
        except InvalidInput as exc:
            raise InvalidInput(f"line {n}: {exc.message}", line=n, **exc.extra) from exc
        own = entry.key.removeprefix("case-") if entry.key.startswith("case-") else None
        try:
            case_id = uuid.UUID(own) if own else None
        except ValueError:
            case_id = None
        if case_id is None or not await evaluations.case_exists(conn, case_id):
            case_id = uuid.uuid5(CASE_NAMESPACE, f"{workspace}:{entry.key}")
        if await evaluations.case_insert(conn, workspace, case_id, actor, values) is None:
            raise InvalidInput(f"line {n}: evaluation case key {entry.key!r} names a case of "
                               "another workspace", line=n)
    return len(lines)


def _check_provenance(n: int, card: ImportCard) -> None:
    """Refuse an import line (number ``n``) that claims a review's provenance: origin
    ``workflow``, or a source naming a session or decisions (only a review writes those).

    :raises InvalidInput: naming the line, its key and the field (``origin`` or ``source``).
    """
    claims = ("origin", "'workflow'") if card.origin == "workflow" else (
        ("source", "a session or decisions") if card.source is not None
        and (card.source.session_id is not None or card.source.decision_ids) else None)
    if claims:
        field, what = claims
        raise InvalidInput(
            f"line {n} (key {card.key!r}): {field} {what} is written only by a review; an import "
            "writes 'import' or 'manual' cards with at most a dataset source (to restore a file "
            "exported from this archive, import it with mode=restore)", field=field, line=n)


def _signature(card: Card | ImportCard) -> tuple[Any, ...]:
    """What makes an import line the card it created: family, title, content, scope, concepts
    and dependencies (in order) and source; not the links (a line names them by key)."""
    return (card.family, card.title, tuple(sorted(card.content.items())), card.scope,
            tuple(card.concepts), tuple(d.key() for d in card.dependencies),
            msgspec.json.encode(card.source, order="sorted") if card.source else None)


async def _adopt_unkeyed(conn: Any, lines: list[ImportCard]) -> dict[str, uuid.UUID]:
    """Cards imported before migration 011 have no import key: each line (whose key is no card's
    key) that says exactly what such a card holds (:func:`_signature`) adopts it, the oldest
    first, and gives it its key; returns ``{key: card id}`` of the adoptions. So a file imported
    before import keys existed imports again without creating its cards twice."""
    candidates = await cards.unkeyed_imported(conn) if lines else []
    if not candidates:
        return {}
    waiting: dict[tuple[Any, ...], list[uuid.UUID]] = {}
    for card in candidates:
        waiting.setdefault(_signature(card), []).append(parse_card_id(card.id))  # type: ignore[arg-type]
    adopted = {}
    for line in lines:
        ids = waiting.get(_signature(line))
        if ids:
            adopted[line.key] = ids.pop(0)
    if adopted:
        await cards.set_import_keys(conn, adopted)
    return adopted


def _same_card(card: Card, line: ImportCard, links: set[tuple[uuid.UUID, str]]) -> bool:
    """Whether an import line (validated) says what the card holds: title, content, scope,
    concepts (in order), dependencies (in order) and outgoing links (as a set)."""
    return (card.title == line.title and card.content == line.content
            and card.scope == line.scope and card.concepts == line.concepts
            and card.dependencies == line.dependencies
            and {(parse_card_id(link.target), link.meaning) for link in card.links} == links)


async def _update_imported(conn: Any, workspace: str, items: list[ImportCard],
                           refs: dict[str, uuid.UUID], existing: set[str],
                           line_of: dict[str, int]) -> list[uuid.UUID]:
    """``on_conflict=update``: replace the editable fields of each existing card whose line
    differs from it (:func:`_same_card`), keeping its id, origin and source; returns the ids
    updated (each at revision + 1).

    :raises InvalidInput: a line's family is not its card's (a family cannot change).
    """
    current = await cards.get_many(conn, [refs[k] for k in existing])
    updated = []
    for line in items:
        if line.key not in existing:
            continue
        card = current[refs[line.key]]
        if card.family != line.family:
            raise InvalidInput(f"line {line_of[line.key]} (key {line.key!r}): its card "
                               f"{card.id} is a {card.family}; a card's family cannot change")
        links = [(refs[link.target], link.meaning.strip()) for link in line.links]
        if _same_card(card, line, set(links)):
            continue
        body = CardWrite(family=line.family, title=line.title, content=line.content,
                         scope=line.scope, concepts=line.concepts,
                         dependencies=line.dependencies, revision=card.revision)
        await cards.update(conn, workspace, refs[line.key], body, links)
        updated.append(refs[line.key])
    return updated


class Transfer:
    """Import and export of one archive's cards files, over its database and projection queue
    (built by :class:`shared.archive.cards.Archive` as its ``transfer``)."""

    def __init__(self, db: Database, queue: ProjectionQueue) -> None:
        self.db = db
        self.queue = queue

    @audited("import")
    async def import_cards(self, principal: Principal, workspace: str,
                           lines: Iterable[ImportCard],
                           on_conflict: models.OnConflict = "skip",
                           mode: models.ImportMode = "import",
                           cases: Iterable[tuple[int, CaseLine]] = ()) -> ImportResult:
        """Import a cards file in one transaction (all or nothing), through the same validation
        as the API; idempotent by key.

        A line whose key is already a card's key in the workspace (its import key, or
        ``mem-<id>`` for a card without one: migration 011) is that card: with ``on_conflict``
        ``skip`` it is left alone, with ``update`` its title, content, scope, concepts,
        dependencies and links are replaced when one of them differs (same id, revision + 1,
        origin and source kept, a projection queued) and it is left alone otherwise. Any other
        line creates a card (origin: the line's, default ``import``) that remembers its key,
        unless it adopts a card imported before import keys existed (:func:`_adopt_unkeyed`). So
        importing one file twice changes nothing. A link target is a key of this file, else the
        key of a card of the workspace, else the id of one. A key that is a card id in another
        spelling is read as ``mem-<uuid>`` (as links are).

        Provenance comes from where a card comes from: with ``mode`` ``import`` (the default) a
        line may be ``import`` (default) or ``manual`` and its source may name a dataset record,
        but only a review writes ``workflow`` cards and session sources, so a line claiming one
        is refused. ``restore`` keeps every line's origin and source as written: it is for a
        file ``export`` wrote from this archive, and the activity record says it was used.

        ``cases``: the file's curated evaluation cases (``(line number, line)``,
        :func:`shared.cards_file.decode_cards_file`), stored in the same transaction: each names
        its expected cards by a key of the file, the key of a card of the workspace, or a card
        id, as links do. A case's key is its identity in the workspace: ``case-<id>`` of one of
        its cases (what ``export`` writes) is that case, replaced; another key makes the case
        whose id is derived from the workspace and the key, so importing one file twice changes
        nothing.

        :raises InvalidInput: no lines (``no cards``), a line claiming a review's provenance
            without ``mode=restore`` (``field`` ``origin`` or ``source``, ``line``), a line is invalid (its number and key
            are named), a blank key (whitespace only) or one with leading or trailing
            whitespace (``field`` ``key``, ``line``: it is refused, never trimmed), duplicate keys,
            a link to no card of the file or the workspace, a link to itself, a line whose
            card is of another family (with either ``on_conflict``), more than 20,000 cards,
            another ``on_conflict``.
        """
        principal.require(workspace, "memory.manage")
        if on_conflict not in models.ON_CONFLICT:
            raise InvalidInput(f"on_conflict must be one of {', '.join(models.ON_CONFLICT)}, "
                               f"not {on_conflict!r}", field="on_conflict")
        if mode not in models.IMPORT_MODES:
            raise InvalidInput(f"mode must be one of {', '.join(models.IMPORT_MODES)}, "
                               f"not {mode!r}", field="mode")
        items = list(lines)
        case_lines = list(cases)
        if not items and not case_lines:  # a 201 that created nothing would hide a truncated or wrong file
            raise InvalidInput("no cards: the import holds no card lines (a cards file has one "
                               "JSON object per line)")
        if len(items) > MAX_IMPORT_CARDS:
            raise InvalidInput(f"an import holds at most {MAX_IMPORT_CARDS} cards")
        line_of: dict[str, int] = {}
        for n, card in enumerate(items, start=1):
            try:
                validate_card_write(card)
            except InvalidInput as exc:
                raise InvalidInput(f"line {n} (key {card.key!r}): {exc.message}") from exc
            if not card.key.strip():  # it could be named by no link, nor told from another
                raise InvalidInput(f"line {n}: the key is blank (a key names its card in "
                                   "links and in later imports: give it visible characters)")
            if card.key != card.key.strip():  # " k1" and "k1" would be two keys that read alike
                raise InvalidInput(f"line {n}: key {card.key!r} has leading or trailing "
                                   "whitespace (a key is matched exactly: remove it)",
                                   field="key", line=n)
            if mode == "import":
                _check_provenance(n, card)
            card.key = models.normalize_card_ref(card.key)  # the spelling links use
            if card.key in line_of:
                raise InvalidInput(f"line {n}: duplicate key {card.key!r}")
            line_of[card.key] = n
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await workspaces.get(conn, workspace)
            refs, existing = (await _import_refs(conn, items, line_of) if items
                              else ({}, set()))
            family_of = await cards.families(conn, [refs[k] for k in existing])
            for line in items:  # whatever on_conflict says: a skipped line is no other card
                if line.key in existing and family_of[refs[line.key]] != line.family:
                    raise InvalidInput(
                        f"line {line_of[line.key]} (key {line.key!r}): its card "
                        f"{card_id_str(refs[line.key])} is a {family_of[refs[line.key]]}; a "
                        "card's family cannot change", line=line_of[line.key])
            new = [c for c in items if c.key not in existing]
            await cards.insert_imported(conn, workspace, new, refs)
            updated = (await _update_imported(conn, workspace, items, refs, existing, line_of)
                       if on_conflict == "update" else [])
            written = [refs[c.key] for c in new] + updated
            op_ids = await outbox.insert_upserts(conn, workspace, written) if written else []
            stored_cases = await _import_cases(conn, workspace, principal.actor, case_lines, refs)
            left = len(existing) - len(updated)
            result = ImportResult(
                created=len(new), by_family=dict(sorted(Counter(c.family for c in new).items())),
                enqueued=True, updated=len(updated),
                unchanged=left if on_conflict == "update" else 0,
                skipped=left if on_conflict == "skip" else 0, cases=stored_cases)
            await activity.record(conn, workspace, actor=principal.actor, verb="import",
                                      outcome="ok", detail={
                                          "cards": len(items), "created": result.created,
                                          "updated": result.updated,
                                          "unchanged": result.unchanged,
                                          "skipped": result.skipped, "cases": stored_cases,
                                          "on_conflict": on_conflict,
                                          "mode": mode})
        # One job per projection batch: each job leases a batch of open operations itself, and
        # the sweep re-offers any operation whose job was lost.
        result.enqueued = await self.queue.enqueue(workspace, op_ids[::BATCH_SIZE])
        return result

    async def export_cards(self, principal: Principal, workspace: str,
                           families: Iterable[str] = ()) -> AsyncIterator[ImportCard]:
        """The workspace's cards (of ``families``; none given: all four) as cards-file lines,
        which :meth:`import_cards` reads: each card under its key (its import key, else
        ``mem-<id>``) with title, content, scope, concepts, dependencies, outgoing links by
        their targets' keys, origin and source; no ids, revisions, vectors or index state. In
        key order (byte order), so two workspaces holding the same cards export the same lines.

        Checks the principal, the families and the workspace when awaited; the iterator then
        streams the cards from one read-only transaction through a server-side cursor (one
        snapshot, a page of cards in memory at a time), holding a pooled connection until it is
        exhausted or closed. A family-filtered export keeps the links to cards of other
        families: an import resolves them where those cards are in the workspace already.

        :raises InvalidInput: an unknown family. :raises Forbidden / NotFound: principal,
            workspace.
        """
        principal.require(workspace, "memory.manage")
        chosen = list(dict.fromkeys(families)) or list(models.FAMILIES)
        unknown = [f for f in chosen if f not in models.FAMILIES]
        if unknown:
            raise InvalidInput(f"unknown family {unknown[0]!r} (families: "
                               f"{', '.join(models.FAMILIES)})", field="family")
        async with self.db.transaction(workspace, read_only=True) as conn:
            await workspaces.get(conn, workspace)
        return self._export_stream(workspace, chosen)

    async def _export_stream(self, workspace: str, families: list[str]
                             ) -> AsyncIterator[ImportCard | CaseLine]:
        async with self.db.transaction(workspace, read_only=True) as conn:
            async for line in cards.export_lines(conn, families):
                yield line
            if set(families) == set(models.FAMILIES):  # the whole archive: its cases too
                for row in await evaluations.export_rows(conn):
                    if not row["expected"]:  # every expected card deleted: nothing to ask for
                        continue
                    yield CaseLine(evaluation_case=CaseEntry(
                        key=f"case-{row['id']}", question=row["question"], mode=row["mode"],
                        expected=list(row["expected"]),
                        filters=msgspec.convert(row["filters"], models.Filters)
                        if row["filters"] else None, match=row["match"], note=row["note"]))
