"""The review page's form (issue 24, "Review of a session"): one card form per proposal, named
``p<n>-<field>`` (the fields of :mod:`.forms`), a ``p<n>-keep`` checkbox and the proposal's key
in ``p<n>-key``; the review id and the summary's version in hidden fields; the clicked button
``decision`` (``apply`` or ``decline``).

A proposal's form starts from the card it would write (the summary's preview); what the reviewer
changed becomes the :class:`~shared.workflow.requests.ReviewEdits` of its selection, field by
field, so an untouched proposal is applied exactly as proposed. A solved question's approved SQL
is shown read-only and never sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import msgspec

from shared import models
from shared.errors import InvalidInput
from shared.archive.responses import SummaryItem
from shared.workflow.requests import CardPreview, ReviewEdits, ReviewRequest, ReviewSelection
from shared.workflow.rules import SQL_FIELDS
from writer.routes.admin import forms

_ITEM = re.compile(r"^p(\d{1,3})-(.+)$")


def readonly(family: str) -> frozenset[str]:
    """The content fields a reviewer sees but cannot change (the approved SQL)."""
    return SQL_FIELDS.get(family, frozenset())


def from_preview(preview: CardPreview) -> forms.CardForm:
    """The form of the card a proposal would write."""
    form = forms.CardForm(
        family=preview.family, title=preview.title, scope=preview.scope or "",
        concepts="\n".join(preview.concepts),
        dependencies=[{p: getattr(d, p) or "" for p in forms.DEP_PARTS}
                      for d in preview.dependencies],
        links=[{"target": link.target, "meaning": link.meaning} for link in preview.links])
    form.content = {n: preview.content.get(n, "") for n, _ in form.fields}
    return form


@dataclass
class Posted:
    """What the reviewer sent: the review id, the summary version, apply or decline, the note,
    and by key, whether it is kept and its form as typed."""

    review_id: str
    version: str
    decline: bool
    note: str
    keep: dict[str, bool] = field(default_factory=dict)
    forms: dict[str, forms.CardForm] = field(default_factory=dict)


def parse(pairs: list[tuple[str, str]], families: dict[str, str]) -> Posted:
    """The posted review form (``families``: each proposal's family by key; an unknown key is
    left out, the use case names it if selected).

    :raises InvalidInput: a ``decision`` other than ``apply`` or ``decline`` (a crafted form)."""
    top: dict[str, str] = {}
    items: dict[int, list[tuple[str, str]]] = {}
    for name, value in pairs:
        m = _ITEM.match(name)
        if m:
            items.setdefault(int(m.group(1)), []).append((m.group(2), value))
        else:
            top[name] = value
    if top.get("decision", "apply") not in ("apply", "decline"):
        raise InvalidInput(f"a review is applied or declined, not {top['decision'][:40]!r}",
                           field="decision")
    posted = Posted(review_id=top.get("review_id", ""), version=top.get("version", ""),
                    decline=top.get("decision") == "decline", note=top.get("note", ""))
    for n in sorted(items):
        fields = dict(items[n])
        key = fields.get("key", "")
        if key not in families:
            continue
        posted.keep[key] = fields.get("keep") == "1"
        posted.forms[key] = forms.from_pairs(items[n], families[key])
    return posted


def edits(form: forms.CardForm, preview: CardPreview) -> ReviewEdits | None:
    """What the reviewer changed in ``form`` against the proposal's ``preview``: only the fields
    that differ (None when nothing does). The read-only SQL is never sent.

    :raises InvalidInput: a value out of bounds (the field named).
    """
    changed: dict[str, Any] = {}
    if form.title.strip() != preview.title.strip():
        changed["title"] = form.title.strip()
    content = {n: v for n, v in form.content.items() if n not in readonly(form.family)
               and v.strip() != preview.content.get(n, "").strip()}
    if content:
        changed["content"] = content
    if form.scope.strip() != (preview.scope or ""):
        changed["scope"] = form.scope.strip()
    concepts = form.concept_list()
    if concepts != list(preview.concepts):
        changed["concepts"] = concepts
    deps = [{p: (d.get(p) or "").strip() or None for p in forms.DEP_PARTS}
            for d in form.dependencies]
    if deps != [{p: getattr(d, p) for p in forms.DEP_PARTS} for d in preview.dependencies]:
        changed["dependencies"] = deps
    links = [{"target": link["target"].strip(), "meaning": link["meaning"].strip()}
             for link in form.links]
    if links != [{"target": link.target, "meaning": link.meaning} for link in preview.links]:
        changed["links"] = links
    return models.convert(changed, ReviewEdits) if changed else None


def request(posted: Posted, items: list[SummaryItem]) -> ReviewRequest:
    """The review request of the posted form, against the summary's ``items`` (the previews the
    edits are compared with).

    :raises InvalidInput: a value out of bounds (``item``: the proposal's key).
    """
    version = {"version": posted.version} if posted.version else {}
    if posted.decline:
        return models.convert({"review_id": posted.review_id, "decline_all": True,
                               "note": posted.note, **version}, ReviewRequest)
    selected: list[ReviewSelection] = []
    for item in items:
        if not posted.keep.get(item.key) or item.card is None:
            continue
        try:
            changed = edits(posted.forms[item.key], item.card)
        except InvalidInput as exc:
            exc.extra.setdefault("item", item.key)
            raise
        selected.append(ReviewSelection(key=item.key, edits=changed))
    return models.convert({"review_id": posted.review_id, "note": posted.note, **version,
                           "selected": msgspec.to_builtins(selected)}, ReviewRequest)
