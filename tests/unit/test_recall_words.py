"""Words that match the code (issue 26): what the OpenAPI document, the README and the manual
(``docs/``) say about recall's fusion is what :mod:`shared.recall.profiles` runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

from shared.config import load_settings
from shared.recall.fusion import FusionProfile
from shared.recall.profiles import MODE_PROFILES, describe_profiles

ROOT = Path(__file__).resolve().parents[2]

#: How a text names each fusion method.
METHOD_NAMES = {"rrf": (r"reciprocal rank fusion", r"\bRRF\b", r"k\s*=\s*60"),
                "dbsf": (r"distribution-based score fusion", r"\bDBSF\b")}


def openapi() -> dict:
    from writer.app import create_app

    return create_app(load_settings({})).openapi_schema.to_schema()


def flat(text: str) -> str:
    """``text`` with every run of whitespace as one space (a docstring's line breaks)."""
    return re.sub(r"\s+", " ", text)


def unused_methods() -> list[str]:
    """The fusion methods no recall mode runs."""
    used = {p.method for p in MODE_PROFILES.values()}
    return [m for m in METHOD_NAMES if m not in used]


def test_a_profile_describes_its_method_and_every_weighted_branch():
    rrf = FusionProfile(method="rrf", weights={"dense": 1.0, "bm25": 0.5, "key": 0.0}, k=60)
    assert rrf.describe() == "reciprocal rank fusion (RRF, k = 60) of bm25 ×0.5, dense ×1"
    dbsf = FusionProfile(method="dbsf", weights={"own": 2.0, "key": 0.5})
    assert dbsf.describe() == "distribution-based score fusion (DBSF) of key ×0.5, own ×2"


def test_the_search_operation_describes_each_modes_fusion():
    operation = openapi()["paths"]["/api/workspaces/{workspace_id}/memory/search"]["post"]
    text = flat(operation["description"])
    for mode, profile in MODE_PROFILES.items():
        assert f"{mode}: {profile.describe()}" in text, (mode, text)
    assert f"— {describe_profiles()}." in text  # every mode, nothing between them


def test_no_openapi_text_names_a_fusion_recall_does_not_run():
    document = json.dumps(openapi(), ensure_ascii=False)
    for method in unused_methods():
        for pattern in METHOD_NAMES[method]:
            assert not re.search(pattern, document, flags=re.I if " " in pattern else 0), \
                (method, pattern)


def manual_paragraphs() -> list[tuple[str, str]]:
    """``(file, paragraph)`` of the README and of every chapter of the manual (``docs/``), each
    paragraph flattened (blank lines separate paragraphs)."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [(path.name, flat(part)) for path in files
            for part in re.split(r"\n\s*\n", path.read_text(encoding="utf-8"))]


def test_the_manual_names_an_unused_fusion_only_as_what_fusion_py_offers():
    """A paragraph of the README or the manual naming a method no mode runs must say that
    ``fusion.py`` offers it (the layout's ``fusion.py``, the design's history of §5.1); and the
    manual names the one in use, mode by mode, as run."""
    paragraphs = manual_paragraphs()
    for name, paragraph in paragraphs:
        for method in unused_methods():
            for pattern in METHOD_NAMES[method][:2]:
                if re.search(pattern, paragraph, flags=re.I if " " in pattern else 0):
                    assert "fusion.py`" in paragraph, (name, paragraph)
    assert any(describe_profiles() in paragraph for _, paragraph in paragraphs)
