"""What a reviewer sees next to a proposed addition (issue 24, "Review of a session"): the
closest cards of its family by recall ("similar, not the same") and the solved questions of its
databases nearest to it, through the archive's verified recall (DESIGN §5).

A reviewer's token holds ``memory.review`` (not necessarily ``memory.read``); the summary already
shows them the cards a proposal would reuse or update, so the recall here runs as a read of the
same workspace on their behalf, and answers only ids, titles, families, revisions and scores.
When recall cannot answer (no index, no model, the privacy filter refused), the answer says so
and the review goes on without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.archive.responses import (NearbyCard, NearbyItem, ReviewNeighbours, Summary,
                                     SummaryItem)
from shared.auth import Principal
from shared.errors import Unavailable
from shared.models import MAX_QUERY, Filters, RecallResponse, SearchRequest

if TYPE_CHECKING:
    from shared.archive.cards import Archive

#: databases of one addition whose solved questions are searched (the first ones named)
MAX_DATABASES = 2


def query_text(item: SummaryItem) -> str:
    """The recall query of an addition: its title and content, bounded."""
    assert item.card is not None
    text = " ".join([item.card.title, *item.card.content.values()])
    return text[:MAX_QUERY]


def _cards(response: RecallResponse, skip: set[str], limit: int) -> list[NearbyCard]:
    return [NearbyCard(card_id=r.card.id, title=r.card.title, family=r.card.family,
                       revision=r.card.revision, score=round(r.score, 4))
            for r in response.results if r.card.id not in skip][:limit]


async def neighbours(archive: Archive, principal: Principal, workspace: str, summary: Summary,
                     limit: int = 3) -> ReviewNeighbours:
    """The neighbours of ``summary``'s open additions (``archive``: the
    :class:`~shared.archive.cards.Archive` whose recall runs; ``limit`` per list).

    :raises Forbidden: the token lacks ``memory.review``. :raises NotFound: another workspace.
    """
    principal.require(workspace, "memory.review")
    reader = Principal(workspace=workspace, permissions=frozenset({"memory.read"}),
                       actor=principal.actor)
    items: dict[str, NearbyItem] = {}
    try:
        for item in summary.proposals:
            if item.kind != "addition" or item.reviewed is not None or item.card is None:
                continue
            items[item.key] = await _nearby(archive, reader, workspace, item, limit)
    except Unavailable as exc:
        return ReviewNeighbours(available=False, items={}, reason=exc.message)
    return ReviewNeighbours(available=True, items=items)


async def _nearby(archive: Archive, reader: Principal, workspace: str, item: SummaryItem,
                  limit: int) -> NearbyItem:
    """One addition's similar cards and nearby solved questions."""
    assert item.card is not None
    query = query_text(item)
    skip = {c for c in (item.card_id, item.possible_duplicate and
                        item.possible_duplicate.card_id) if c}
    mode = "solved" if item.card.family == "solved_question" else "search"
    # the archive's own look-ups, not a caller's recalls: no recall record
    similar = await archive.search(reader, workspace, SearchRequest(
        query=query, top=limit + len(skip), mode=mode, family=[item.card.family]), record=False)
    solved: list[NearbyCard] = []
    for database in list(dict.fromkeys(d.database for d in item.card.dependencies))[:MAX_DATABASES]:
        if len(solved) >= limit:
            break
        found = await archive.search(reader, workspace, SearchRequest(
            query=query, top=limit, mode="solved", family=["solved_question"],
            filters=Filters(database=database)), record=False)
        solved += _cards(found, skip | {c.card_id for c in solved}, limit - len(solved))
    return NearbyItem(key=item.key, similar=_cards(similar, skip, limit), solved=solved)
