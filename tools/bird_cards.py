"""The BIRD converter: the public text-to-SQL datasets into a cards file, deterministically.

Input: the folder ``shared/datasets`` (see its README.md). Output: one card dict per line, in the
import shape of the memory archive (DESIGN §2): ``key``, ``family``, ``title``, ``scope``,
``concepts``, ``dependencies``, ``content``, ``links`` and ``source``.

What is mapped
--------------
* BIRD mini-dev (``bird_minidev/``):

  - ``mini_dev_postgresql.json``: each question + PostgreSQL SQL becomes a ``solved_question``
    (key ``q-<question_id>``). Its dependencies come from ``mini_dev_refs.json`` ``sql_refs``: one
    entry per referenced column plus table-only entries for referenced tables without column refs.
    Concepts are the db id and the difficulty. An exact duplicate ``question_id`` row is skipped.
  - every ``;``-separated clause of ``evidence`` becomes one card per database (deduplicated by
    lower-cased, whitespace-collapsed text; key ``ev-<sha1(db_id + "\\n" + normalised text)[:12]>``).
    A clause that says *how to write the SQL* becomes a ``sql_rule``; every other clause (a business
    term mapped to a column, a value or a plain comparison) becomes a ``domain_clarification``.
    See :func:`is_sql_guidance` for the heuristic. Dependencies are the tables/columns of that
    database the clause names (see :func:`match_schema`), else a database-only entry. The solved
    question links to each clause card it used ("uses clarification" / "uses rule").
  - ``dev_tables_cleaned.json``: each column with a human description that says more than the
    column name becomes a column-scoped ``domain_clarification`` (key
    ``col-<db>.<table>.<column>``; context = ``value_description`` when present).

* BIRD-CRITIC (``bird_critic/pg_0110_data.jsonl``, ``mysql_so_data.jsonl``): each row with both a
  wrong and a fixed SQL becomes an ``explained_error`` (keys ``err-pg-<instance_id>`` and
  ``err-my-<0-based row index>``): error = wrong SQL plus the symptom the narrative states, if any;
  correction = fixed SQL; rationale = narrative. Rows without an ``error_sql`` are skipped.

* sqlfluff rules (``sqlfluff_rules/sqlfluff_rules.jsonl``): each lint rule becomes a workspace-wide
  ``sql_rule`` (key ``lint-<code>``, no dependencies); reStructuredText code blocks become Markdown
  fences.

Every card has ``scope`` null; BIRD dependencies use schema ``public``. Strings are stripped, NUL
characters removed, and every field held to the archive's card bounds (:mod:`shared.models`):
titles and texts cut on a word boundary (ending with "…"), lists cut to their maximum length.

Attribution
-----------
The generated cards file is a derived work of BIRD mini-dev (CC BY-SA 4.0, bird-bench/mini_dev,
commit 2596bf2b), BIRD-CRITIC (data CC BY-SA 4.0, code MIT) and the sqlfluff 4.5.0 rule docs
(MIT, (c) Alan Cruickshank); it is distributed under CC BY-SA 4.0. See shared/data/ATTRIBUTION.md.

Run: ``memarc convert-bird`` (defaults ``--datasets ../shared/datasets --out
shared/data/bird_cards.jsonl.gz``), or ``python -m tools.bird_cards --datasets … --out …``, which
also reports the skipped rows. A dataset tool: the runtime never imports it (``memarc
convert-bird`` does, inside its handler); it needs only the standard library and shared.models.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import re
import sys
from pathlib import Path

from shared.models import (
    FAMILIES,
    MAX_CONCEPT,
    MAX_CONCEPTS,
    MAX_DEPENDENCIES,
    MAX_LINKS,
    MAX_TITLE,
    content_limit,
)

SCHEMA = "public"

BIRD_DATABASES = (
    "california_schools",
    "card_games",
    "codebase_community",
    "debit_card_specializing",
    "european_football_2",
    "financial",
    "formula_1",
    "student_club",
    "superhero",
    "thrombosis_prediction",
    "toxicology",
)

# --------------------------------------------------------------------------------------------
# Text helpers
# --------------------------------------------------------------------------------------------


def clean_text(value: object) -> str:
    """Return ``value`` as a stripped string with NULs removed and newlines normalised."""
    if value is None:
        return ""
    text = str(value).replace("\x00", "").replace("\r\n", "\n").replace("\r", "\n")
    return text.strip()


def collapse(text: str) -> str:
    """Collapse every run of whitespace to one space and strip."""
    return re.sub(r"\s+", " ", clean_text(text)).strip()


def bound(text: str, limit: int) -> str:
    """Cut ``text`` to at most ``limit`` characters on a word boundary, ending with '…' if cut."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = max(cut.rfind(" "), cut.rfind("\n"))
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def make_title(text: str) -> str:
    """A one-line title of at most MAX_TITLE characters."""
    return bound(collapse(text), MAX_TITLE)


def normalise_clause(text: str) -> str:
    """Normalised clause text used for de-duplication: lower-cased, whitespace collapsed."""
    return collapse(text).lower()


def first_sentence(text: str) -> str:
    """The first sentence of a narrative, ignoring anything from the first code fence on."""
    head = clean_text(text).split("```", 1)[0]
    head = collapse(head) or collapse(text)
    match = re.search(r"[.!?](?=\s|$)", head)
    return head[: match.end()] if match else head


def sha12(text: str) -> str:
    """The first 12 hex digits of the SHA-1 of ``text`` (UTF-8)."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def concepts_of(*values: str) -> list[str]:
    """Lower-cased, de-duplicated, bounded concept list (order kept)."""
    out: list[str] = []
    for value in values:
        concept = collapse(value).lower()[:MAX_CONCEPT].strip()
        if concept and concept not in out:
            out.append(concept)
    return out[:MAX_CONCEPTS]


def dep(database: str, table: str | None = None, column: str | None = None) -> dict:
    """One dependency entry (schema is always 'public' for these sources)."""
    return {"database": database, "schema": SCHEMA, "table": table, "column": column}


def card(key, family, title, content, *, concepts=(), dependencies=(), links=(), dataset, record):
    """Assemble a card dict, bounding every field and dropping empty optional content."""
    body = {}
    for name, value in content.items():
        text = clean_text(value)
        if text:
            body[name] = bound(text, content_limit(name))
    return {
        "key": key,
        "family": family,
        "title": make_title(title),
        "scope": None,
        "concepts": list(concepts)[:MAX_CONCEPTS],
        "dependencies": list(dependencies)[:MAX_DEPENDENCIES],
        "content": body,
        "links": list(links)[:MAX_LINKS],
        "source": {"dataset": dataset, "record": str(record)},
    }


def read_jsonl(path: Path) -> list[dict]:
    """Read a JSON Lines file, skipping blank lines."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


# --------------------------------------------------------------------------------------------
# SQL-guidance heuristic for evidence clauses
# --------------------------------------------------------------------------------------------

# A function call: one of these names directly followed by "(" (any case).
_SQL_FUNCTION = re.compile(
    r"\b(?:sum|count|avg|average|max|min|total|divide|multiply|subtract|add|cast|substr|substring"
    r"|iif|round|strftime|julianday|year|month|day|date|datetime|age|now|group_concat|concat"
    r"|length|abs|coalesce|ifnull|nullif|upper|lower|instr|trim|replace|timestampdiff|datediff"
    r"|extract|mod|sqrt|ratio|percentage)\s*\(",
    re.IGNORECASE,
)
# Multi-word SQL constructs (any case).
_SQL_PHRASE = re.compile(
    r"\b(?:order\s+by|group\s+by|is\s+not\s+null|is\s+null|case\s+when|not\s+in|not\s+like"
    r"|inner\s+join|left\s+join)\b",
    re.IGNORECASE,
)
# Single SQL keywords that are also English words: only when written in upper case.
_SQL_KEYWORD = re.compile(r"\b(?:LIKE|DISTINCT|BETWEEN|LIMIT|JOIN|WHERE|SELECT|HAVING|DESC|ASC|NULL)\b")
# A LIKE pattern: like '...' (any case) or a quoted % wildcard.
_SQL_LIKE = re.compile(r"\blike\s+['\"]|'%|%'", re.IGNORECASE)
# An arithmetic formula: * or / between operands, with spaces around it or next to a bracket/quote
# (so 'and/or', 'his/her', dates like 1990/1/1 and the literal '*' do not count).
_SQL_ARITHMETIC = re.compile(r"\s[*/]\s|[)\]`]\s*[*/]|[*/]\s*[(\[`]|[*/]\s*100\b|`\s*[-+]\s*`")


def is_sql_guidance(clause: str) -> bool:
    """True when an evidence clause is SQL guidance (a ``sql_rule``), not a plain definition.

    A clause is SQL guidance when it contains any of: a function call (``SUM(``, ``COUNT(``,
    ``MAX(``, ``DIVIDE(``, ``CAST(``, ``YEAR(``, ... any case); a multi-word SQL construct
    (``ORDER BY``, ``GROUP BY``, ``IS [NOT] NULL``, ``CASE WHEN``, ``NOT IN``, ``NOT LIKE``,
    ``... JOIN``); an upper-case SQL keyword (``LIKE``, ``DISTINCT``, ``BETWEEN``, ``LIMIT``,
    ``WHERE``, ``DESC``, ...); a ``LIKE`` pattern or quoted ``%`` wildcard; or an arithmetic
    formula (``a / b``, ``... * 100``, ```a` - `b```). A bare ``=``/``<``/``>`` comparison is NOT enough: "Male
    refers to gender = 'M'" maps a business term to a value and stays a domain clarification.
    """
    return bool(
        _SQL_FUNCTION.search(clause)
        or _SQL_PHRASE.search(clause)
        or _SQL_KEYWORD.search(clause)
        or _SQL_LIKE.search(clause)
        or _SQL_ARITHMETIC.search(clause)
    )


# --------------------------------------------------------------------------------------------
# Schema of the BIRD databases and name matching
# --------------------------------------------------------------------------------------------


def load_schema(path: Path) -> dict[str, list[dict]]:
    """db_id -> list of table dicts from dev_tables_cleaned.json.

    The ``tables`` field is documented as a Python-literal string; it is parsed with
    ``ast.literal_eval`` when it is a string and used as is when it is already a list.
    """
    raw = json.loads(path.read_text(encoding="utf-8"))
    schema: dict[str, list[dict]] = {}
    for database in raw:
        tables = database["tables"]
        if isinstance(tables, str):
            tables = ast.literal_eval(tables)
        schema[database["name"]] = tables
    return schema


def _name_pattern(name: str, *, column: bool = False) -> re.Pattern:
    """Whole-word, case-insensitive pattern for a table or column name (quotes allowed around).

    A column name directly followed by "(" is a function call (``Count(``, ``year(``), not the
    column, so column patterns refuse that.
    """
    body = r"\s+".join(re.escape(part) for part in name.split())
    tail = r"(?!\w)(?!\s*\()" if column else r"(?!\w)"
    return re.compile(r"(?<!\w)" + body + tail, re.IGNORECASE)


# "ORDER BY" / "GROUP BY" are SQL, not the table "order" (financial) or a column "group".
_SQL_CLAUSE_WORDS = re.compile(r"\b(?:order|group)\s+by\b", re.IGNORECASE)


class SchemaMatcher:
    """Finds the tables and columns of one database that a piece of text names."""

    def __init__(self, database: str, tables: list[dict]):
        """Precompile one pattern per table name and per distinct (case-insensitive) column name."""
        self.database = database
        self.tables = [(t["name"], _name_pattern(t["name"])) for t in tables]
        self.order = {t["name"]: i for i, t in enumerate(tables)}
        self.columns: dict[str, tuple[re.Pattern, list[tuple[str, str]]]] = {}
        self.column_order: dict[tuple[str, str], tuple[int, int]] = {}
        for ti, table in enumerate(tables):
            for ci, column in enumerate(table["columns"]):
                lowered = collapse(column["name"]).lower()
                if lowered not in self.columns:
                    self.columns[lowered] = (_name_pattern(column["name"], column=True), [])
                self.columns[lowered][1].append((table["name"], column["name"]))
                self.column_order[(table["name"], column["name"])] = (ti, ci)

    def match(self, text: str) -> list[dict]:
        """Dependencies for ``text`` (see :func:`match_schema`)."""
        text = _SQL_CLAUSE_WORDS.sub(" ", text)
        named_tables = {name for name, pattern in self.tables if pattern.search(text)}
        hits: set[tuple[str, str]] = set()
        for pattern, owners in self.columns.values():
            if not pattern.search(text):
                continue
            preferred = [o for o in owners if o[0] in named_tables]
            if preferred:
                hits.update(preferred)
            elif len(owners) <= 3:
                hits.update(owners)
        entries = [dep(self.database, t, c) for t, c in sorted(hits, key=self.column_order.__getitem__)]
        covered = {t for t, _ in hits}
        entries += [
            dep(self.database, t)
            for t in sorted(named_tables - covered, key=self.order.__getitem__)
        ]
        return entries[:MAX_DEPENDENCIES] or [dep(self.database)]


def match_schema(matcher: SchemaMatcher, text: str) -> list[dict]:
    """Tables/columns of the matcher's database that ``text`` names, as dependency entries.

    Names match case-insensitively as whole words (so backquoted/quoted names match too), after
    removing ``ORDER BY``/``GROUP BY``; a column name followed by "(" is a function call. A
    column name found in several tables is attributed to the tables the text also names; if it
    names none of them, to all its tables when there are at most three, else it is dropped as
    ambiguous (``id``, ``name``...). Tables named without any matched column get a table-only
    entry. With no match at all the result is a database-only entry.
    """
    return matcher.match(text)


# --------------------------------------------------------------------------------------------
# Converters per source
# --------------------------------------------------------------------------------------------


def _column_cards(schema: dict[str, list[dict]], stats: dict) -> list[dict]:
    """Column-scoped domain clarifications from human column descriptions."""

    def squash(value: str) -> str:
        return re.sub(r"[\s_]+", "", value).lower()

    cards = []
    for database, tables in schema.items():
        for table in tables:
            for column in table["columns"]:
                description = clean_text(column.get("description"))
                if not description:
                    stats["column_without_description"] = stats.get("column_without_description", 0) + 1
                    continue
                if squash(description) == squash(column["name"]):
                    stats["column_description_repeats_name"] = stats.get("column_description_repeats_name", 0) + 1
                    continue
                name = f"{table['name']}.{column['name']}"
                cards.append(
                    card(
                        f"col-{database}.{name}",
                        "domain_clarification",
                        f"{name}: {description}",
                        {"definition": description, "context": column.get("value_description")},
                        concepts=concepts_of(database),
                        dependencies=[dep(database, table["name"], column["name"])],
                        dataset="bird_minidev",
                        record=f"{database}.{name}",
                    )
                )
    return cards


def split_clauses(evidence: str) -> list[str]:
    """Split BIRD evidence on ``;`` outside parentheses only: a ``;`` inside a formula belongs to
    it (e.g. ``MULTIPLY(DIVIDE(SUM(x = 'Bad'); count(id)), 100)``). Quotes are not tracked (BIRD
    has unbalanced ones); evidence with unbalanced parentheses is split on every ``;``."""
    clauses, depth, start = [], 0, 0
    for i, ch in enumerate(evidence):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == ";" and depth == 0:
            clauses.append(evidence[start:i])
            start = i + 1
    if depth != 0:
        return evidence.split(";")
    clauses.append(evidence[start:])
    return clauses


def _question_cards(minidev: Path, schema: dict[str, list[dict]], stats: dict) -> tuple[list[dict], list[dict]]:
    """Evidence clause cards and solved questions; returns (clause_cards, question_cards)."""
    questions = json.loads((minidev / "mini_dev_postgresql.json").read_text(encoding="utf-8"))
    refs = {}
    for row in json.loads((minidev / "mini_dev_refs.json").read_text(encoding="utf-8")):
        refs.setdefault(row["question_id"], row["sql_refs"])
    matchers = {database: SchemaMatcher(database, tables) for database, tables in schema.items()}

    clause_cards: dict[str, dict] = {}
    question_cards: list[dict] = []
    seen_questions: set = set()
    for row in questions:
        qid = row["question_id"]
        if qid in seen_questions:
            stats["duplicate_question_id"] = stats.get("duplicate_question_id", 0) + 1
            continue
        seen_questions.add(qid)
        database = row["db_id"]
        question = clean_text(row["question"])
        sql = clean_text(row["SQL"])
        if not question or not sql:
            stats["question_without_sql"] = stats.get("question_without_sql", 0) + 1
            continue
        evidence = clean_text(row.get("evidence"))

        links = []
        for clause in split_clauses(evidence):
            clause = clean_text(clause)
            if not clause:
                continue
            normalised = normalise_clause(clause)
            key = "ev-" + sha12(f"{database}\n{normalised}")
            if key not in clause_cards:
                rule = is_sql_guidance(clause)
                clause_cards[key] = card(
                    key,
                    "sql_rule" if rule else "domain_clarification",
                    clause,
                    {"rule": clause} if rule else {"definition": clause},
                    concepts=concepts_of(database),
                    dependencies=match_schema(matchers[database], clause),
                    dataset="bird_minidev",
                    record=qid,
                )
            meaning = "uses rule" if clause_cards[key]["family"] == "sql_rule" else "uses clarification"
            if all(link["target"] != key for link in links):
                links.append({"target": key, "meaning": meaning})

        sql_refs = refs.get(qid) or {"tables": [], "columns": []}
        dependencies, with_columns = [], set()
        for ref in sql_refs.get("columns", []):
            table, column = ref.split(".", 1)
            entry = dep(database, table, column)
            if entry not in dependencies:
                dependencies.append(entry)
            with_columns.add(table)
        for table in sql_refs.get("tables", []):
            entry = dep(database, table)
            if table not in with_columns and entry not in dependencies:
                dependencies.append(entry)
        if not refs.get(qid):
            stats["question_without_refs"] = stats.get("question_without_refs", 0) + 1
            dependencies = [dep(database)]

        question_cards.append(
            card(
                f"q-{qid}",
                "solved_question",
                question,
                {"question": question, "sql": sql, "context": evidence},
                concepts=concepts_of(database, row.get("difficulty") or ""),
                dependencies=dependencies,
                links=links,
                dataset="bird_minidev",
                record=qid,
            )
        )
    return list(clause_cards.values()), question_cards


def join_sql(value) -> str:
    """One SQL text from a string or a list of statements (joined with ';' + newline)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return clean_text(value)
    parts = [clean_text(part) for part in value if part is not None and clean_text(part)]
    if len(parts) <= 1:
        return parts[0] if parts else ""
    return "\n".join(part if part.endswith(";") else part + ";" for part in parts)


_FENCED_ERROR = re.compile(r"```\s*error\b(.*?)```", re.IGNORECASE | re.DOTALL)
_SYMPTOM = re.compile(
    r"\b(?:error|errors|exception|fails?|failed|failing|incorrect|wrong|unexpected|not working"
    r"|doesn't work|does not work|didn't work|did not work|doesn't seem to work|didn't give"
    r"|did not give|not getting|not seeing|instead of|downtime|too slow|takes too long|timeout"
    r"|times out|returns? no|returns? nothing|no results?|empty result)\b",
    re.IGNORECASE,
)


def extract_symptom(narrative: str) -> str:
    """The symptom a narrative states, or '' when it states none.

    A fenced ```error block wins; otherwise the first sentence (outside code fences) that speaks
    of an error, a failure, a wrong/unexpected/empty result, slowness or downtime.
    """
    fenced = _FENCED_ERROR.search(narrative)
    if fenced and collapse(fenced.group(1)):
        return bound(collapse(fenced.group(1)), 1000)
    prose = re.sub(r"```.*?(```|$)", " ", narrative, flags=re.DOTALL)
    for sentence in re.split(r"(?<=[.!?])\s+", collapse(prose)):
        if _SYMPTOM.search(sentence):
            return bound(sentence.strip(), 1000)
    return ""


def _error_cards(critic: Path, stats: dict) -> list[dict]:
    """Explained errors from BIRD-CRITIC PostgreSQL and MySQL rows."""
    cards = []
    sources = (
        ("pg_0110_data.jsonl", "pg", "postgresql"),
        ("mysql_so_data.jsonl", "my", "mysql"),
    )
    for filename, short, dialect in sources:
        for index, row in enumerate(read_jsonl(critic / filename)):
            record = str(row.get("instance_id") if row.get("instance_id") is not None else index)
            database = clean_text(row.get("selected_database") or row.get("db_id"))
            error_sql = join_sql(row.get("error_sql"))
            sol_sql = join_sql(row.get("sol_sql"))
            if not error_sql:
                stats[f"{short}_without_error_sql"] = stats.get(f"{short}_without_error_sql", 0) + 1
                continue
            if not sol_sql:
                stats[f"{short}_without_sol_sql"] = stats.get(f"{short}_without_sol_sql", 0) + 1
                continue
            narrative = clean_text(row.get("query"))
            symptom = extract_symptom(narrative)
            error = error_sql + (f"\n\nSymptom: {symptom}" if symptom else "")
            cards.append(
                card(
                    f"err-{short}-{record}",
                    "explained_error",
                    first_sentence(narrative) or error_sql,
                    {"error": error, "correction": sol_sql, "rationale": narrative},
                    concepts=concepts_of(dialect, database),
                    dependencies=[dep(database)] if database in BIRD_DATABASES else [],
                    dataset="bird_critic",
                    record=record,
                )
            )
    return cards


def rst_to_markdown(text: str) -> str:
    """Turn sqlfluff's reStructuredText snippets into Markdown (code blocks -> fences)."""
    lines = clean_text(text).split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        directive = re.match(r"\s*\.\. code-block::\s*(\w*)", lines[i])
        if not directive:
            out.append(lines[i].replace("``", "`"))
            i += 1
            continue
        i += 1
        block: list[str] = []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
            block.append(lines[i])
            i += 1
        while block and not block[-1].strip():
            block.pop()
        while block and not block[0].strip():
            block.pop(0)
        indent = min((len(l) - len(l.lstrip()) for l in block if l.strip()), default=0)
        out.append("```" + (directive.group(1) or ""))
        out.extend(l[indent:] for l in block)
        out.append("```")
        if i < len(lines):
            out.append("")
    return "\n".join(out).strip()


def _lint_cards(path: Path) -> list[dict]:
    """Workspace-wide sql_rule cards from sqlfluff lint rules."""
    cards = []
    for row in read_jsonl(path):
        summary = clean_text(row["summary"])
        best = rst_to_markdown(row.get("best_practice") or "")
        anti = rst_to_markdown(row.get("anti_pattern") or "")
        cards.append(
            card(
                f"lint-{row['code']}",
                "sql_rule",
                f"{row['code']} {row['name']}: {summary}",
                {
                    "rule": summary + (f"\n\nBest practice: {best}" if best else ""),
                    "rationale": f"Anti-pattern: {anti}" if anti else "",
                },
                concepts=concepts_of(row.get("category") or "", "sqlfluff"),
                dataset="sqlfluff_rules",
                record=row["code"],
            )
        )
    return cards


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def convert_with_stats(datasets_dir: Path) -> tuple[list[dict], dict]:
    """Convert every source; return (cards in a stable order, counts of skipped rows by reason).

    Order: column clarifications (schema order), evidence clause cards (first use), solved
    questions (file order), explained errors (PostgreSQL then MySQL, file order), lint rules.
    """
    datasets_dir = Path(datasets_dir)
    minidev = datasets_dir / "bird_minidev"
    stats: dict = {}
    schema = load_schema(minidev / "dev_tables_cleaned.json")
    cards = _column_cards(schema, stats)
    clause_cards, question_cards = _question_cards(minidev, schema, stats)
    cards += clause_cards + question_cards
    cards += _error_cards(datasets_dir / "bird_critic", stats)
    cards += _lint_cards(datasets_dir / "sqlfluff_rules" / "sqlfluff_rules.jsonl")
    keys = [c["key"] for c in cards]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate card keys")
    return cards, dict(sorted(stats.items()))


def convert(datasets_dir: Path) -> list[dict]:
    """Convert the datasets folder into card dicts, in a stable order."""
    return convert_with_stats(datasets_dir)[0]


def serialise(cards: list[dict]) -> bytes:
    """The JSON Lines bytes for ``cards`` (sorted keys, UTF-8, one card per line)."""
    lines = [json.dumps(c, sort_keys=True, ensure_ascii=False, separators=(",", ":")) for c in cards]
    return ("\n".join(lines) + "\n").encode("utf-8")


def write_cards(cards: list[dict], out_path: Path) -> None:
    """Write gzip-compressed JSON Lines; byte-identical across runs (no file name, mtime 0)."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as handle:
            handle.write(serialise(cards))


def family_counts(cards: list[dict]) -> dict:
    """Number of cards per family (all four families, fixed order) plus the total."""
    counts = {family: 0 for family in FAMILIES}
    for c in cards:
        counts[c["family"]] += 1
    counts["total"] = len(cards)
    return counts


def main(argv: list[str] | None = None) -> int:
    """CLI: convert ``--datasets`` into ``--out``; print counts per family as JSON on stdout."""
    parser = argparse.ArgumentParser(prog="python -m tools.bird_cards", description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", type=Path, required=True, help="the shared/datasets folder")
    parser.add_argument("--out", type=Path, required=True, help="output .jsonl.gz path")
    args = parser.parse_args(argv)
    cards, skipped = convert_with_stats(args.datasets)
    write_cards(cards, args.out)
    print(json.dumps(family_counts(cards), sort_keys=False))
    print(json.dumps({"skipped": skipped}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
