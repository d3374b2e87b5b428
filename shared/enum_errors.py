"""Enum errors that name the allowed values.

msgspec (and Litestar, which validates with it) refuse a value outside a ``Literal`` with
``Invalid enum value 'sql_rules'`` and a path (``$.family[0]``, or Litestar's key ``family[0]``)
but not with the values they would take. :func:`with_allowed` finds the ``Literal`` at that path
in the type that was decoded and adds its values, so every enum error of the API, the explorer,
the CLI (which prints the API's problem) and MCP says what to write instead.
"""

from __future__ import annotations

import enum
import re
from typing import Any

import msgspec.inspect as mi

#: msgspec's message for a value outside a Literal or Enum, with its optional path.
ENUM_ERROR = re.compile(r"^Invalid enum value (?P<value>.+?)(?: - at `(?P<path>[^`]*)`)?$")
#: One step of a path: ``.name``, ``[3]`` or ``["key"]`` (a leading ``$`` or name is a ``.name``).
_STEP = re.compile(r"\.?([A-Za-z_]\w*)|\[(\d+)\]|\[\"((?:[^\"\\]|\\.)*)\"\]")


def _steps(path: str) -> list[str | int] | None:
    """``$.filters.family[0]`` or ``family[0]`` as ``["filters", "family", 0]``; None when the
    path cannot be read."""
    rest, steps = path.removeprefix("$"), []
    while rest:
        match = _STEP.match(rest)
        if match is None:
            return None
        name, index, key = match.groups()
        steps.append(int(index) if index is not None else name if name is not None else key)
        rest = rest[match.end():]
    return steps


def _unwrap(info: mi.Type) -> list[mi.Type]:
    """The types a value of ``info`` may take, without Annotated metadata or unions."""
    if isinstance(info, mi.Metadata):
        return _unwrap(info.type)
    if isinstance(info, mi.UnionType):
        return [t for member in info.types for t in _unwrap(member)]
    return [info]


def _step(info: mi.Type, step: str | int) -> mi.Type | None:
    """The type one ``step`` down from ``info`` (a field, an item, a value); None if none."""
    if isinstance(info, mi.StructType) and isinstance(step, str):
        return next((f.type for f in info.fields if f.encode_name == step), None)
    if isinstance(info, mi.DictType):
        return info.value_type
    if isinstance(info, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        return info.item_type
    if isinstance(info, mi.TupleType) and isinstance(step, int) and step < len(info.item_types):
        return info.item_types[step]
    return None


def _values(info: mi.Type) -> tuple[Any, ...] | None:
    """The allowed values of a Literal or Enum (of a collection of them), else None."""
    for member in _unwrap(info):
        if isinstance(member, mi.LiteralType):
            return tuple(member.values)
        if isinstance(member, mi.EnumType):
            return tuple(m.value for m in member.cls if isinstance(m, enum.Enum))
        if isinstance(member, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
            return _values(member.item_type)
    return None


def allowed_values(type_: Any, path: str) -> tuple[Any, ...] | None:
    """The values the ``Literal`` (or Enum) at ``path`` inside ``type_`` allows (sorted):
    ``allowed_values(SearchRequest, "$.family[0]")`` gives the four families. None when the path
    does not lead to one (a path of another shape, a type that is not a msgspec-readable one)."""
    steps = _steps(path)
    try:
        infos = _unwrap(mi.type_info(type_))
    except (TypeError, ValueError):
        return None
    for step in steps or ():
        infos = [t for info in infos if (down := _step(info, step)) is not None for t in _unwrap(down)]
    return next((found for info in infos if (found := _values(info)) is not None), None) \
        if steps is not None else None


def with_allowed(message: str, type_: Any, path: str | None = None) -> str:
    """``message`` with ``; allowed: a, b, c`` added when it is an enum error and the allowed
    values can be found at its path (``path`` when given, else the one the message names);
    any other message unchanged."""
    match = ENUM_ERROR.match(message)
    where = path if path is not None else match and match["path"]
    values = allowed_values(type_, where) if match and where is not None else None
    if not values:
        return message
    return f"{message}; allowed: {', '.join(str(v) for v in values)}"
