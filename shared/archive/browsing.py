"""Read-only browsing for the explorer (DESIGN §10): the reader role, read-only transactions.

Who may see which workspace is decided by the explorer (Datasette actors) before calling these;
row-level security still confines every query to the one workspace named.
"""

from __future__ import annotations

from typing import Any

import msgspec

from shared.errors import NotFound
from shared.models import Card, IncomingLink, card_id_str, parse_card_id
from shared.store import activity as activity_rows, cards, evaluations, listing, outbox
from shared.store import workspaces as workspace_rows
from shared.store.database import Database
from shared.store.listing import ListQuery


async def workspaces(db: Database) -> list[dict[str, Any]]:
    """Every workspace ``{id, language, created_at}`` (filter by permission afterwards)."""
    async with db.transaction(None, role="reader", read_only=True) as conn:
        return await workspace_rows.list_all(conn)


async def list_cards(db: Database, workspace: str, query: ListQuery) -> tuple[list[Card], int]:
    """A page of cards and the total, as :func:`shared.store.listing.list_cards`.

    :raises NotFound: no such workspace. :raises InvalidInput: bad page or filter.
    """
    async with db.transaction(workspace, role="reader", read_only=True) as conn:
        await workspace_rows.get(conn, workspace)
        return await listing.list_cards(conn, query)


async def pending(db: Database, workspace: str, limit: int = 100, offset: int = 0
                  ) -> tuple[list[dict[str, Any]], int]:
    """Incomplete projection operations of a workspace and their count."""
    async with db.transaction(workspace, role="reader", read_only=True) as conn:
        await workspace_rows.get(conn, workspace)
        return await outbox.pending(conn, limit, offset)


# ---- explorer pages: one read-only transaction per page ----

class ListPage(msgspec.Struct, kw_only=True):
    """A page of cards, the total, and facet counts.

    ``facets[name][value]`` counts the cards matching every filter of the query except the
    facet's own (so a count says how many cards selecting that value adds, like a shop's
    filters). Values with no card are omitted unless selected.
    """

    cards: list[Card]
    total: int
    facets: dict[str, dict[str, int]]


class CardView(msgspec.Struct, kw_only=True):
    """A card with what its page shows around it.

    ``link_titles`` maps each outgoing link target to the target's title.
    """

    card: Card
    incoming_links: list[IncomingLink]
    open_operations: list[dict[str, Any]]
    link_titles: dict[str, str]


async def list_page(db: Database, workspace: str, query: ListQuery, *,
                    facets: bool = True) -> ListPage:
    """A page of cards as :func:`list_cards`, plus facet counts (family, origin, concepts,
    database, and table within the selected database); see :func:`listing.facet_counts`.
    Selected values always appear, with their count (0 when nothing matches).

    :raises NotFound: no such workspace. :raises InvalidInput: bad page or filter.
    """
    async with db.transaction(workspace, role="reader", read_only=True) as conn:
        await workspace_rows.get(conn, workspace)
        counts: dict[str, dict[str, int]] = {}
        if not facets:
            page, total = await listing.list_cards(conn, query)
        else:  # with a text search: one statement for the page, its total and the facets
            page, total, counts = await listing.list_cards_and_facets(conn, query)
            for name in counts:
                for value in selected_values(query, name):
                    counts[name].setdefault(value, 0)
        return ListPage(cards=page, total=total, facets=counts)


def selected_values(query: ListQuery, facet: str) -> list[str]:
    """The values of ``facet`` selected in ``query`` (single-valued filters as a list)."""
    value = getattr(query, facet)
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


async def card_view(db: Database, workspace: str, card_id: str) -> CardView:
    """A card, its incoming links, its open projection operations and its link targets' titles.

    :raises NotFound: no such card in this workspace (another workspace's id included).
    """
    cid = parse_card_id(card_id)
    if cid is None:
        raise NotFound(f"no card {card_id!r} in this workspace")
    async with db.transaction(workspace, role="reader", read_only=True) as conn:
        await workspace_rows.get(conn, workspace)
        card = await cards.get(conn, cid)
        incoming = await cards.incoming_links(conn, cid)
        ops = await outbox.pending_for_card(conn, cid)
        targets = [t for t in (parse_card_id(link.target) for link in card.links) if t is not None]
        linked = await cards.get_many(conn, targets)
        titles = {card_id_str(u): c.title for u, c in linked.items()}
        return CardView(card=card, incoming_links=incoming, open_operations=ops, link_titles=titles)


async def workspace_overview(db: Database, workspace: str) -> dict[str, Any]:
    """``{cards, current, open_operations, evaluation}``: card count, cards with a current
    projection, incomplete projection operations of a workspace, and its latest finished recall
    evaluation (``{finished_at, regression, figures: [{mode, source, cases, r1, r3, r5, mrr}]}``,
    None before the first).

    :raises NotFound: no such workspace.
    """
    async with db.transaction(workspace, role="reader", read_only=True) as conn:
        await workspace_rows.get(conn, workspace)
        counts = await outbox.projection_counts(conn)
        _, open_ops = await outbox.pending(conn, limit=0)
        latest = await evaluations.latest_done(conn)
    evaluation = None if latest is None else {
        "finished_at": latest["finished_at"], "regression": bool(latest["regression"]),
        "figures": (latest["figures"] or {}).get("figures", [])}
    return {"cards": counts["cards"], "current": counts["current"], "open_operations": open_ops,
            "evaluation": evaluation}


async def activity(db: Database, workspace: str, *, limit: int = 50, offset: int = 0,
                   verb: str | None = None, card_id: str | None = None,
                   outcome: str | None = None) -> tuple[list[dict[str, Any]], int]:
    """The activity log of a workspace, newest first, and its total (filters as
    :func:`shared.store.activity_rows.entries`).

    :raises NotFound: no such workspace. :raises InvalidInput: ``card_id`` is not a card id.
    """
    from shared.errors import InvalidInput

    card_uuid = None
    if card_id:
        card_uuid = parse_card_id(card_id)
        if card_uuid is None:
            raise InvalidInput(f"{card_id!r} is not a card id", field="card_id")
    async with db.transaction(workspace, role="reader", read_only=True) as conn:
        await workspace_rows.get(conn, workspace)
        return await activity_rows.entries(conn, verb=verb, card_uuid=card_uuid, outcome=outcome,
                                          limit=limit, offset=offset)
