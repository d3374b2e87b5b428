"""Enum errors name the allowed values (issue 26): the Literal at the error's path is found in
the type that was decoded, for msgspec's ``$.a.b[0]`` paths and Litestar's ``a.b[0]`` keys."""

from __future__ import annotations

from typing import Annotated

import pytest

from shared import models
from shared.enum_errors import allowed_values, with_allowed
from shared.errors import InvalidInput
from writer.mcp_server import SearchArguments, mcp_error

FAMILIES = "domain_clarification, explained_error, solved_question, sql_rule"


@pytest.mark.parametrize("body,path,values", [
    ({"query": "x", "family": ["sql_rules"]}, "$.family[0]", FAMILIES),
    ({"query": "x", "mode": "nope"}, "$.mode", "rules, search, solved"),
])
def test_a_recall_body_names_the_allowed_values(body, path, values):
    with pytest.raises(InvalidInput) as refused:
        models.convert(body, models.SearchRequest)
    value = body["family"][0] if "family" in body else body["mode"]
    assert refused.value.message == f"Invalid enum value {value!r} - at `{path}`; allowed: {values}"


def test_a_card_write_and_an_mcp_call_name_the_families():
    body = b'{"family": "sql_rules", "title": "t", "content": {}}'
    with pytest.raises(InvalidInput, match=f"allowed: {FAMILIES}$"):
        models.decode_json(body, models.CardWrite)
    with pytest.raises(InvalidInput) as refused:
        models.convert({"query": "x", "family": ["rule"]}, SearchArguments)
    assert mcp_error(refused.value).message.endswith(f"'rule' - at `$.family[0]`; allowed: {FAMILIES}")


def test_litestar_keys_and_parameter_types_are_followed():
    query_param = Annotated[list[models.Origin] | None, "a FromQuery marker"]
    assert allowed_values(query_param, "") == ("import", "manual", "workflow")
    assert allowed_values(models.SearchRequest, "family[0]") == tuple(FAMILIES.split(", "))
    assert with_allowed("Invalid enum value 'size'", models.Sort, "") == (
        "Invalid enum value 'size'; allowed: created, family, title, updated")


def test_other_messages_and_unknown_paths_are_left_alone():
    assert with_allowed("Expected `int`, got `str` - at `$.top`", models.SearchRequest) == \
        "Expected `int`, got `str` - at `$.top`"
    for path in ("$.query", "$.nothing[0]", "$.family[", "$.filters.scope"):
        assert allowed_values(models.SearchRequest, path) is None, path
        message = f"Invalid enum value 'x' - at `{path}`"
        assert with_allowed(message, models.SearchRequest) == message
