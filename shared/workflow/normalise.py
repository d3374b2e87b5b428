"""The text normaliser of the reuse rule (DESIGN §6), pure: a text as two cards' content fields
are compared, whitespace collapsed outside what must stay as written.

A SQL text keeps its string literals, quoted identifiers and comments exactly as written; a prose
text keeps its code spans and quoted literals. Case is never folded. The rules that use it
(:func:`shared.workflow.rules.identity`) say which fields are SQL.
"""

from __future__ import annotations

import re

_WS = " \t\n\r\f\v"  # ASCII whitespace: PostgreSQL's \s collapses it too (a loose match is wider)
_IDENT = re.compile(r"[A-Za-z0-9_$]")
_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")
_TICKS = re.compile(r"`+")


def _quoted_end(text: str, i: int, quote: str, backslash: bool = False) -> int:
    """The end (exclusive) of the quoted span opening at ``i``: up to the next ``quote`` that is
    not doubled (``''``), or backslash-escaped when ``backslash``; the text's end if unclosed."""
    j = i + 1
    while j < len(text):
        c = text[j]
        if backslash and c == "\\":
            j += 2
            continue
        if c == quote:
            if j + 1 < len(text) and text[j + 1] == quote:
                j += 2
                continue
            return j + 1
        j += 1
    return len(text)


def _sql_verbatim(text: str, i: int) -> tuple[int, bool] | None:
    """The span at ``i`` a SQL text keeps as written, ``(end, is_line_comment)``: a string literal
    (``'...'``, ``E'...'`` with backslash escapes, ``$tag$...$tag$``), a quoted identifier
    (``"..."``, MySQL-style backticks) or a comment (``-- ...`` to the line's end, ``/* */``,
    nested). None when no such span opens at ``i``."""
    c, before = text[i], text[i - 1] if i else ""
    if c == "'":
        escaped = before in "eE" and (i < 2 or not _IDENT.match(text[i - 2]))
        return _quoted_end(text, i, "'", backslash=escaped), False
    if c in "\"`":
        return _quoted_end(text, i, c), False
    if text.startswith("--", i):
        end = text.find("\n", i)
        return (len(text) if end < 0 else end), True
    if text.startswith("/*", i):
        depth, j = 0, i
        while j < len(text):
            if text.startswith("/*", j):
                depth, j = depth + 1, j + 2
            elif text.startswith("*/", j):
                depth, j = depth - 1, j + 2
                if depth == 0:
                    return j, False
            else:
                j += 1
        return len(text), False
    if c == "$" and not (before and _IDENT.match(before)):
        m = _DOLLAR.match(text, i)
        if m:
            end = text.find(m.group(0), m.end())
            return (len(text) if end < 0 else end + len(m.group(0))), False
    return None


def _prose_verbatim(text: str, i: int) -> tuple[int, bool] | None:
    """The span at ``i`` a prose text keeps as written, ``(end, False)``: a code span (backticks)
    or a quoted literal (a ``'`` that opens a word, as in ``status = 'Active'``; an apostrophe
    inside a word, as in ``customer's``, opens nothing). None when no such span opens at ``i``."""
    c = text[i]
    if c == "`":
        ticks = _TICKS.match(text, i).group(0)  # type: ignore[union-attr]
        end = text.find(ticks, i + len(ticks))
        return (len(text) if end < 0 else end + len(ticks)), False
    if c == "'" and (i == 0 or not text[i - 1].isalnum()):
        return _quoted_end(text, i, "'"), False
    return None


def normalised_text(text: str, sql: bool = False) -> str:
    """``text`` as the reuse rule compares it: whitespace at the ends removed, each run of
    whitespace (space, tab, newline) outside a verbatim span collapsed to one space (to a newline
    after a SQL line comment, which a newline ends). Verbatim spans are kept exactly as written:
    in SQL (``sql``) string literals, quoted identifiers and comments; in prose, code spans and
    quoted literals. Case is never folded: ``'Active'`` and ``'active'`` differ."""
    text = text.strip(_WS)
    verbatim = _sql_verbatim if sql else _prose_verbatim
    out: list[str] = []
    i, after_line_comment = 0, False
    while i < len(text):
        if text[i] in _WS:
            j = i
            while j < len(text) and text[j] in _WS:
                j += 1
            out.append("\n" if after_line_comment else " ")
            i, after_line_comment = j, False
            continue
        span = verbatim(text, i)
        if span is None:
            j = i + 1
            while j < len(text) and text[j] not in _WS and text[j] not in "'\"`-/$":
                j += 1
            out.append(text[i:j])
            i, after_line_comment = j, False
        else:
            out.append(text[i:span[0]])
            i, after_line_comment = span
    return "".join(out)
