"""The text normaliser of the reuse rule (``shared.workflow.normalise``): whitespace at the ends
and runs of whitespace collapsed, outside what SQL (literals, quoted identifiers, comments) and
prose (quoted literals, code spans) keep as written; case never folded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.workflow.normalise import normalised_text

#: texts made of the characters that open or close a verbatim span, and whitespace
TRICKY = st.text(alphabet=list("aE$`'\"-/*_1 \t\n\r"), max_size=40)


@pytest.mark.parametrize("text, same_as", [
    ("  Exclude   cancelled\n\torders. ", "Exclude cancelled orders."),  # ends and runs
    ("Use status = 'Active  '  only", "Use status = 'Active  ' only"),  # a quoted literal
    ("the customer's   orders", "the customer's orders"),  # an apostrophe opens nothing
    ("it's  'a  b'  c", "it's 'a  b' c"),  # ... and a quote at a word's start does
    ("Use `a  b`   here", "Use `a  b` here"),  # a code span
    ("``a  `b`  c``  d", "``a  `b`  c`` d"),  # a code span of two backticks holds one
    ("x = 'open  quote", "x = 'open  quote"),  # an unclosed literal runs to the end
    ("`open  span", "`open  span"),  # so does an unclosed code span
    ("don't  -- x\n  y", "don't -- x y"),  # prose has no comments
])
def test_prose_is_compared_up_to_whitespace_runs_outside_literals_and_code(text, same_as):
    assert normalised_text(text) == same_as


@pytest.mark.parametrize("sql, same_as", [
    ("SELECT  a,\n  b\tFROM t ", "SELECT a, b FROM t"),
    ("SELECT 1 WHERE s = 'Ac  tive'", "SELECT 1 WHERE s = 'Ac  tive'"),
    ("SELECT \"Order  Id\"  FROM t", "SELECT \"Order  Id\" FROM t"),
    ("SELECT \"a\"\"b  c\"  d", "SELECT \"a\"\"b  c\" d"),
    ("SELECT `a  b`  c", "SELECT `a  b` c"),
    ("SELECT E'it\\'s  x'  AS y", "SELECT E'it\\'s  x' AS y"),
    ("SELECT $q$ a  b $q$  AS y", "SELECT $q$ a  b $q$ AS y"),
    ("SELECT $$ a  b $$  c", "SELECT $$ a  b $$ c"),
    ("SELECT a$b$  c$b$", "SELECT a$b$ c$b$"),  # a $ inside a word opens no dollar quote
    ("SELECT 1 -- note  here\n   FROM t", "SELECT 1 -- note  here\nFROM t"),
    ("SELECT 1 -- c\n\n  -- d\n  x", "SELECT 1 -- c\n-- d\nx"),
    ("SELECT 1 --  c", "SELECT 1 --  c"),
    ("SELECT 1 /* a  b */  FROM t", "SELECT 1 /* a  b */ FROM t"),
    ("SELECT /* a /* b  */ c  */  1", "SELECT /* a /* b  */ c  */ 1"),  # nested comments
    ("SELECT 'it''s  x'  AS y", "SELECT 'it''s  x' AS y"),
    ("SELECT 'open  literal", "SELECT 'open  literal"),
    ("a - b  -  c / d", "a - b - c / d"),  # a lone - or / opens nothing
])
def test_sql_is_compared_as_written_but_for_whitespace_between_tokens(sql, same_as):
    assert normalised_text(sql, sql=True) == same_as


def test_a_backslash_escapes_only_in_an_e_string():
    assert normalised_text("SELECT e'a\\'  b'  x", sql=True) == "SELECT e'a\\'  b' x"
    # `type'...'`: the E ends a word, so the literal is a plain one, which a backslash ends
    assert normalised_text("SELECT type'a\\'  b'  x", sql=True) == "SELECT type'a\\' b'  x"


def test_whitespace_is_ascii_whitespace_only():
    assert normalised_text("a\r\n\f\vb") == "a b"
    assert normalised_text("  \n\t ") == ""
    assert normalised_text("a\u00a0 \u00a0b") == "a\u00a0 \u00a0b"  # no-break spaces stay


def test_case_is_never_folded_in_sql_or_prose():
    assert normalised_text("WHERE s = 'Active'", sql=True) != normalised_text(
        "WHERE s = 'active'", sql=True)
    assert normalised_text("select 1", sql=True) != normalised_text("SELECT 1", sql=True)
    assert normalised_text("A customer") != normalised_text("a customer")


def test_a_line_comment_keeps_the_newline_that_ends_it():
    assert normalised_text("SELECT 1 -- c\nFROM t", sql=True) != normalised_text(
        "SELECT 1 -- c FROM t", sql=True)


@given(TRICKY, st.booleans())
def test_only_whitespace_changes_and_normalising_twice_changes_nothing(text: str, sql: bool):
    once = normalised_text(text, sql)
    assert "".join(once.split()) == "".join(text.split())
    assert once == once.strip(" \t\n\r\f\v")
    assert normalised_text(once, sql) == once
