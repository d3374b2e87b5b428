"""What leaves PostgreSQL for a card (DESIGN §4, projection format 4): the text of each named
vector and the point payload, through the privacy filter.

The six named vectors (:data:`shared.index.engine.ARCHIVE_DENSE` / ``ARCHIVE_SPARSE``):

| vector | text |
| --- | --- |
| ``key`` (dense), ``key_bm25`` (BM25) | the key text, what a new request is compared with: a solved question's question, a clarification's term and definition, a rule's rule, an explained error's error (:func:`key_text`) |
| ``dense`` | a solved question: its content (question, SQL, context; :func:`content_text`); a clarification or a rule: the card's text plus the questions of the solved cards that link to it (document expansion); an explained error: the card's text |
| ``bm25`` | the card's text (:func:`projected_text`), plus the same linked questions for a clarification or a rule |
| ``own`` (dense), ``own_bm25`` (BM25) | format 4: the texts of ``dense`` and ``bm25`` without the linked questions, the card's own words (identical to them, and embedded once, for every card without linked questions) |

Why (``bench/README.md``, recall quality, measured on data it was not tuned on): a reworded
question is closer to the stored question than to question + SQL + context, so the key vector
finds solved questions; and a new question resembles the questions that already needed a
clarification ("elder users" → "Age > 65") much more than the clarification's own words, so a
clarification or rule is indexed with the questions of the solved cards that use it, the
document expansion of Nogueira et al., "Document Expansion by Query Prediction" (2019), with
real past questions instead of predicted ones. Those questions change the clarification's
projection: a database trigger (migration 006) queues its re-projection in the same
transaction as any change of a linking solved card or of the links themselves.

The same questions dilute a rule's text for a question that did not come through them: ``rules``
mode searches the own-text vectors instead (format 4, migration 014; ``bench/README.md``).
"""

from __future__ import annotations

import hashlib

from typing import Any

from shared import models
from shared.index.engine import BM25, DENSE, KEY, KEY_BM25, OWN, OWN_BM25
from shared.models import Card
from shared.privacy import DEFAULT_FILTER, PrivacyFilter

#: content fields in the order they are written into a card's text
CONTENT_FIELDS = ("definition", "rule", "question", "error", "correction", "sql", "context",
                  "rationale")
#: the content field that is a family's key text (clarifications: term and definition)
KEY_FIELD = {"solved_question": "question", "sql_rule": "rule", "explained_error": "error"}
#: families indexed with the questions of the solved cards that link to them
EXPANDED_FAMILIES = ("domain_clarification", "sql_rule")
#: at most this many linked questions are added to a card's text (by the solved card's id)
MAX_LINKED_QUESTIONS = 50


def projected_text(card: Card) -> str:
    """The card's text: title, content fields, scope, concepts and the qualified dependency
    names, one per line."""
    parts = [card.title]
    for name in CONTENT_FIELDS:
        value = card.content.get(name)
        if value:
            parts.append(value)
    if card.scope:
        parts.append(f"scope: {card.scope}")
    if card.concepts:
        parts.append("concepts: " + ", ".join(card.concepts))
    if card.dependencies:
        parts.append("objects: " + ", ".join(d.qualified() for d in card.dependencies))
    return "\n".join(parts)


def content_text(card: Card) -> str:
    """The content fields, one per line, preceded by the title unless a field already contains
    it (a solved question's title is its question)."""
    fields = [card.content[n] for n in CONTENT_FIELDS if card.content.get(n)]
    title = " ".join(card.title.rstrip("\u2026").split()).lower()
    repeated = bool(title) and any(title in " ".join(f.split()).lower() for f in fields)
    return "\n".join(([] if repeated else [card.title]) + fields)


def key_text(card: Card) -> str:
    """The card's key text: a solved question's question, a rule's rule, an explained error's
    error; a clarification's title and definition (the title alone when it already holds the
    definition). Falls back to the title."""
    if card.family == "domain_clarification":
        definition, title = card.content.get("definition", ""), card.title
        if definition.strip().lower() in title.strip().lower():
            return title
        return f"{title}\n{definition}"
    return card.content.get(KEY_FIELD.get(card.family, ""), "") or card.title


def vector_texts(card: Card, linked_questions: list[str]) -> dict[str, str]:
    """The text of each named vector of ``card`` (see the module docstring); ``linked_questions``
    are the questions of the solved cards linking to it (ignored for families not expanded)."""
    own = projected_text(card)
    text = own
    if card.family in EXPANDED_FAMILIES and linked_questions:
        text = "\n".join([own, *linked_questions[:MAX_LINKED_QUESTIONS]])
    solved = card.family == "solved_question"
    key = key_text(card)
    return {DENSE: content_text(card) if solved else text, KEY: key, BM25: text, KEY_BM25: key,
            OWN: content_text(card) if solved else own, OWN_BM25: own}


def payload(card: Card) -> dict[str, Any]:
    """The point payload: what the filters need, plus revision and projection format
    (unfiltered: :func:`projected_document` redacts its string values)."""
    return {
        "workspace": card.workspace,
        "family": card.family,
        "scope": card.scope,
        "concepts": list(card.concepts),
        "deps": [{"database": d.database, "schema": d.schema, "table": d.table, "column": d.column}
                 for d in card.dependencies],
        "revision": card.revision,
        "format": models.PROJECTION_FORMAT,
    }


def projected_document(card: Card, privacy: PrivacyFilter = DEFAULT_FILTER,
                       linked_questions: list[str] | None = None
                       ) -> tuple[dict[str, str], dict[str, Any]]:
    """What leaves PostgreSQL for a card: the text of each named vector and the point payload,
    all through the privacy filter (secrets become ``[REDACTED:<kind>]``; the payload's
    ``scope``, ``concepts`` and dependency names are redacted value by value, the way recall
    redacts its filter values, so filters still match).

    :raises PrivacyFilterFailed: the filter could not process the card (fail closed).
    """
    texts = {name: privacy.redact(text)
             for name, text in vector_texts(card, linked_questions or []).items()}
    pl = payload(card)
    pl["scope"] = privacy.redact_optional(pl["scope"])
    pl["concepts"] = [privacy.redact(c) for c in pl["concepts"]]
    pl["deps"] = [{k: privacy.redact_optional(v) for k, v in d.items()} for d in pl["deps"]]
    pl["texts"] = texts_digest(texts)
    return texts, pl


def texts_digest(texts: dict[str, str]) -> str:
    """SHA-256 (hex, first 32 digits) over the filtered texts a point's vectors were made from,
    by vector name: the payload's ``texts``. A switch back to a kept index (migration 025)
    re-embeds exactly the cards whose texts differ from what the kept points were made of (a
    linked question that changed since, for example); the texts are already redacted, so the
    digest says nothing the privacy filter took out."""
    blob = "\0".join(f"{name}\0{texts[name]}" for name in sorted(texts))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]
