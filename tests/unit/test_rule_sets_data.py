"""The builders of issue 27's rule-retrieval sets (``bench/rule_sets_data.py``): the deterministic
TUNE / REPORT split, near-duplicate tagging, SQL rendered as a procedure, sqlfluff's code kept
out of the rule and used as the query, sqlfluff's own test cases. Small in-line rows; no dataset, database or model."""

from __future__ import annotations

from bench.rule_sets_data import (CASES_PER_RULE, clause_title, critic_set, evidence_set, half_of,
                                  lint_set, procedure_text, top_level_clauses)
from bench.sqlfluff_cases import extract

ROWS = [
    {"db_id": "b_db", "question": "How many clients opened accounts in Prague?",
     "evidence": "Prague refers to A3 = 'Prague'; clients refers to disp.type = 'OWNER'",
     "SQL": "SELECT COUNT(T1.client_id) FROM client AS T1 INNER JOIN district AS T2 "
            "ON T1.district_id = T2.district_id WHERE T2.A3 = 'Prague'"},
    {"db_id": "a_db", "question": "Which owner accounts exist?",
     "evidence": "owner refers to disp.type = 'OWNER'; owners refers to disp.type = 'OWNER' ",
     "SQL": "SELECT account_id FROM disp WHERE type = 'OWNER' GROUP BY account_id"},
]


def test_split_is_by_sorted_name_odd_index_report():
    names = ["c", "a", "b", "a"]
    assert [half_of(n, names) for n in ("a", "b", "c")] == ["TUNE", "REPORT", "TUNE"]


def test_evidence_set_one_rule_per_distinct_clause_per_database_queried_by_the_question():
    s = evidence_set(ROWS)
    rules = {c.key: c.content["rule"] for c in s.cards}
    assert len(rules) == 4  # the same clause text in two databases is two rules
    assert all(q.text in {r["question"] for r in ROWS} for q in s.queries)
    a_queries = [q for q in s.queries if q.database == "a_db"]
    assert {q.half for q in a_queries} == {"TUNE"}
    assert {q.half for q in s.queries if q.database == "b_db"} == {"REPORT"}
    # "owner refers to …" and "owners refers to …" are near-duplicates of one database
    assert all(q.tags == ("neardup",) for q in a_queries)
    assert all(q.tags == () for q in s.queries if q.database == "b_db")


def test_clause_title_is_the_defined_term():
    assert clause_title("Prague refers to A3 = 'Prague'") == "Prague"
    assert clause_title("COUNT(x) > 10") == "COUNT(x) > 10"


def test_procedure_resolves_aliases_and_names_every_step():
    title, rule = procedure_text(ROWS[0]["SQL"])
    assert rule == ("To get COUNT(client.client_id): join client and district on "
                    "client.district_id = district.district_id; keep rows where "
                    "district.A3 = 'Prague'.")
    assert title == "COUNT(client.client_id) from client, district"
    _, grouped = procedure_text(ROWS[1]["SQL"])
    assert grouped.startswith("To get account_id per account_id: take disp;")
    assert "group by account_id" in grouped


def test_top_level_clauses_leave_subqueries_whole():
    parts = top_level_clauses("SELECT a FROM t WHERE b IN (SELECT b FROM u WHERE c = 1) LIMIT 1")
    assert parts == {"select": "a", "from": "t", "where": "b IN (SELECT b FROM u WHERE c = 1)",
                     "limit": "1"}


def test_lint_rule_has_no_code_and_the_query_is_the_anti_pattern_code():
    row = {"code": "AL01", "summary": "Implicit/explicit aliasing of table.",
           "anti_pattern": "The alias is implicit.\n\n.. code-block:: sql\n\n    SELECT\n"
                           "        voo.a\n    FROM foo voo",
           "best_practice": "Add ``AS``.\n\n.. code-block:: sql\n\n"
                            "    SELECT voo.a FROM foo AS voo"}
    s = lint_set([row], cases=[])
    assert "FROM foo" not in s.cards[0].content["rule"]
    assert s.queries[0].text == "SELECT voo.a FROM foo voo"
    assert s.queries[0].wanted == "lint-AL01" and s.queries[0].database is None


def test_lint_asks_sqlfluffs_own_cases_of_known_rules_at_most_cases_per_rule():
    row = {"code": "AL01", "summary": "Implicit/explicit aliasing of table.",
           "anti_pattern": "", "best_practice": "Add ``AS``."}
    cases = [{"code": "AL01", "case": f"t{i}", "dialect": None, "fail_str": f"select a from t{i} x"}
             for i in range(CASES_PER_RULE + 3)]
    cases.append({"code": "ZZ99", "case": "t", "dialect": None, "fail_str": "select 1"})
    s = lint_set([row], cases=cases)
    assert [q.text for q in s.queries] == [c["fail_str"] for c in cases[:CASES_PER_RULE]]
    assert {(q.wanted, q.tags, q.half) for q in s.queries} == {("lint-AL01", ("case",), "TUNE")}


def test_sqlfluff_cases_keep_default_settings_single_rule_unambiguous_cases():
    files = {"AL01.yml": "rule: AL01\nt1:\n  fail_str: select a from t x\n"
                         "t2:\n  fail_str: select b from t x\n  configs:\n    rules:\n"
                         "      aliasing.table:\n        aliasing: implicit\n"
                         "t3:\n  fail_str: select c from t x\n  configs:\n    core:\n"
                         "      dialect: bigquery\n"
                         "t4:\n  pass_str: select d from t AS x\n"
                         "t5:\n  fail_str: select 1\n",
             "CP01.yml": "rule: CP01\nt1:\n  fail_str: select 1\n",
             "AL02_LT01.yml": "rule: AL02, LT01\nt1:\n  fail_str: select e f\n"}
    got = extract(files, {"AL01", "CP01", "AL02", "LT01"})
    assert [(c["case"], c["dialect"], c["fail_str"]) for c in got] == [
        ("t1", None, "select a from t x"), ("t3", "bigquery", "select c from t x")]


def test_critic_keeps_select_fixes_and_asks_with_the_prose_before_the_code():
    rows = [{"selected_database": "financial", "sol_sql": ["SELECT a FROM t GROUP BY a"],
             "query": "I need every a of t once. My query:\n```sql\nSELECT a FROM t\n```"},
            {"db_id": "toxicology", "sol_sql": ["CREATE INDEX i ON t (a)"],
             "query": "The index is slow, how do I build it?"}]
    s = critic_set(rows)
    assert [c.content["rule"] for c in s.cards] == ["To get a per a: take t; group by a."]
    assert [(q.text, q.database) for q in s.queries] == [("I need every a of t once. My query:",
                                                          "financial")]
