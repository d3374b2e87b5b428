"""The pages' error words (``shared.validation_words.plain_message``, used by the
administration's forms and the explorer's error pages): every
msgspec validation message a card form can raise reads as a sentence about the field a person
sees, rows counted from 1; the archive's own messages pass unchanged."""

from __future__ import annotations

import pytest

from shared import models
from shared.errors import InvalidInput
from shared.validation_words import plain_message


def _message(data: dict) -> str:
    with pytest.raises(InvalidInput) as caught:
        models.convert(data, models.CardWrite)
    return caught.value.message


RULE = {"family": "sql_rule", "title": "T", "content": {"rule": "R."}}


@pytest.mark.parametrize("data,words", [
    ({**RULE, "title": "t" * 201}, "The title is longer than 200 characters."),
    ({**RULE, "concepts": ["c" * 101]}, "Concept 1 is longer than 100 characters."),
    ({**RULE, "concepts": [f"c{i}" for i in range(51)]}, "At most 50 concepts are allowed."),
    ({**RULE, "links": [{"target": ""}]},
     "The target of link row 1 is blank: fill it in, or clear the whole row."),
    ({**RULE, "dependencies": [{"database": "d"}] * 51}, "At most 50 dependencies are allowed."),
    ({**RULE, "family": "nope"}, "The family 'nope' is not one of the allowed values. Allowed: "),
    ({**RULE, "revision": "x"}, "The revision must be a whole number."),
])
def test_a_bound_reads_as_a_sentence_about_its_field(data, words):
    raw = _message(data)
    assert "- at `$" in raw  # what the decoder says
    assert plain_message(raw).startswith(words), (raw, plain_message(raw))
    assert "`$" not in plain_message(raw)


def test_a_required_field_and_an_unknown_shape_name_the_field():
    assert plain_message("Object missing required field `rule` - at `$.content`") == \
        "The rule is required."
    assert plain_message("Expected `bool`, got `str` - at `$.scope`") == \
        "The scope: expected `bool`, got `str`."


def test_the_archives_own_words_pass_unchanged():
    assert plain_message("a table needs its schema") == "a table needs its schema"


def test_the_archives_field_names_read_as_words():
    assert plain_message("content.definition is required for domain_clarification") == \
        "The definition is required for domain_clarification"
    assert plain_message("links[0].target 'mem-x' is not a card id (mem-<uuid>)") == \
        "The target of link row 1 'mem-x' is not a card id (mem-<uuid>)"
    assert plain_message("dependencies[1]: a table needs its schema") == \
        "Dependency row 2: a table needs its schema"
    assert plain_message("Expected `str`, got `null` - at `$.dependencies[0].database`") == \
        "The database of dependency row 1 is required."
    assert plain_message("Expected `str` of length <= 200 - at `$.q`") == \
        "The search text is longer than 200 characters."
