"""The workflow's rules (DESIGN §6), pure, without a database: what a proposal is, the card it
would write, its link targets, reuse, and the staleness of an update (``shared.workflow.rules``).
The text normaliser that reuse compares content with is tested in ``test_normalise.py``."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import msgspec
import pytest

from shared.errors import InvalidInput
from shared.models import Card, CardWrite, Dependency, Link, LinkIn, card_id_str, clean_session_id
from shared.workflow import rules
from shared.workflow.requests import CardRevision, Proposal, ReviewEdits, ReviewRequest
from shared.workflow.rules import Addition, Update

APPROVED = [{"id": " d-1 ", "status": "Approved"}, {"id": "d-2", "status": "rejected"}]
CARD = uuid.UUID("00000000-0000-4000-8000-000000000001")
OTHER = uuid.UUID("00000000-0000-4000-8000-000000000002")
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def proposal(**fields) -> Proposal:
    """A wire proposal, decoded as the writer decodes it."""
    return msgspec.convert({"key": "k", "decisions": APPROVED, **fields}, Proposal)


def addition(**fields) -> Proposal:
    return proposal(**{"family": "sql_rule", "title": "Net revenue",
                       "content": {"rule": "Exclude cancelled orders."}, **fields})


def update(**fields) -> Proposal:
    return proposal(kind="update", card_id=card_id_str(CARD), revision=3, **fields)


def card(revision: int = 3, **fields) -> Card:
    """Card ``CARD`` as the archive holds it now."""
    values = {"id": card_id_str(CARD), "workspace": "acme", "family": "sql_rule",
              "title": "Net revenue", "scope": None, "origin": "manual", "source": None,
              "concepts": ["revenue"], "dependencies": [], "links": [],
              "content": {"rule": "Exclude cancelled orders."}, "revision": revision,
              "created_at": NOW, "updated_at": NOW, **fields}
    return Card(**values)


def refusal(call, *args) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        call(*args)
    return caught.value


# ---- a proposal is an addition or an update ----

def test_an_addition_carries_its_card_fields_and_approved_decisions_only():
    d = rules.draft(addition(concepts=["revenue"]), "proposals[0]")
    assert d == Addition(key="k", decision_ids=["d-1"], family="sql_rule", title="Net revenue",
                         content={"rule": "Exclude cancelled orders."}, concepts=["revenue"])
    assert d.kind == "addition"


def test_an_update_names_its_card_and_the_revision_it_was_drafted_against():
    d = rules.draft(update(title="Net revenue (v2)"), "proposals[0]")
    assert d == Update(key="k", decision_ids=["d-1"], card_id=CARD, revision=3,
                       title="Net revenue (v2)")
    assert d.kind == "update" and rules.edited_card(d) == CARD
    assert rules.edited_card(rules.draft(addition(), "p")) is None


@pytest.mark.parametrize(("wire", "words", "field"), [
    (addition(decisions=[{"id": "d", "status": "rejected"}]), "no approved decision", "decisions"),
    (addition(decisions=[]), "decision statuses: none", "decisions"),
    (proposal(key=f"mem-{CARD}", family="sql_rule", title="t", content={"rule": "r"}),
     "must not look like a card id", "key"),
    (proposal(key=" k", family="sql_rule", title="t", content={"rule": "r"}),
     "no surrounding whitespace", "key"),
    (addition(rationale="a\x00b"), "NUL", "rationale"),
    (addition(card_id=card_id_str(CARD)), "use kind 'update'", "card_id"),
    (proposal(title="t", content={"rule": "r"}), "needs a family", "family"),
    (proposal(family="sql_rule", title="  ", content={"rule": "r"}), "needs a title", "title"),
    (proposal(family="sql_rule", title="Use orders", content={}),
     "no reusable content: a sql_rule needs a rule (missing rule)", "content"),
    (proposal(family="explained_error", title="Query failed",
              content={"error": "column does not exist"}),
     "needs an error and its correction (missing correction)", "content"),
    (proposal(kind="update", card_id="orders", revision=1, title="t"), "names the card it edits",
     "card_id"),
    (proposal(kind="update", card_id=card_id_str(CARD), title="t"), "names the revision",
     "revision"),
    (update(), "changes at least one field", "content"),
    (update(family="sql_rule", content={"rationale": "why"}), "no reusable content", "content"),
])
def test_a_proposal_is_refused_with_a_reason_naming_it(wire, words, field):
    exc = refusal(rules.draft, wire, "proposals[2]")
    assert words in exc.message and exc.message.startswith("proposals[2] (key")
    assert exc.extra["field"] == f"proposals[2].{field}" and exc.extra["item"] == wire.key


def test_keys_of_a_batch_are_distinct():
    exc = refusal(rules.check_batch, [addition(), addition(title="Again")])
    assert exc.extra == {"field": "proposals[1].key", "item": "k"}
    assert "duplicate key 'k' (also proposals[0])" in exc.message


@pytest.mark.parametrize(("request_", "words"), [
    ({"review_id": "  "}, "must not be blank"),
    ({"review_id": "r"}, "select at least one proposal"),
    ({"review_id": "r", "decline_all": True, "selected": [{"key": "a"}]}, "send no selection"),
    ({"review_id": "r", "selected": [{"key": "a"}, {"key": "a"}]}, "selected twice"),
])
def test_a_review_selects_distinct_keys_or_declines_all(request_, words):
    assert words in refusal(rules.check_review, msgspec.convert(request_, ReviewRequest)).message


def test_a_review_id_is_trimmed():
    assert rules.check_review(ReviewRequest(review_id=" r ", decline_all=True)) == "r"


def test_a_session_id_is_trimmed_and_1_to_200_characters():
    assert clean_session_id("  s 1:x ") == "s 1:x"
    for bad in ("   ", "x" * 201, "a\x00b", "a/b", ".", " .. "):
        assert refusal(clean_session_id, bad).extra["field"] == "session_id"
    assert clean_session_id("...") == "..." and clean_session_id("a..b") == "a..b"


# ---- the card a proposal would write ----

def test_an_update_keeps_the_fields_it_leaves_out_and_replaces_content_as_a_whole():
    now = card(scope="retail", links=[Link(target=card_id_str(OTHER), meaning="see")])
    d = rules.draft(update(content={"rule": "Exclude cancelled and refunded orders."}), "p")
    body = rules.card_body(d, now, None, "p")
    assert (body.family, body.title, body.scope, body.concepts) == (
        "sql_rule", "Net revenue", "retail", ["revenue"])
    assert body.content == {"rule": "Exclude cancelled and refunded orders."}
    assert body.links == [LinkIn(target=card_id_str(OTHER), meaning="see")]


def test_a_reviewers_edits_replace_fields_and_merge_content_field_by_field():
    d = rules.draft(proposal(family="solved_question", title="Active per country",
                             content={"question": "How many?", "sql": "SELECT 1"}), "p")
    edits = ReviewEdits(title="Active customers per country",
                        content={"question": "How many active?", "context": "last 30 days"})
    body = rules.card_body(d, None, edits, "selected[0]")
    assert body.title == "Active customers per country"
    assert body.content == {"question": "How many active?", "sql": "SELECT 1",
                            "context": "last 30 days"}


def test_the_approved_sql_is_read_only_in_review():
    d = rules.draft(proposal(family="solved_question", title="q",
                             content={"question": "How many?", "sql": "SELECT 1"}), "p")
    # the same SQL up to surrounding whitespace is no change (and the card stores it trimmed)
    body = rules.card_body(d, None, ReviewEdits(content={"sql": " SELECT 1 "}), "s")
    assert body.content["sql"] == "SELECT 1"
    exc = refusal(rules.card_body, d, None, ReviewEdits(content={"sql": "SELECT 2"}), "selected[1]")
    assert "read-only" in exc.message and exc.extra["field"] == "selected[1].edits.content.sql"


def test_an_update_may_not_change_the_family_or_edit_a_card_of_another_workspace():
    d = rules.draft(update(family="domain_clarification", title="t"), "proposals[0]")
    exc = refusal(rules.proposal_body, d, {CARD: card()}, "proposals[0]")
    assert "family cannot change (sql_rule -> domain_clarification)" in exc.message
    exc = refusal(rules.proposal_body, d, {}, "proposals[0]")
    assert "is not a card of this workspace" in exc.message
    assert exc.extra["field"] == "proposals[0].card_id"


def test_what_an_update_would_change_is_a_field_diff():
    body = CardWrite(family="sql_rule", title="Net revenue (v2)",
                     content={"rule": "Exclude cancelled orders.", "rationale": "refunds"},
                     concepts=["revenue"], dependencies=[Dependency(database="shop")],
                     links=[LinkIn(target=card_id_str(OTHER), meaning="see")])
    diff = msgspec.to_builtins(rules.changes(card(), body))
    assert diff == {
        "title": {"before": "Net revenue", "after": "Net revenue (v2)"},
        "content.rationale": {"before": None, "after": "refunds"},
        "dependencies": {"before": [], "after": [
            {"database": "shop", "schema": None, "table": None, "column": None}]},
        "links": {"before": [], "after": [{"target": card_id_str(OTHER), "meaning": "see"}]}}


# ---- link targets ----

def links(*targets: str) -> list[LinkIn]:
    return [LinkIn(target=t) for t in targets]


def test_a_link_targets_an_existing_card_or_a_proposal_written_with_it():
    ok = rules.link_problems(links(card_id_str(OTHER), "q1"), key="k", card_id=None,
                             written={"q1": None}, session={"q1"}, cards={OTHER})
    assert ok == []


@pytest.mark.parametrize(("target", "problem"), [
    (card_id_str(OTHER), f"links[0].target {card_id_str(OTHER)} is not a card of this workspace"),
    (card_id_str(CARD), "links[0]: a card cannot link to itself"),
    ("k", "links[0]: a proposal cannot link to itself"),
    ("same-card", "links[0]: a card cannot link to itself"),
    ("q2", "links[0] names proposal 'q2', which is not selected in this review"),
    ("nope", "links[0].target 'nope' is neither a card id nor the key of a proposal of this "
             "session"),
])
def test_a_link_to_anything_else_is_a_problem(target, problem):
    # proposal "k" writes card CARD; "same-card" is another proposal that writes CARD too
    # (an addition reusing it); "q2" belongs to the session but is not selected
    assert rules.link_problems(links(target), key="k", card_id=CARD,
                               written={"k": CARD, "same-card": CARD}, session={"k", "q2"},
                               cards={CARD}) == [(0, problem)]


def test_propose_and_review_refuse_the_first_bad_link_naming_its_field():
    exc = refusal(lambda: rules.check_links(links("q1", "nope"), "selected[3]", key="k",
                                            card_id=None, written={"q1": None}, session={"q1"},
                                            cards=set()))
    assert exc.extra == {"field": "selected[3].links[1].target", "item": "k"}


def test_links_by_key_resolve_to_the_cards_the_proposals_write():
    assert rules.resolve_links([LinkIn(target="q1", meaning=" uses "),
                                LinkIn(target=card_id_str(OTHER))], {"q1": CARD}) == [
        (CARD, "uses"), (OTHER, "")]
    bodies = [CardWrite(family="sql_rule", title="t", content={"rule": "r"},
                        links=links(card_id_str(OTHER), "q1", card_id_str(OTHER)))]
    assert rules.card_targets(bodies) == [OTHER]


# ---- reuse of an existing card ----

def test_an_addition_with_the_content_of_an_existing_card_reuses_it():
    new = rules.draft(addition(), "p")
    assert rules.action(new, None) == "create"
    assert rules.action(new, OTHER) == "reuse"
    assert rules.action(rules.draft(update(title="t"), "p"), None) == "update"
    assert rules.DONE == {"create": "created", "reuse": "reused", "update": "updated"}


def test_two_new_cards_that_are_the_same_card_are_refused():
    created = [("sql_rule", "a"), ("sql_rule", "b"), ("domain_clarification", "a"),
               ("sql_rule", "a")]
    assert rules.first_duplicate(created) == (0, 3)
    assert rules.first_duplicate(created[:3]) is None
    exc = rules.same_content(("proposals[0]", "a"), ("stored proposal 'b'", "b"))
    assert exc.message == ("stored proposal 'b' (key 'b'): the same card as proposals[0] "
                           "(key 'a'): same family, content, scope, concepts and dependencies")


def solved_body(**fields) -> CardWrite:
    return CardWrite(**{"family": "solved_question", "title": "Active customers",
                        "content": {"question": "How many active customers?",
                                    "sql": "SELECT count(*) FROM c WHERE s = 'Active'"},
                        "scope": "retail", "concepts": ["active", "customer"],
                        "dependencies": [Dependency("shop", "public", "c")], **fields})


def solved_card(cid: uuid.UUID = OTHER, **fields) -> Card:
    body = solved_body()
    values = {"id": card_id_str(cid), "workspace": "acme", "family": body.family,
              "title": body.title, "scope": body.scope, "origin": "manual", "source": None,
              "concepts": body.concepts, "dependencies": body.dependencies, "links": [],
              "content": body.content, "revision": 2, "created_at": NOW, "updated_at": NOW,
              **fields}
    return Card(**values)


def test_only_the_same_card_is_reused():
    # same card: whitespace in prose and between SQL tokens, concept and dependency order, title
    same = solved_body(title="Another title", concepts=["customer", "active"],
                       content={"question": "How  many active\n customers?",
                                "sql": "SELECT count(*)\n  FROM c WHERE s = 'Active'"})
    assert rules.differences(same, solved_card()) == []
    assert rules.match(same, [solved_card()]) == rules.Match(reuse=OTHER)
    # the oldest same card is reused, even after a closer-looking possible duplicate
    assert rules.match(same, [solved_card(CARD, scope=None), solved_card()]).reuse == OTHER


@pytest.mark.parametrize("fields, differs", [
    ({"scope": "wholesale"}, ["scope"]),
    ({"scope": None}, ["scope"]),
    ({"concepts": ["active"]}, ["concepts"]),
    ({"dependencies": [Dependency("shop", "public", "orders")]}, ["dependencies"]),
    ({"content": {"question": "How many active customers?",
                  "sql": "SELECT count(*) FROM c WHERE s = 'active'"}}, ["content"]),
    ({"content": {"question": "How many active customers?",
                  "sql": "SELECT count(*) FROM c WHERE s = 'Active '"}}, ["content"]),
    ({"content": {"question": "How many ACTIVE customers?",
                  "sql": "SELECT count(*) FROM c WHERE s = 'Active'"}, "scope": "x"},
     ["content", "scope"]),
])
def test_a_card_that_differs_is_a_possible_duplicate_never_a_reuse(fields, differs):
    body = solved_body(**fields)
    assert rules.differences(body, solved_card()) == differs
    m = rules.match(body, [solved_card()])
    assert m.reuse is None and m.possible is not None
    assert (m.possible.card_id, m.possible.revision, m.possible.differs) == (
        card_id_str(OTHER), 2, differs)


def test_the_possible_duplicate_shown_is_the_closest_then_the_oldest():
    body = solved_body(scope=None)
    far = solved_card(CARD, concepts=[], dependencies=[])  # differs in three fields
    near = solved_card(OTHER)  # differs in scope only
    assert rules.match(body, [far, near]).possible.card_id == card_id_str(OTHER)
    assert rules.match(body, [near, solved_card(CARD)]).possible.card_id == card_id_str(OTHER)
    assert rules.match(body, []) == rules.Match()


# ---- staleness of an update ----

def test_an_update_is_stale_when_its_card_moved_on_or_was_deleted():
    d = rules.draft(update(title="t"), "p")
    assert rules.stale_reason(d, card(revision=3)) is None
    assert rules.stale_reason(d, card(revision=4)) == (
        f"card {card_id_str(CARD)} is at revision 4, the proposal was drafted against revision 3")
    assert rules.stale_reason(d, None) == (
        f"card {card_id_str(CARD)} was deleted since the proposal was drafted")
    assert rules.stale_reason(rules.draft(addition(), "p"), None) is None


# ---- a reviewer applies an addition to an existing card ----

def test_an_addition_applied_to_an_existing_card_is_an_update_of_the_fields_it_gives():
    p = addition(scope="retail", concepts=["revenue"])
    d = rules.as_update(p, rules.draft(p, "p"), CardRevision(card_id_str(CARD), 3), "selected[0]")
    assert d == Update(key="k", decision_ids=["d-1"], card_id=CARD, revision=3,
                       family="sql_rule", title="Net revenue",
                       content={"rule": "Exclude cancelled orders."}, scope="retail",
                       concepts=["revenue"])
    # fields the proposal left out keep the card's values
    body = rules.card_body(d, card(dependencies=[Dependency("shop", "public", "orders")]), None,
                           "selected[0]")
    assert (body.scope, body.dependencies) == ("retail", [Dependency("shop", "public", "orders")])
    assert rules.stale_reason(d, card(revision=4)) is not None


def test_only_an_addition_can_be_applied_to_an_existing_card():
    target = CardRevision(card_id_str(CARD), 3)
    exc = refusal(rules.as_update, update(title="t"), rules.draft(update(title="t"), "p"), target,
                  "selected[0]")
    assert exc.extra["field"] == "selected[0].as_update_of" and "names its card" in exc.message
    exc = refusal(rules.as_update, addition(), rules.draft(addition(), "p"),
                  CardRevision("orders", 3), "selected[0]")
    assert exc.extra["field"] == "selected[0].as_update_of.card_id"
    d = rules.as_update(addition(), rules.draft(addition(), "p"), target, "selected[0]")
    exc = refusal(rules.target_card, d, {}, "selected[0]", "as_update_of.card_id")
    assert exc.extra["field"] == "selected[0].as_update_of.card_id"
    exc = refusal(rules.target_card, d, {CARD: card(family="domain_clarification")},
                  "selected[0]", "as_update_of.card_id")
    assert "family cannot change" in exc.message
