"""Extract sqlfluff's own rule test cases into ``bench/fixtures/sqlfluff_rule_cases.jsonl``, the
larger half of the ``lint`` rule set (issue 27; ``bench/rule_sets_data.py``).

sqlfluff (MIT, Copyright (c) 2018-2026 Alan Cruickshank; https://github.com/sqlfluff/sqlfluff)
keeps one YAML file per rule under ``test/fixtures/rules/std_rule_cases/``; each ``fail_str`` is a
SQL text its maintainers wrote to break that rule. Kept: cases of files whose ``rule`` is one code
of ``../shared/datasets/sqlfluff_rules`` (not the files that test two rules together), run with the
rule's default settings (no ``configs``, or only ``core: dialect``), and whose text no other rule's
file also lists. One line per case: ``{"code", "case", "dialect", "fail_str"}``, in file order.

Run (with a sqlfluff checkout, e.g. the library's ``fetch github:sqlfluff/sqlfluff``):
``.venv/bin/python bench/sqlfluff_cases.py --repo /work/.mirror/sqlfluff+sqlfluff/repo``
(reads ``HEAD`` of a bare repository or the work tree of a checkout).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections import defaultdict
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parent / "fixtures" / "sqlfluff_rule_cases.jsonl"
CASES_DIR = "test/fixtures/rules/std_rule_cases"
RULES = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "sqlfluff_rules" / \
    "sqlfluff_rules.jsonl"


def _files(repo: Path) -> dict[str, str]:
    """``{file name: YAML text}`` of the rule case files at the repository's ``HEAD``."""
    def git(*args: str) -> str:
        return subprocess.run(["git", f"--git-dir={repo}" if (repo / "HEAD").exists()
                               else f"--git-dir={repo / '.git'}", *args], check=True,
                              capture_output=True, text=True).stdout
    names = [n for n in git("ls-tree", "--name-only", f"HEAD:{CASES_DIR}").split()
             if n.endswith(".yml")]
    return {n: git("show", f"HEAD:{CASES_DIR}/{n}") for n in sorted(names)}


def default_settings(configs: dict | None) -> str | None | bool:
    """The dialect a case's ``configs`` sets (None: the default dialect), or False when it changes
    any other setting (the case fails only under non-default settings)."""
    if not configs:
        return None
    if set(configs) == {"core"} and set(configs["core"]) <= {"dialect"}:
        return configs["core"].get("dialect")
    return False


def extract(files: dict[str, str], codes: set[str]) -> list[dict]:
    """The kept cases (module docstring) of ``files`` (``{name: YAML text}``)."""
    cases: list[dict] = []
    owners: dict[str, set[str]] = defaultdict(set)
    for text in files.values():
        doc = yaml.safe_load(text) or {}
        rule = doc.get("rule")
        if rule not in codes:
            continue
        seen = set()
        for name, case in doc.items():
            if not isinstance(case, dict) or not isinstance(case.get("fail_str"), str):
                continue
            dialect = default_settings(case.get("configs"))
            sql = case["fail_str"].strip()
            if dialect is False or not sql or sql in seen:
                continue
            seen.add(sql)
            owners[sql].add(rule)
            cases.append({"code": rule, "case": name, "dialect": dialect, "fail_str": sql})
    return [c for c in cases if len(owners[c["fail_str"]]) == 1]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, required=True, help="a sqlfluff git repository")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    codes = {json.loads(line)["code"] for line in RULES.read_text().splitlines() if line.strip()}
    cases = extract(_files(args.repo), codes)
    args.out.write_text("".join(json.dumps(c) + "\n" for c in cases))
    print(f"{args.out}: {len(cases)} cases of {len({c['code'] for c in cases})} rules")


if __name__ == "__main__":
    main()
