"""A card's form: what a person typed, read into a :class:`~shared.models.CardWrite`, and an
error of the archive put next to the field it concerns.

Field names: ``family``, ``title``, ``scope``, ``concepts`` (one per line), ``content.<name>``,
dependency rows ``dep-<i>-database|schema|table|column``, link rows ``link-<i>-target|meaning``,
``revision`` (the one edited). Blank rows are ignored; rows keep their numbers in errors.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from shared import models
from shared.errors import ArchiveError
from shared.models import Card, CardWrite
from shared.validation_words import plain_message

DEP_PARTS = ("database", "schema", "table", "column")
#: blank rows offered after the filled ones (more: save, and two more appear)
BLANK_ROWS = 2
_ROW = re.compile(r"^(dep|link)-(\d{1,3})-(\w+)$")
_MSGSPEC_PATH = re.compile(r"at `\$\.([\w.]+)(?:\[(\d+)\])?")


@dataclass
class CardForm:
    """The values of a card's form, as typed (or as the card holds them), with the errors by
    field (``title``, ``content.<name>``, ``dependencies[<row>]``, ``links[<row>]``, ``form``)."""

    family: str
    title: str = ""
    scope: str = ""
    concepts: str = ""
    content: dict[str, str] = field(default_factory=dict)
    dependencies: list[dict[str, str]] = field(default_factory=list)
    links: list[dict[str, str]] = field(default_factory=list)
    revision: int | None = None
    errors: dict[str, str] = field(default_factory=dict)
    #: by field (:meth:`values`), a digest of its value at the revision the form was opened on
    #: (hidden ``base-<field>`` inputs): what the person changed, for a save that went stale
    base: dict[str, str] = field(default_factory=dict)

    @property
    def fields(self) -> list[tuple[str, bool]]:
        """The family's content fields: ``(name, required)``."""
        required, optional = models.FAMILY_FIELDS[self.family]
        return [(n, True) for n in required] + [(n, False) for n in optional]

    def rows(self, kind: str) -> list[dict[str, str]]:
        """The filled rows of ``dependencies`` or ``links`` and :data:`BLANK_ROWS` blank ones."""
        filled = self.dependencies if kind == "dependencies" else self.links
        blank = {p: "" for p in (DEP_PARTS if kind == "dependencies" else ("target", "meaning"))}
        return [*filled, *({**blank} for _ in range(BLANK_ROWS))]

    def concept_list(self) -> list[str]:
        """The concepts typed, one per line or comma-separated, trimmed, blanks left out."""
        return [c.strip() for c in re.split(r"[\n,]", self.concepts) if c.strip()]

    def dependency_paths(self) -> list[str]:
        """Each filled dependency row as ``database.schema.table.column`` (blank parts left
        out)."""
        return [".".join(v.strip() for v in (d.get(p) or "" for p in DEP_PARTS) if v.strip())
                for d in self.dependencies]

    def values(self) -> dict[str, str]:
        """Each field as one comparable text: ``title``, ``scope``, ``content.<name>``,
        ``concepts``, ``dependencies``, ``links`` (rows one per line, blanks left out)."""
        out = {"title": self.title.strip(), "scope": self.scope.strip()}
        out |= {f"content.{n}": self.content.get(n, "").strip() for n, _ in self.fields}
        out["concepts"] = "\n".join(self.concept_list())
        out["dependencies"] = "\n".join(self.dependency_paths())
        out["links"] = "\n".join(f"{link['target'].strip()} {link['meaning'].strip()}"
                                 for link in self.links)
        return out

    def own_digests(self) -> dict[str, str]:
        """:meth:`values` digested (SHA-256, 16 hex digits each): the form's fields as they
        are now."""
        return {k: hashlib.sha256(v.encode()).hexdigest()[:16] for k, v in self.values().items()}

    def digests(self) -> dict[str, str]:
        """The ``base-<field>`` inputs of an edit form: the posted :attr:`base` when the form
        has one, else :meth:`own_digests` (a form read from the stored card)."""
        return self.base or self.own_digests()

    def changed_since_base(self) -> set[str]:
        """The fields whose value differs from :attr:`base` (all of them without a base)."""
        return {k for k, d in self.own_digests().items() if self.base.get(k) != d}

    def pairs(self) -> list[tuple[str, str]]:
        """The form as (name, value) pairs, for hidden inputs that carry it to another POST."""
        out = [("family", self.family), ("title", self.title), ("scope", self.scope),
               ("concepts", self.concepts)]
        out += [(f"content.{k}", v) for k, v in self.content.items()]
        for i, d in enumerate(self.dependencies):
            out += [(f"dep-{i}-{p}", d.get(p, "")) for p in DEP_PARTS]
        for i, link in enumerate(self.links):
            out += [(f"link-{i}-target", link["target"]), (f"link-{i}-meaning", link["meaning"])]
        return out + [(f"base-{k}", v) for k, v in self.digests().items()]

    def body(self) -> CardWrite:
        """The card body this form asks for (blank optional fields left out).

        :raises InvalidInput: a value out of bounds (the field named)."""
        content = {k: v for k, v in self.content.items() if v.strip()}
        deps = [{p: (d.get(p) or "").strip() or None for p in DEP_PARTS}
                for d in self.dependencies]
        data: dict[str, Any] = {
            "family": self.family, "title": self.title, "scope": self.scope.strip() or None,
            "content": content,
            "concepts": self.concept_list(),
            "dependencies": deps,
            "links": [{"target": link["target"].strip(), "meaning": link["meaning"]}
                      for link in self.links]}
        if self.revision is not None:
            data["revision"] = self.revision
        return models.convert(data, CardWrite)

    def put_error(self, exc: ArchiveError) -> None:
        """Show ``exc`` next to the field it concerns (the form's top when none, or when the
        field is not one a person sees, such as the hidden ``revision``), in a person's words
        (:func:`plain_message`)."""
        name = str(exc.extra.get("field") or "")
        if not name:
            m = _MSGSPEC_PATH.search(exc.message)
            if m:
                name = m.group(1) + (f"[{m.group(2)}]" if m.group(2) else "")
        m = re.match(r"^(dependencies|links|concepts)\[(\d+)\]", name)
        if m:
            name = m.group(1) if m.group(1) == "concepts" else f"{m.group(1)}[{m.group(2)}]"
        elif name.startswith("content."):
            name = ".".join(name.split(".")[:2])
        known = {"family", "title", "scope", "concepts"} | {
            f"content.{n}" for n, _ in self.fields} | {
            f"dependencies[{i}]" for i in range(len(self.dependencies))} | {
            f"links[{i}]" for i in range(len(self.links))}
        self.errors[name if name in known else "form"] = plain_message(exc.message)


def merged(stored: CardForm, mine: CardForm) -> tuple[CardForm, dict[str, str]]:
    """A three-way merge of a save that went stale: the stored card with the fields the person
    changed since the revision they opened (``mine.base``) put on top. Returns the merged form
    (at the stored revision, with the stored card's digests as its base) and, per field that
    anyone changed, who: ``mine``, ``theirs`` or ``both`` (the person's value is applied)."""
    changed_by_me = mine.changed_since_base()
    theirs_now = stored.digests()
    changed_by_them = {k for k, d in theirs_now.items() if mine.base and mine.base.get(k) != d}
    out = CardForm(**{**stored.__dict__, "content": dict(stored.content), "errors": {},
                      "base": theirs_now})
    for name in changed_by_me:  # the names of values(): a content field, or an attribute
        if name.startswith("content."):
            field_name = name.removeprefix("content.")
            out.content[field_name] = mine.content.get(field_name, "")
        else:
            setattr(out, name, getattr(mine, name))
    who = {k: "both" if k in changed_by_me and k in changed_by_them
           else "mine" if k in changed_by_me else "theirs"
           for k in changed_by_me | changed_by_them}
    return out, who


def from_card(card: Card) -> CardForm:
    """The form of a stored card."""
    return CardForm(
        family=card.family, title=card.title, scope=card.scope or "",
        concepts="\n".join(card.concepts), content=dict(card.content),
        dependencies=[{p: getattr(d, p) or "" for p in DEP_PARTS} for d in card.dependencies],
        links=[{"target": link.target, "meaning": link.meaning} for link in card.links],
        revision=card.revision)


def from_pairs(pairs: list[tuple[str, str]], family: str | None = None) -> CardForm:
    """The form a person sent (``family``: the card's, for an edit; else the form's)."""
    values: dict[str, str] = {}
    rows: dict[str, dict[int, dict[str, str]]] = {"dep": {}, "link": {}}
    for name, value in pairs:
        value = value if isinstance(value, str) else ""
        m = _ROW.match(name)
        if m:
            rows[m.group(1)].setdefault(int(m.group(2)), {})[m.group(3)] = value
        else:
            values[name] = value
    fam = family or values.get("family") or ""
    if fam not in models.FAMILIES:
        fam = models.FAMILIES[0]
    form = CardForm(family=fam, title=values.get("title", ""), scope=values.get("scope", ""),
                    concepts=values.get("concepts", ""))
    for name, _ in form.fields:
        form.content[name] = values.get(f"content.{name}", "")
    for i in sorted(rows["dep"]):
        row = {p: rows["dep"][i].get(p, "") for p in DEP_PARTS}
        if any(v.strip() for v in row.values()):
            form.dependencies.append(row)
    for i in sorted(rows["link"]):
        row = {"target": rows["link"][i].get("target", ""),
               "meaning": rows["link"][i].get("meaning", "")}
        if row["target"].strip() or row["meaning"].strip():
            form.links.append(row)
    revision = values.get("revision", "").strip()
    form.revision = int(revision) if revision.isdigit() and len(revision) < 10 else None
    form.base = {k.removeprefix("base-"): v[:16] for k, v in values.items()
                 if k.startswith("base-") and len(k) <= 80}
    return form


def differences(current: CardForm, mine: CardForm, titles: dict[str, str] | None = None,
                who: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Field by field, the stored card next to the person's version: ``{field, current, mine,
    differs, who}`` (texts as a person reads them; a link target by its title when ``titles``
    has it; ``who``: :func:`merged`'s, by field)."""
    who = who or {}
    titles = titles or {}

    def links(f: CardForm) -> str:
        named = [(f"“{titles[t]}”" if (t := link["target"]) in titles else t, link["meaning"])
                 for link in f.links]
        return "\n".join(f"{t} ({m})" if m else t for t, m in named)

    rows = [("title", current.title, mine.title), ("scope", current.scope, mine.scope)]
    rows += [(n, current.content.get(n, ""), mine.content.get(n, "")) for n, _ in current.fields]
    rows += [("concepts", "\n".join(current.concept_list()), "\n".join(mine.concept_list())),
             ("dependencies", "\n".join(current.dependency_paths()),
              "\n".join(mine.dependency_paths())),
             ("links", links(current), links(mine))]
    content = {n for n, _ in current.fields}
    return [{"field": n, "current": a, "mine": b, "differs": a.strip() != b.strip(),
             "who": who.get(f"content.{n}" if n in content else n)} for n, a, b in rows]
