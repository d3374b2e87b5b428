"""Rule-retrieval sets for issue 27, built from public data in ``../shared/datasets`` (nothing here
is hand-written): per set, ``sql_rule`` cards (title + rule, per database as an analyst would store
them) and queries whose needed rule is known, each labelled TUNE or REPORT. No embedding, no
database: ``bench/rules_sets.py`` runs them through the recall path.

- ``evidence`` (near-duplicate distractors): every distinct ``;``-clause of BIRD mini-dev's
  ``evidence`` (``mini_dev_postgresql.json``) becomes a rule of its database; the query is the
  question (never the evidence), wanted = each clause of its evidence. A pair is ``neardup`` when
  its rule has a sibling in the same database with word Jaccard >= :data:`NEAR_DUP` (BIRD's
  databases define one abbreviation or formula in near-identical words many times).
- ``procedures``: one procedural rule per distinct gold SQL of BIRD mini-dev, rendered in words
  from the SQL ("To get X per Y: join A and B on …; keep rows where …; group by …"), table aliases
  resolved; the query is the question. Mechanical, so the rule's words are the schema's, not
  the question's.
- ``critic`` (procedural, small): BIRD-CRITIC (``pg_0110_data.jsonl``, ``mysql_so_data.jsonl``)
  rows whose fixed SQL is a SELECT / WITH: the fix rendered as a procedure (as ``procedures``) is
  the rule of its database; the query is the narrative's prose before its first code.
- ``lint`` (workspace-wide): sqlfluff's rules, rule = summary + best-practice prose without its
  code; the query is SQL that breaks the rule (which rule does this break): the anti-pattern's
  code of the rule's documentation, and up to :data:`CASES_PER_RULE` of sqlfluff's own test cases
  of the rule (``bench/fixtures/sqlfluff_rule_cases.jsonl``, ``bench/sqlfluff_cases.py``; tagged
  ``case``), first in file order.

Splits are deterministic: BIRD sets by database (sorted ``db_id``s, odd index REPORT, the split
of ``bench/recall_quality.py``), ``lint`` by rule code (sorted codes, odd index REPORT). Spider-Syn
dev and defog's sql-eval are not read here (reserved for an independent check).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from shared.models import Dependency, ImportCard, Source
from tools.bird_cards import (SchemaMatcher, bound, collapse, load_schema, make_title, match_schema,
                              normalise_clause, rst_to_markdown, sha12, split_clauses)

DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"
MINIDEV = DATASETS / "bird_minidev" / "mini_dev_postgresql.json"
TABLES = DATASETS / "bird_minidev" / "dev_tables_cleaned.json"
SQLFLUFF = DATASETS / "sqlfluff_rules" / "sqlfluff_rules.jsonl"
CRITIC = [DATASETS / "bird_critic" / "pg_0110_data.jsonl",
          DATASETS / "bird_critic" / "mysql_so_data.jsonl"]
SQLFLUFF_CASES = Path(__file__).resolve().parent / "fixtures" / "sqlfluff_rule_cases.jsonl"
#: word Jaccard from which two rules of one database count as near-duplicates
NEAR_DUP = 0.5
#: sqlfluff test cases asked per rule at most (so that the layout rules' many cases do not make
#: up most of a half)
CASES_PER_RULE = 12


@dataclass
class Query:
    """One query: its text, the wanted rule's key, the database filter (None: workspace-wide),
    the half and extra labels (``neardup``)."""

    text: str
    wanted: str
    database: str | None
    half: str
    tags: tuple[str, ...] = ()


@dataclass
class RuleSet:
    """One set: its name, its ``sql_rule`` cards (``source.record`` = key) and its queries."""

    name: str
    cards: list[ImportCard]
    queries: list[Query] = field(default_factory=list)


def half_of(name: str, names: list[str]) -> str:
    """``REPORT`` for odd positions of ``name`` in sorted ``names``, else ``TUNE``."""
    return "REPORT" if sorted(set(names)).index(name) % 2 else "TUNE"


def rule_card(key: str, title: str, rule: str, deps: list[dict] | None = None) -> ImportCard:
    """A ``sql_rule`` card whose ``source.record`` is ``key`` (how the runner finds it again)."""
    dependencies = [Dependency(d["database"], d["schema"], d["table"], d["column"])
                    for d in deps or []]
    concepts = sorted({d.database for d in dependencies})
    return ImportCard(key=key, family="sql_rule", title=make_title(title),
                      content={"rule": rule[:4000]}, concepts=concepts,
                      dependencies=dependencies, source=Source(dataset="bench", record=key))


def words(text: str) -> set[str]:
    """The lower-cased alphanumeric words of ``text``."""
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def jaccard(a: set[str], b: set[str]) -> float:
    """|a ∩ b| / |a ∪ b|, 0.0 for two empty sets."""
    return len(a & b) / len(a | b) if a | b else 0.0


_TERM = re.compile(r"^(.{2,80}?)\s+(?:refers? to|means|stands for|=)\s", re.IGNORECASE)


def clause_title(clause: str) -> str:
    """The term a clause defines ("X refers to …" -> "X"), else the clause (as BIRD's cards)."""
    match = _TERM.match(clause)
    return match.group(1).strip(" '\"`") if match else clause


def near_duplicates(rules: dict[str, str], database_of: dict[str, str]) -> set[str]:
    """Keys of rules with a sibling of the same database at word Jaccard >= NEAR_DUP."""
    bags = {k: words(t) for k, t in rules.items()}
    out = set()
    for k in rules:
        if any(o != k and database_of[o] == database_of[k]
               and jaccard(bags[k], bags[o]) >= NEAR_DUP for o in rules):
            out.add(k)
    return out


def evidence_set(rows: list[dict] | None = None) -> RuleSet:
    """The ``evidence`` set (module docstring)."""
    rows = rows if rows is not None else json.loads(MINIDEV.read_text())
    matchers = {db: SchemaMatcher(db, t) for db, t in load_schema(TABLES).items()} \
        if TABLES.exists() else {}
    dbs = [r["db_id"] for r in rows]
    rules: dict[str, str] = {}
    database_of: dict[str, str] = {}
    pairs: list[tuple[str, str, str]] = []
    for r in rows:
        for clause in split_clauses(r.get("evidence") or ""):
            clause = collapse(clause)
            if len(clause) < 4:
                continue
            key = f"ev-{r['db_id']}-{sha12(normalise_clause(clause))}"
            rules.setdefault(key, clause)
            database_of[key] = r["db_id"]
            if (r["question"], key, r["db_id"]) not in pairs:
                pairs.append((r["question"], key, r["db_id"]))
    dup = near_duplicates(rules, database_of)
    cards = [rule_card(k, clause_title(t), t,
                       match_schema(matchers[database_of[k]], t) if database_of[k] in matchers
                       else [{"database": database_of[k], "schema": None, "table": None,
                              "column": None}])
             for k, t in rules.items()]
    queries = [Query(collapse(q), k, db, half_of(db, dbs), ("neardup",) if k in dup else ())
               for q, k, db in pairs]
    return RuleSet("evidence", cards, queries)


# ---- SQL rendered as a procedure ------------------------------------------------------------

_CLAUSE_RE = re.compile(r"\b(select|from|where|group\s+by|having|order\s+by|limit)\b",
                        re.IGNORECASE)
_JOIN_RE = re.compile(r"\b(?:inner\s+|left\s+(?:outer\s+)?|right\s+|full\s+|cross\s+)?join\b",
                      re.IGNORECASE)
_ALIAS_RE = re.compile(r'^\s*("?[A-Za-z_][\w]*"?)(?:\s+(?:as\s+)?([A-Za-z_]\w*))?\s*$',
                       re.IGNORECASE)


def top_level_clauses(sql: str) -> dict[str, str]:
    """The top-level clauses of one SELECT (``select``, ``from``, …), parentheses and quotes
    skipped; a clause keyword inside a subquery stays in its clause's text."""
    depth, quote, marks = 0, "", []
    out: dict[str, str] = {}
    i = 0
    while i < len(sql):
        ch = sql[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and (i == 0 or not (sql[i - 1].isalnum() or sql[i - 1] == "_")):
            m = _CLAUSE_RE.match(sql, i)
            if m:
                marks.append((" ".join(m.group(1).lower().split()), m.start(), m.end()))
                i = m.end()
                continue
        i += 1
    for n, (name, _, end) in enumerate(marks):
        stop = marks[n + 1][1] if n + 1 < len(marks) else len(sql)
        out.setdefault(name, sql[end:stop].strip().rstrip(";").strip())
    return out


def _tables(from_text: str) -> tuple[list[str], list[str], dict[str, str]]:
    """(tables, join conditions, alias -> table) of a FROM clause of plain joins."""
    tables, conds, aliases = [], [], {}
    for part in _JOIN_RE.split(from_text):
        source, cond = (re.split(r"\bon\b", part, maxsplit=1, flags=re.IGNORECASE) + [""])[:2]
        m = _ALIAS_RE.match(source.replace(",", " "))
        if m:
            table = m.group(1).strip('"')
            tables.append(table)
            if m.group(2):
                aliases[m.group(2)] = table
        else:
            tables.append(collapse(source))
        if cond.strip():
            conds.append(collapse(cond))
    return tables, conds, aliases


def procedure_text(sql: str) -> tuple[str, str]:
    """(title, rule) of a SELECT written as a procedure, aliases replaced by table names."""
    parts = top_level_clauses(collapse(sql))
    tables, conds, aliases = _tables(parts.get("from", ""))

    def plain(text: str) -> str:
        for alias, table in aliases.items():
            text = re.sub(rf"\b{re.escape(alias)}\.", f"{table}.", text)
        return collapse(text.replace('"', ""))

    what = plain(parts.get("select", "*"))
    per = f" per {plain(parts['group by'])}" if "group by" in parts else ""
    steps = [f"join {' and '.join(tables)} on {' and '.join(plain(c) for c in conds)}"
             if conds else f"take {', '.join(tables)}"]
    for name, words_ in (("where", "keep rows where"), ("group by", "group by"),
                         ("having", "keep groups where"), ("order by", "order by"),
                         ("limit", "take the first")):
        if name in parts:
            steps.append(f"{words_} {plain(parts[name])}")
    title = f"{what}{per} from {', '.join(tables)}"
    return title, f"To get {what}{per}: " + "; ".join(steps) + "."


def procedures_set(rows: list[dict] | None = None) -> RuleSet:
    """The ``procedures`` set (module docstring)."""
    rows = rows if rows is not None else json.loads(MINIDEV.read_text())
    dbs = [r["db_id"] for r in rows]
    cards: dict[str, ImportCard] = {}
    queries = []
    for r in rows:
        title, rule = procedure_text(r["SQL"])
        key = f"proc-{r['db_id']}-{sha12(rule.lower())}"
        if key not in cards:
            cards[key] = rule_card(key, title, rule, [{"database": r["db_id"], "schema": None,
                                                       "table": None, "column": None}])
        queries.append(Query(collapse(r["question"]), key, r["db_id"], half_of(r["db_id"], dbs)))
    return RuleSet("procedures", list(cards.values()), queries)


def narrative_prose(text: str) -> str:
    """A BIRD-CRITIC narrative without its code: the prose before the first code fence or
    ``sql`` block, cut to 600 characters on a word boundary."""
    head = re.split(r"```|\n\s*sql\s*\n", text, maxsplit=1)[0]
    return bound(collapse(head), 600)


def critic_set(rows: list[dict] | None = None) -> RuleSet:
    """The ``critic`` set (module docstring): BIRD-CRITIC's fixed SELECT as a procedure."""
    if rows is None:
        rows = [json.loads(line) for path in CRITIC for line in path.read_text().splitlines()
                if line.strip()]
    rows = [r for r in rows if r.get("sol_sql") and re.match(
        r"\s*(select|with)\b", r["sol_sql"][0], re.IGNORECASE)]
    dbs = [r.get("selected_database") or r["db_id"] for r in rows]
    cards: dict[str, ImportCard] = {}
    queries = []
    for r, db in zip(rows, dbs):
        title, rule = procedure_text(r["sol_sql"][0])
        key = f"crit-{db}-{sha12(rule.lower())}"
        cards.setdefault(key, rule_card(key, title, rule, [{"database": db, "schema": None,
                                                            "table": None, "column": None}]))
        prose = narrative_prose(r["query"])
        if len(prose) >= 20:
            queries.append(Query(prose, key, db, half_of(db, dbs)))
    return RuleSet("critic", list(cards.values()), queries)


# ---- sqlfluff ---------------------------------------------------------------------------------

_CODE = re.compile(r"\.\. code-block::\s*\w*\s*\n((?:\n|[ \t]+.*\n?)+)")


def _code_and_prose(rst: str) -> tuple[str, str]:
    code = "\n".join(collapse(m) for m in _CODE.findall(rst + "\n"))
    prose = collapse(_CODE.sub(" ", rst + "\n"))
    return code, prose


def lint_set(rows: list[dict] | None = None, cases: list[dict] | None = None) -> RuleSet:
    """The ``lint`` set (module docstring); ``cases``: sqlfluff's test cases (default: the
    fixture file's)."""
    if rows is None:
        rows = [json.loads(line) for line in SQLFLUFF.read_text().splitlines() if line.strip()]
    if cases is None:
        cases = [json.loads(line) for line in SQLFLUFF_CASES.read_text().splitlines()
                 if line.strip()]
    codes = [r["code"] for r in rows]
    cards, queries = [], []
    for r in rows:
        key = f"lint-{r['code']}"
        _, best = _code_and_prose(r.get("best_practice") or "")
        cards.append(rule_card(key, r["summary"], collapse(rst_to_markdown(
            f"{r['summary']} {best}"))))
        code, _ = _code_and_prose(r.get("anti_pattern") or "")
        if code:
            queries.append(Query(code, key, None, half_of(r["code"], codes)))
    asked: dict[str, int] = {}
    for case in cases:
        if case["code"] in codes and asked.get(case["code"], 0) < CASES_PER_RULE:
            asked[case["code"]] = asked.get(case["code"], 0) + 1
            queries.append(Query(case["fail_str"], f"lint-{case['code']}", None,
                                 half_of(case["code"], codes), ("case",)))
    return RuleSet("lint", cards, queries)


def all_sets() -> list[RuleSet]:
    """Every set, in the order the runner reports them (reads the dataset files)."""
    return [evidence_set(), procedures_set(), critic_set(), lint_set()]

