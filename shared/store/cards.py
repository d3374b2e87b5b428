"""Cards with their dependencies and links: every read and write of those three tables.

Functions run on a connection from :meth:`shared.store.database.Database.transaction` (role and
workspace already set); they neither commit nor check permissions (the use cases do both).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from shared import models
from shared.errors import InvalidInput, NotFound, StaleRevision
from shared.models import Card, CardWrite, Dependency, ImportCard, IncomingLink, Link, card_id_str
from shared.store import sessions
from shared.store.database import Q


def index_status(row: dict[str, Any]) -> str:
    """``current`` / ``pending`` / ``failed`` for a card row from ``cards_get``."""
    if (row["projected_revision"] == row["revision"]
            and row["projected_format"] == models.PROJECTION_FORMAT):
        return "current"
    return "failed" if row.get("has_failed_op") else "pending"


def _card_from_row(row: dict[str, Any]) -> Card:
    return Card(
        id=card_id_str(row["id"]),
        workspace=row["workspace_id"],
        family=row["family"],
        title=row["title"],
        scope=row["scope"],
        origin=row["origin"],
        source=msgspec.convert(row["source"], models.Source) if row["source"] else None,
        concepts=list(row["concepts"]),
        dependencies=[Dependency(**d) for d in row["dependencies"]],
        links=[Link(**link) for link in row["links"]],
        content=dict(row["content"]),
        revision=row["revision"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        index_status=index_status(row),  # type: ignore[arg-type]
    )


async def get_many(conn: AsyncConnection, ids: list[uuid.UUID]) -> dict[uuid.UUID, Card]:
    """Full cards for ``ids`` (missing ids are absent from the mapping)."""
    if not ids:
        return {}
    cur = await conn.execute(Q.cards_get, {"ids": ids})
    return {row["id"]: _card_from_row(row) for row in await cur.fetchall()}


async def get(conn: AsyncConnection, card_uuid: uuid.UUID) -> Card:
    """One full card.

    :raises NotFound: no such card in the transaction's workspace.
    """
    found = await get_many(conn, [card_uuid])
    if card_uuid not in found:
        raise NotFound(f"no card {card_id_str(card_uuid)} in this workspace")
    return found[card_uuid]


async def incoming_links(conn: AsyncConnection, card_uuid: uuid.UUID) -> list[IncomingLink]:
    """Links into a card, by source id."""
    cur = await conn.execute(Q.cards_links_incoming, {"card_id": card_uuid})
    return [IncomingLink(**row) for row in await cur.fetchall()]


async def existing_ids(conn: AsyncConnection, ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """The ids among ``ids`` that are cards of this workspace."""
    cur = await conn.execute(Q.cards_ids_existing, {"ids": ids})
    return {row["id"] for row in await cur.fetchall()}


async def linked_questions(conn: AsyncConnection, ids: list[uuid.UUID]) -> dict[uuid.UUID, list[str]]:
    """For each card of ``ids``, the questions of the solved questions that link to it, in the
    solved cards' id order (cards nothing links to are absent): the document expansion of a
    clarification's or rule's projection (:mod:`shared.projection.documents`)."""
    if not ids:
        return {}
    cur = await conn.execute(Q.cards_linked_questions, {"ids": ids})
    return {row["target_id"]: list(row["questions"]) for row in await cur.fetchall()}


async def revisions(conn: AsyncConnection) -> dict[uuid.UUID, int]:
    """Every card id of the workspace with its current revision, in id order."""
    cur = await conn.execute(Q.cards_revisions)
    return {r["id"]: r["revision"] for r in await cur.fetchall()}


async def families(conn: AsyncConnection, ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The family of each card of ``ids`` that exists."""
    if not ids:
        return {}
    cur = await conn.execute(Q.cards_families, {"ids": ids})
    return {r["id"]: r["family"] for r in await cur.fetchall()}


async def projection_inputs(conn: AsyncConnection) -> dict[uuid.UUID, tuple[int, list[str]]]:
    """Every card id of the workspace, in id order, with its revision and the questions of the
    solved cards linking to it (as :func:`linked_questions` gives them; ``[]`` when none)."""
    cur = await conn.execute(Q.cards_projection_inputs)
    return {r["id"]: (r["revision"], list(r["questions"] or ())) for r in await cur.fetchall()}


async def family_counts(conn: AsyncConnection) -> dict[str, int]:
    """Cards per family."""
    cur = await conn.execute(Q.cards_family_counts)
    return {row["family"]: row["n"] for row in await cur.fetchall()}


async def resolve_link_targets(conn: AsyncConnection, links: list[models.LinkIn],
                               self_id: uuid.UUID | None = None) -> list[tuple[uuid.UUID, str]]:
    """Check that every link target is a card of this workspace; returns ``(target, meaning)``.

    :raises InvalidInput: a target is not a card id, is the card itself, or is not in this
        workspace (another workspace's card is indistinguishable from a missing one).
    """
    resolved: list[tuple[uuid.UUID, str]] = []
    for i, link in enumerate(links):
        target = models.parse_card_id(link.target)
        if target is None:
            raise InvalidInput(f"links[{i}].target {link.target!r} is not a card id (mem-<uuid>)",
                               field=f"links[{i}].target")
        if target == self_id:
            raise InvalidInput(f"links[{i}]: a card cannot link to itself", field=f"links[{i}].target")
        resolved.append((target, link.meaning.strip()))
    if resolved:
        existing = await existing_ids(conn, [t for t, _ in resolved])
        for i, (target, _) in enumerate(resolved):
            if target not in existing:
                raise InvalidInput(
                    f"links[{i}].target {card_id_str(target)} is not a card of this workspace",
                    field=f"links[{i}].target",
                )
    return resolved


def _dependency_rows(workspace_id: str, card_uuid: uuid.UUID,
                     deps: list[Dependency]) -> list[dict[str, Any]]:
    return [{"workspace": workspace_id, "card_id": card_uuid, "ordinal": i,
             "database": d.database, "schema": d.schema, "table": d.table, "column": d.column}
            for i, d in enumerate(deps)]


def _card_row(workspace_id: str, card_uuid: uuid.UUID, body: CardWrite | ImportCard, origin: str,
              source: models.Source | None) -> dict[str, Any]:
    return {"workspace": workspace_id, "id": card_uuid, "family": body.family,
            "title": body.title, "scope": body.scope, "origin": origin,
            "source": Jsonb(msgspec.to_builtins(source)) if source else None,
            "concepts": body.concepts, "content": Jsonb(body.content)}


async def _write_dependencies(conn: AsyncConnection, workspace_id: str, card_uuid: uuid.UUID,
                              deps: list[Dependency], replace: bool) -> None:
    if replace:
        await conn.execute(Q.cards_dependencies_delete, {"card_id": card_uuid})
    if deps:
        async with conn.cursor() as cur:
            await cur.executemany(Q.cards_dependencies_insert, _dependency_rows(workspace_id, card_uuid, deps))


async def _write_links(conn: AsyncConnection, workspace_id: str, card_uuid: uuid.UUID,
                       links: list[tuple[uuid.UUID, str]], replace: bool) -> None:
    if replace:
        await conn.execute(Q.cards_links_delete_outgoing, {"card_id": card_uuid})
    if links:
        async with conn.cursor() as cur:
            await cur.executemany(Q.cards_links_insert, [
                {"workspace": workspace_id, "source_id": card_uuid, "target_id": t, "meaning": m}
                for t, m in links
            ])


async def insert(conn: AsyncConnection, workspace_id: str, body: CardWrite | ImportCard,
                 *, origin: str, source: models.Source | None = None,
                 card_uuid: uuid.UUID | None = None,
                 links: list[tuple[uuid.UUID, str]] | None = None) -> tuple[uuid.UUID, int]:
    """Insert a validated card with its dependencies and (already resolved) links.

    :returns: ``(card uuid, revision)``.
    """
    card_uuid = card_uuid or uuid.uuid4()
    cur = await conn.execute(Q.cards_insert, _card_row(workspace_id, card_uuid, body, origin, source))
    revision = (await cur.fetchone())["revision"]
    await _write_dependencies(conn, workspace_id, card_uuid, body.dependencies, replace=False)
    if links:
        await _write_links(conn, workspace_id, card_uuid, links, replace=False)
    return card_uuid, revision


async def insert_imported(conn: AsyncConnection, workspace_id: str, lines: list[ImportCard],
                          refs: dict[str, uuid.UUID]) -> None:
    """Insert the validated new cards of an import with their dependencies and links, three
    statements in all. Each card remembers its line's key as its import key (migration 011), takes
    the line's ``origin`` (default ``import``) and ``source``; ``refs`` maps each line's key to
    its new card id and every link target to its card (resolved and checked by the caller,
    self-links refused there).
    """
    async with conn.cursor() as cur:
        await cur.executemany(Q.cards_insert_imported, [
            {**_card_row(workspace_id, refs[c.key], c, c.origin or "import", c.source),
             "import_key": c.key} for c in lines])
        await cur.executemany(Q.cards_dependencies_insert, [
            row for c in lines for row in _dependency_rows(workspace_id, refs[c.key], c.dependencies)])
        link_rows = [{"workspace": workspace_id, "source_id": refs[c.key],
                      "target_id": refs[link.target], "meaning": link.meaning.strip()}
                     for c in lines for link in c.links]
        if link_rows:
            await cur.executemany(Q.cards_links_insert, link_rows)


async def ids_by_key(conn: AsyncConnection, keys: list[str]) -> dict[str, uuid.UUID]:
    """The cards of this workspace whose key (their import key, else ``mem-<id>``: migration
    011's ``card_key``) is among ``keys``, by key."""
    if not keys:
        return {}
    cur = await conn.execute(Q.cards_by_key, {"keys": keys})
    return {row["key"]: row["id"] for row in await cur.fetchall()}


async def unkeyed_imported(conn: AsyncConnection) -> list[Card]:
    """The cards imported before migration 011 (origin ``import``, no import key) that no import
    adopted yet, oldest first."""
    cur = await conn.execute(Q.cards_unkeyed_imported)
    ids = [row["id"] for row in await cur.fetchall()]
    found = await get_many(conn, ids)
    return [found[i] for i in ids]


async def set_import_keys(conn: AsyncConnection, keys: dict[str, uuid.UUID]) -> None:
    """Give cards without an import key the keys that adopted them (``{key: card id}``); their
    content, revision and timestamps stay as they are."""
    await conn.execute(Q.cards_set_import_keys, {"ids": list(keys.values()), "keys": list(keys)})


#: Rows a server-side cursor of an export fetches per round trip.
EXPORT_PAGE = 500


async def export_lines(conn: AsyncConnection, families: list[str]) -> AsyncIterator[ImportCard]:
    """Every card of ``families`` as a cards-file line (key, fields, dependencies, links by their
    targets' keys, origin, source), in key order (byte order), read through a server-side cursor
    :data:`EXPORT_PAGE` rows at a time: one statement, so one snapshot of the workspace however
    long the caller takes, and never more than a page in memory."""
    async with conn.cursor(name="memarc_export") as cur:
        cur.itersize = EXPORT_PAGE
        await cur.execute(Q.cards_export, {"families": families})
        async for row in cur:
            yield ImportCard(
                key=row["key"], family=row["family"], title=row["title"],
                content=dict(row["content"]), scope=row["scope"], concepts=list(row["concepts"]),
                dependencies=[Dependency(**d) for d in row["dependencies"]],
                links=[models.LinkIn(**link) for link in row["links"]],
                source=msgspec.convert(row["source"], models.Source) if row["source"] else None,
                origin=row["origin"])


async def update(conn: AsyncConnection, workspace_id: str, card_uuid: uuid.UUID,
                 body: CardWrite, links: list[tuple[uuid.UUID, str]]) -> int:
    """Replace a card's content, dependencies and outgoing links if ``body.revision`` is current.

    Origin and source are kept (an administrator's edit never changes provenance).

    :returns: the new revision.
    :raises NotFound: no such card. :raises InvalidInput: the family would change.
    :raises StaleRevision: the card has another revision.
    """
    row = await (await conn.execute(Q.cards_revision_for_update, {"id": card_uuid})).fetchone()
    if row is None:
        raise NotFound(f"no card {card_id_str(card_uuid)} in this workspace")
    family = (await (await conn.execute(Q.cards_family, {"id": card_uuid})).fetchone())["family"]
    if family != body.family:
        raise InvalidInput(f"a card's family cannot change ({family} -> {body.family}); create a "
                           "new card instead", field="family")
    if row["revision"] != body.revision:
        raise StaleRevision(
            f"card {card_id_str(card_uuid)} is at revision {row['revision']}, "
            f"the update edits revision {body.revision}",
            current_revision=row["revision"],
        )
    cur = await conn.execute(Q.cards_update, {
        "id": card_uuid, "revision": body.revision, "family": body.family, "title": body.title,
        "scope": body.scope, "concepts": body.concepts, "content": Jsonb(body.content),
    })
    revision = (await cur.fetchone())["revision"]
    await _write_dependencies(conn, workspace_id, card_uuid, body.dependencies, replace=True)
    await _write_links(conn, workspace_id, card_uuid, links, replace=True)
    return revision


async def add_links(conn: AsyncConnection, workspace_id: str, card_uuid: uuid.UUID,
                    links: list[tuple[uuid.UUID, str]]) -> None:
    """Add (already resolved) outgoing links to a card inserted earlier in this transaction.

    A review inserts all its new cards first and links them afterwards, so links between two new
    cards of one review (in either direction, cycles included) resolve inside one transaction.
    """
    await _write_links(conn, workspace_id, card_uuid, links, replace=False)


async def delete(conn: AsyncConnection, card_uuid: uuid.UUID) -> None:
    """Delete a card; dependencies, links both ways and its projection row cascade, and its
    content is erased from the session archive in the same transaction
    (:func:`shared.store.sessions.erase_card`).

    :raises NotFound: no such card.
    """
    row = await (await conn.execute(Q.cards_delete, {"id": card_uuid})).fetchone()
    if row is None:
        raise NotFound(f"no card {card_id_str(card_uuid)} in this workspace")
    await sessions.erase_card(conn, card_uuid)
