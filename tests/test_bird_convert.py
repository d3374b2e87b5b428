"""Checks of the committed BIRD/BIRD-CRITIC/sqlfluff cards file (shared/data/bird_cards.jsonl.gz).

The file must equal a fresh conversion of ../shared/datasets by tools/bird_cards.py (skipped only
when that folder is absent) and every card must respect the card bounds of shared/models.py.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from helpers import skip_or_fail  # noqa: E402

from shared import models  # noqa: E402
from tools import bird_cards as bird  # noqa: E402

CARDS_FILE = REPO / "shared" / "data" / "bird_cards.jsonl.gz"
DATASETS = Path(__file__).parents[1].parent / "shared" / "datasets"

FAMILY_FIELDS = {
    "domain_clarification": ({"definition"}, {"context"}),
    "sql_rule": ({"rule"}, {"rationale"}),
    "solved_question": ({"question", "sql"}, {"context"}),
    "explained_error": ({"error", "correction"}, {"rationale"}),
}
CARD_FIELDS = {"key", "family", "title", "scope", "concepts", "dependencies", "content", "links", "source"}
DATASET_NAMES = {"bird_minidev", "bird_critic", "sqlfluff_rules"}


def load_committed() -> list[dict]:
    """The committed cards, parsed line by line."""
    with gzip.open(CARDS_FILE, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def all_strings(value):
    """Every string inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from all_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from all_strings(item)


def test_committed_file_equals_fresh_conversion(tmp_path):
    if not DATASETS.is_dir():
        skip_or_fail(f"datasets folder absent: {DATASETS}")
    fresh = bird.convert(DATASETS)
    assert gzip.decompress(CARDS_FILE.read_bytes()) == bird.serialise(fresh)
    assert load_committed() == fresh
    first, second = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"
    bird.write_cards(fresh, first)
    bird.write_cards(fresh, second)
    assert first.read_bytes() == second.read_bytes()  # deterministic: no name, mtime 0


def test_file_is_utf8_json_lines_with_sorted_keys():
    raw = gzip.decompress(CARDS_FILE.read_bytes())
    text = raw.decode("utf-8")
    assert "\x00" not in text
    assert text.endswith("\n")
    for line in text.splitlines():
        assert line.strip() == line and line
        assert json.dumps(json.loads(line), sort_keys=True, ensure_ascii=False, separators=(",", ":")) == line


def test_all_families_present_with_sane_counts():
    cards = load_committed()
    counts = Counter(card["family"] for card in cards)
    assert set(counts) == set(FAMILY_FIELDS)
    assert 2000 <= len(cards) <= 2500
    assert counts["solved_question"] == 498  # 500 rows, two exact duplicate question ids
    assert 1000 <= counts["domain_clarification"] <= 1400
    assert 300 <= counts["sql_rule"] <= 500
    assert 150 <= counts["explained_error"] <= 188
    prefixes = Counter((card["family"], card["key"].split("-")[0]) for card in cards)
    assert prefixes[("sql_rule", "lint")] == 79
    assert 500 <= prefixes[("domain_clarification", "col")] <= 652
    evidence = prefixes[("domain_clarification", "ev")] + prefixes[("sql_rule", "ev")]
    assert 900 <= evidence <= 960
    datasets = Counter(card["source"]["dataset"] for card in cards)
    assert set(datasets) == DATASET_NAMES


def test_every_card_respects_the_bounds():
    for card in load_committed():
        key = card["key"]
        assert set(card) == CARD_FIELDS, key
        assert isinstance(key, str) and key and key.strip() == key, key
        assert card["family"] in FAMILY_FIELDS, key
        title = card["title"]
        assert isinstance(title, str) and title and title.strip() == title, key
        assert len(title) <= models.MAX_TITLE, key
        assert "\n" not in title, key
        assert card["scope"] is None, key

        concepts = card["concepts"]
        assert isinstance(concepts, list) and len(concepts) <= models.MAX_CONCEPTS, key
        assert len(set(concepts)) == len(concepts), key
        for concept in concepts:
            assert isinstance(concept, str) and 1 <= len(concept) <= models.MAX_CONCEPT, key
            assert concept == concept.lower() == concept.strip(), key

        required, optional = FAMILY_FIELDS[card["family"]]
        content = card["content"]
        assert required <= set(content) <= required | optional, key
        for name, value in content.items():
            assert isinstance(value, str) and value and value.strip() == value, (key, name)
            assert len(value) <= models.content_limit(name), (key, name)

        source = card["source"]
        assert set(source) == {"dataset", "record"}, key
        assert source["dataset"] in DATASET_NAMES, key
        assert isinstance(source["record"], str) and source["record"], key

        for string in all_strings(card):
            assert "\x00" not in string, key
            string.encode("utf-8")  # no lone surrogates


def test_dependencies_have_no_gaps():
    for card in load_committed():
        deps = card["dependencies"]
        key = card["key"]
        assert isinstance(deps, list) and len(deps) <= models.MAX_DEPENDENCIES, key
        seen = set()
        for entry in deps:
            assert set(entry) == {"database", "schema", "table", "column"}, key
            assert isinstance(entry["database"], str) and entry["database"], key
            assert entry["schema"] == "public", key
            if entry["column"] is not None:
                assert entry["table"] is not None, key
            for part in ("table", "column"):
                assert entry[part] is None or (isinstance(entry[part], str) and entry[part]), key
            marker = (entry["database"], entry["schema"], entry["table"], entry["column"])
            assert marker not in seen, key
            seen.add(marker)
        if card["source"]["dataset"] == "sqlfluff_rules":
            assert deps == [], key
        if card["source"]["dataset"] == "bird_minidev":
            assert deps, key
            assert len({entry["database"] for entry in deps}) == 1, key


def test_keys_unique_and_links_resolve():
    cards = load_committed()
    keys = [card["key"] for card in cards]
    assert len(keys) == len(set(keys))
    known = set(keys)
    linked = 0
    for card in cards:
        links = card["links"]
        assert isinstance(links, list) and len(links) <= models.MAX_LINKS, card["key"]
        targets = [link["target"] for link in links]
        assert len(targets) == len(set(targets)), card["key"]
        for link in links:
            assert set(link) == {"target", "meaning"}, card["key"]
            assert link["target"] in known, (card["key"], link["target"])
            assert link["target"] != card["key"]
            assert isinstance(link["meaning"], str) and link["meaning"].strip() == link["meaning"] != ""
            linked += 1
    assert linked >= 900


def test_solved_question_links_match_target_family():
    cards = {card["key"]: card for card in load_committed()}
    expected = {"sql_rule": "uses rule", "domain_clarification": "uses clarification"}
    for card in cards.values():
        if card["family"] != "solved_question":
            continue
        for link in card["links"]:
            assert link["meaning"] == expected[cards[link["target"]]["family"]]


def test_sql_guidance_heuristic_examples():
    assert bird.is_sql_guidance("highest potential refers to MAX(potential)")
    assert bird.is_sql_guidance("on 2015/5/1 refers to date LIKE '2015-05-01%'")
    assert bird.is_sql_guidance("Excellence rate = NumGE1500 / NumTstTakr")
    assert bird.is_sql_guidance("superheroes without full name refers to full_name IS NULL")
    assert not bird.is_sql_guidance("Male refers to gender = 'M'")
    assert not bird.is_sql_guidance("coordinate position/location refers to lat, lng")
    assert not bird.is_sql_guidance("infinite power refers to power = '*'")


def test_title_bound_cuts_on_word_boundary():
    long = "word " * 100
    title = bird.make_title(long)
    assert len(title) <= models.MAX_TITLE and title.endswith("…") and not title.endswith(" …")
    assert bird.make_title("  short   title ") == "short title"


def test_evidence_is_split_outside_parentheses_only():
    from tools.bird_cards import split_clauses

    formula = "calculation = MULTIPLY(DIVIDE(SUM(alignment = 'Bad); count(id)), 100)"
    assert split_clauses(f"{formula}; bad refers to alignment = 'Bad'") == [
        formula, " bad refers to alignment = 'Bad'"]
    assert split_clauses("a; b (c; d") == ["a", " b (c", " d"]  # unbalanced: plain split


def test_the_runtime_does_not_import_the_converter():
    """The converter is a dataset tool: importing every runtime module (and building the CLI's
    parser) loads nothing of ``tools``; only the ``convert-bird`` handler imports it."""
    code = """
import pkgutil, sys
import explorer_plugin, shared, writer
for package in (shared, writer, explorer_plugin):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not info.name.endswith("__main__"):
            __import__(info.name)
from writer.cli import build_parser
build_parser()
print(sorted(m for m in sys.modules if m == "tools" or m.startswith("tools.")))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]", out
