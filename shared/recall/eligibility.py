"""Which cards recall may return: a request's effective filter and its PostgreSQL-side twin.

:func:`build_filter` turns a request and its principal into the filter sent to the index;
:class:`CandidateRow` is what verification reads of a card, and :func:`eligible` decides from it
whether the card may be returned (DESIGN §5 step 2) or bridged through (step 3).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from shared import models
from shared.auth import Principal
from shared.errors import Forbidden, InvalidInput
from shared.index.engine import IndexFilter
from shared.models import MODE_FAMILIES, Filters, SearchRequest, parse_card_id, reject_nul


def build_filter(principal: Principal, req: SearchRequest) -> IndexFilter:
    """The effective filter of a request: mode families (narrowed by ``family``), filters, the
    principal's database/schema binding, and exclusions.

    Exclusions are card ids in any spelling (:func:`~shared.models.parse_card_id`), each once.

    :raises InvalidInput: a family outside the mode, an exclusion that is not a card id, a
        physical filter with a gap, a NUL character in the query or a filter value. :raises Forbidden: a filter outside the token's binding.
    """
    if not req.query.strip():
        raise InvalidInput("query must not be blank", field="query")
    reject_nul(req.query, "query")
    allowed = MODE_FAMILIES[req.mode]
    families = allowed
    if req.family:
        outside = [f for f in req.family if f not in allowed]
        if outside:
            raise InvalidInput(f"mode {req.mode!r} does not return {', '.join(outside)} "
                               f"(allowed: {', '.join(allowed)})", field="family")
        families = tuple(f for f in allowed if f in req.family)
    flt = req.filters or Filters()
    for name in ("scope", "database", "schema", "table", "column"):
        reject_nul(getattr(flt, name), f"filters.{name}")
    for i, concept in enumerate(flt.concepts):
        reject_nul(concept, f"filters.concepts[{i}]")
    database, schema = flt.database, flt.schema
    if principal.database is not None:
        if database is not None and database != principal.database:
            raise Forbidden(f"this token is bound to database {principal.database!r}")
        database = principal.database
        if principal.schema is not None:
            if schema is not None and schema != principal.schema:
                raise Forbidden(f"this token is bound to schema {principal.schema!r}")
            schema = principal.schema
    physical = (database, schema, flt.table, flt.column)
    if flt.column is not None and flt.table is None:
        raise InvalidInput("filters.column needs filters.table", field="filters.column")
    if any(v is not None for v in physical[1:]) and database is None:
        raise InvalidInput("a schema, table or column filter needs filters.database",
                           field="filters.database")
    exclude: dict[uuid.UUID, None] = {}  # a card named twice (in any spelling) counts once
    for i, ref in enumerate(req.exclude):
        cid = parse_card_id(ref)
        if cid is None:
            raise InvalidInput(f"exclude[{i}] {ref!r} is not a card id", field=f"exclude[{i}]")
        exclude[cid] = None
    concepts = tuple(dict.fromkeys(c.strip() for c in flt.concepts if c.strip()))
    return IndexFilter(families=families, scope=flt.scope, concepts=concepts, physical=physical,
                       exclude=tuple(exclude))


@dataclass(frozen=True)
class CandidateRow:
    """What verification needs of a card, read from PostgreSQL."""

    id: uuid.UUID
    family: str
    scope: str | None
    concepts: tuple[str, ...]
    revision: int
    projected_revision: int | None
    projected_format: int | None
    dependencies: tuple[tuple[str | None, ...], ...]
    #: the first ``LINKS_PER_CARD + 1`` outgoing link targets in target-id order (DESIGN §5.3),
    #: read with the row so that expansion needs no separate link query for a card already read
    #: (the one more tells it that the card has more links than it follows)
    links: tuple[uuid.UUID, ...] = ()

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "CandidateRow":
        return cls(row["id"], row["family"], row["scope"], tuple(row["concepts"]), row["revision"],
                   row["projected_revision"], row["projected_format"],
                   tuple(tuple(d) for d in row["dependencies"]), tuple(row.get("links") or ()))

    def is_current(self) -> bool:
        """A valid projection of this revision in the current format is recorded."""
        return (self.projected_revision == self.revision
                and self.projected_format == models.PROJECTION_FORMAT)


def dependency_matches(physical: tuple[str | None, ...], dep: tuple[str | None, ...]) -> bool:
    """One dependency entry satisfies a physical context: every requested level is equal, or the
    entry stops above it (None)."""
    return all(want is None or have is None or have == want for want, have in zip(physical, dep))


def specificity(row: CandidateRow, physical: tuple[str | None, ...]) -> float:
    """How specific a card is to a physical filter (issue 42), in [0, 1]: over the card's
    dependencies that satisfy the filter (:func:`dependency_matches`), the largest share of the
    filter's named levels (database, schema, table, column) that the dependency names itself
    rather than stopping above. A workspace-wide card (no dependencies), a card none of whose
    dependencies matches, and any card under a filter that names nothing get 0; a card whose
    dependency names the filter's database and table, under ``{database, table}``, gets 1."""
    named = [i for i, v in enumerate(physical) if v is not None]
    if not named or not row.dependencies:
        return 0.0
    best = 0
    for dep in row.dependencies:
        if dependency_matches(physical, dep):
            best = max(best, sum(1 for i in named if i < len(dep) and dep[i] is not None))
    return best / len(named)


def matches_filters(row: CandidateRow, flt: IndexFilter) -> bool:
    """The PostgreSQL-side twin of the index filter (DESIGN §5): family, exact scope, all
    concepts, physical context by a single dependency entry (no dependencies = workspace-wide),
    and the caller's exclusions."""
    if flt.families and row.family not in flt.families:
        return False
    if flt.scope is not None and row.scope != flt.scope:
        return False
    if any(c not in row.concepts for c in flt.concepts):
        return False
    if any(v is not None for v in flt.physical) and row.dependencies:
        if not any(dependency_matches(flt.physical, dep) for dep in row.dependencies):
            return False
    return row.id not in flt.exclude


def eligible(row: CandidateRow | None, flt: IndexFilter) -> bool:
    """Existing, current, inside the filters and mode, not excluded."""
    return row is not None and row.is_current() and matches_filters(row, flt)
