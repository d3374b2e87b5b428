"""The effective filter of a recall request (``shared.recall.eligibility.build_filter``, DESIGN
§5) and its PostgreSQL-side twin (``matches_filters``), pure: a request and a principal in, an
:class:`~shared.index.engine.IndexFilter` out. The same filters against real cards and a real
index are tested in ``tests/test_filters.py``."""

from __future__ import annotations

import uuid

import msgspec
import pytest

from shared.auth import Principal
from shared.errors import Forbidden, InvalidInput
from shared.index.engine import IndexFilter
from shared.models import PROJECTION_FORMAT, SearchRequest, card_id_str
from shared.recall.eligibility import (CandidateRow, build_filter, dependency_matches, eligible,
                                       matches_filters)

CARD, OTHER = uuid.UUID(int=1), uuid.UUID(int=2)
READER = Principal(workspace="acme", permissions=frozenset({"memory.read"}), actor="t")
BOUND = msgspec.structs.replace(READER, database="shop", schema="public")


def request(**fields) -> SearchRequest:
    """A request body, decoded as the writer decodes it."""
    return msgspec.convert({"query": "net revenue", **fields}, SearchRequest)


def row(**fields) -> CandidateRow:
    values = {"id": CARD, "family": "sql_rule", "scope": "retail", "concepts": ("a", "b"),
              "revision": 2, "projected_revision": 2, "projected_format": PROJECTION_FORMAT,
              "dependencies": (("shop", "public", "orders", None),), **fields}
    return CandidateRow(**values)


def test_the_mode_gives_the_families_and_family_narrows_them():
    assert build_filter(READER, request()).families == (
        "domain_clarification", "sql_rule", "explained_error")
    assert build_filter(READER, request(mode="solved")).families == ("solved_question",)
    narrowed = build_filter(READER, request(family=["explained_error", "sql_rule"]))
    assert narrowed.families == ("sql_rule", "explained_error")  # in the mode's order
    with pytest.raises(InvalidInput, match="mode 'rules' does not return domain_clarification"):
        build_filter(READER, request(mode="rules", family=["domain_clarification"]))


def test_filters_become_the_index_filter():
    flt = build_filter(READER, request(filters={
        "scope": "retail", "concepts": [" a ", "b", "a", "  "], "database": "shop",
        "table": "orders"}, exclude=[card_id_str(CARD), f" {card_id_str(CARD).upper()} ",
                                     card_id_str(OTHER)]))
    assert flt == IndexFilter(families=flt.families, scope="retail", concepts=("a", "b"),
                              physical=("shop", None, "orders", None), exclude=(CARD, OTHER))


@pytest.mark.parametrize(("fields", "field"), [
    ({"query": "  "}, "query"),
    ({"query": "a\x00b"}, "query"),
    ({"filters": {"scope": "a\x00"}}, "filters.scope"),
    ({"filters": {"concepts": ["ok", "b\x00"]}}, "filters.concepts[1]"),
    ({"filters": {"database": "shop", "column": "id"}}, "filters.column"),
    ({"filters": {"table": "orders"}}, "filters.database"),
    ({"exclude": ["orders"]}, "exclude[0]"),
])
def test_a_malformed_request_is_refused_naming_the_field(fields, field):
    with pytest.raises(InvalidInput) as refused:
        build_filter(READER, request(**fields))
    assert refused.value.extra["field"] == field


def test_a_bound_principal_fills_its_binding_and_cannot_widen_it():
    assert build_filter(BOUND, request()).physical == ("shop", "public", None, None)
    assert build_filter(BOUND, request(filters={"table": "orders"})).physical == (
        "shop", "public", "orders", None)
    for filters in ({"database": "crm"}, {"database": "shop", "schema": "sales"}):
        with pytest.raises(Forbidden):
            build_filter(BOUND, request(filters=filters))
    database_only = msgspec.structs.replace(READER, database="shop")
    assert build_filter(database_only, request(filters={"schema": "sales"})).physical == (
        "shop", "sales", None, None)


def test_one_dependency_entry_must_satisfy_the_physical_context():
    assert dependency_matches(("shop", "public", "orders", "id"), ("shop", None, None, None))
    assert not dependency_matches(("shop", None, "orders", None), ("shop", "public", "items", None))
    two = row(dependencies=(("shop", "public", "orders", None), ("crm", "public", "items", None)))
    assert matches_filters(two, IndexFilter(physical=("shop", None, "orders", None)))
    assert not matches_filters(two, IndexFilter(physical=("shop", None, "items", None)))
    assert matches_filters(row(dependencies=()), IndexFilter(physical=("crm", None, None, None)))


def test_the_postgresql_twin_applies_every_filter():
    assert matches_filters(row(), IndexFilter(families=("sql_rule",), scope="retail",
                                              concepts=("b",)))
    for flt in (IndexFilter(families=("solved_question",)), IndexFilter(scope="Retail"),
                IndexFilter(concepts=("a", "c")), IndexFilter(exclude=(CARD,))):
        assert not matches_filters(row(), flt)
    assert eligible(row(), IndexFilter())
    assert not eligible(None, IndexFilter())
    assert not eligible(row(projected_revision=1), IndexFilter())
    assert not eligible(row(projected_format=PROJECTION_FORMAT - 1), IndexFilter())


def test_specificity_is_the_share_of_the_filter_a_matching_dependency_names_itself():
    """Issue 42, section 2: how specific a card is to a physical filter."""
    from shared.recall.eligibility import specificity

    table = ("shop", None, "orders", None)
    assert specificity(row(), table) == 1.0  # shop.public.orders names database and table
    assert specificity(row(), ("shop", None, None, None)) == 1.0
    assert specificity(row(dependencies=(("shop", None, None, None),)), table) == 0.5
    assert specificity(row(dependencies=()), table) == 0.0  # workspace-wide
    assert specificity(row(dependencies=(("crm", "public", "orders", None),)), table) == 0.0
    assert specificity(row(), (None, None, None, None)) == 0.0  # no filter: nothing to match
    # the best of several dependencies counts
    both = (("shop", None, None, None), ("shop", "public", "orders", "id"))
    assert specificity(row(dependencies=both), ("shop", None, "orders", "id")) == 1.0
    assert specificity(row(dependencies=both), ("shop", None, "orders", "total")) == 1 / 3


def test_the_specificity_prior_reorders_verified_seeds_within_its_bound():
    """A specific card passes a workspace-wide one only when its fused score is within the
    prior's factor of it; with the prior off (0) the fused order stays."""
    from shared.recall.verified import _by_specificity

    wide, specific, far = uuid.UUID(int=11), uuid.UUID(int=12), uuid.UUID(int=13)
    rows = {wide: row(id=wide, dependencies=()), specific: row(id=specific),
            far: row(id=far)}
    fused = {wide: 1.0, specific: 0.9, far: 0.5}
    physical = ("shop", None, "orders", None)
    assert _by_specificity([wide, specific, far], fused, rows, physical, 0.25) == [
        specific, wide, far]  # 0.9 × 1.25 > 1.0, 0.5 × 1.25 < 1.0
    assert _by_specificity([wide, specific, far], fused, rows, physical, 0.05) == [
        wide, specific, far]  # 0.9 × 1.05 < 1.0
    assert _by_specificity([wide, specific, far], fused, rows, physical, 0.0) == [
        wide, specific, far]
