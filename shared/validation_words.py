"""Validation messages in a person's words, for pages (the administration's forms, the
explorer's error pages): msgspec's ``Expected `str` of length <= 200 - at `$.title``` becomes
``The title is longer than 200 characters.``; row references count from 1 as a form shows them.
The JSON API keeps the decoder's message and its ``field``/``errors`` members for programs.
"""

from __future__ import annotations

import re

#: a msgspec validation message: what was wrong, then `` - at `$.<path>` `` (the field)
_MSGSPEC_MESSAGE = re.compile(r"^(?P<what>.*?) - at `\$(?P<path>[^`]*)`(?P<rest>.*)$", re.S)
_ROW_PATH = re.compile(r"^\.(?P<list>dependencies|links|concepts)\[(?P<i>\d+)\](?:\.(?P<part>\w+))?$")

#: msgspec's validation messages (``what``, before `` - at `$.…` ``) in a person's words
_PLAIN = [
    (r"Expected `str` of length >= 1", "{label} is blank: fill it in{row}"),
    (r"Expected `str` of length <= (?P<n>\d+)", "{label} is longer than {n} characters"),
    (r"Expected `array` of length <= (?P<n>\d+)", "at most {n} {path} are allowed"),
    (r"Object missing required field `(?P<name>\w+)`", "{field} is required"),
    (r"Invalid enum value (?P<value>.+)", "{label} {value} is not one of the allowed values"),
    (r"Expected `int( \| null)?`, got `\w+`", "{label} must be a whole number"),
    (r"Expected `str`, got `null`", "{label} is required"),
]


#: query parameters whose names are not words
_NAMES = {"q": "search text", "per_page": "page size", "top": "number of results"}

#: a field named the way the archive names it in its own messages (``links[0]``,
#: ``links[0].target``, ``concepts[2]``, ``content.definition``)
_ROW_REFERENCE = re.compile(r"\b(?:(dependencies|links|concepts)\[(\d+)\](?:\.(\w+))?"
                            r"|content\.(\w+))")


def _row_words(m: re.Match) -> str:
    if m.group(4):
        return f"the {m.group(4)}"
    return _label(f".{m.group(1)}[{m.group(2)}]" + (f".{m.group(3)}" if m.group(3) else ""))


def _label(path: str) -> str:
    """A person's name for the field at msgspec ``path`` (``.title``, ``.links[0].target``,
    ``.content.rule``, ...): rows are counted from 1, as the form shows them."""
    m = _ROW_PATH.match(path)
    if m:
        row = int(m.group("i")) + 1
        if m.group("list") == "concepts":
            return f"concept {row}"
        what = {"dependencies": "dependency", "links": "link"}[m.group("list")]
        return f"the {m.group('part')} of {what} row {row}" if m.group("part") \
            else f"{what} row {row}"
    if path.startswith(".content."):
        return f"the {path.removeprefix('.content.')}"
    if path.startswith(".filters."):
        return f"the {path.removeprefix('.filters.')} filter".replace("_", " ")
    name = path.lstrip(".")
    return f"the {_NAMES.get(name, name) or 'card'}".replace("_", " ")


def plain_message(message: str) -> str:
    """``message`` in a person's words when it is a msgspec validation message (``Expected
    `str` of length <= 200 - at `$.title``` → ``The title is longer than 200 characters.``);
    any other message (the archive's own, already worded for people) with its row references
    counted from 1 as the form shows them (``links[0] names …`` → ``link row 1 names …``)."""
    m = _MSGSPEC_MESSAGE.match(message)
    if not m:
        worded = _ROW_REFERENCE.sub(_row_words, message)
        return worded[:1].upper() + worded[1:] if worded != message else message
    label, what = _label(m.group("path")), m.group("what")
    rest = m.group("rest").strip().lstrip(";").strip()  # e.g. "allowed: a, b" (with_allowed)
    for pattern, template in _PLAIN:
        if (n := re.fullmatch(pattern, what)):
            words = {k: f"{int(v):,}" if v.isdigit() else v for k, v in n.groupdict().items()}
            text = template.format(label=label, path=m.group("path").lstrip("."),
                                   row=", or clear the whole row" if " row " in label else "",
                                   field=_label(f"{m.group('path')}.{words.get('name')}"), **words)
            break
    else:
        text = f"{label}: {what[:1].lower()}{what[1:]}"
    text = text[:1].upper() + text[1:] + "."
    return f"{text} {rest[:1].upper()}{rest[1:]}." if rest else text
