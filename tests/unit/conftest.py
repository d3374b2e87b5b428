"""The unit tests: what is pure (rules, the normaliser, fusion, filter building, expansion, the
layer map, query confinement, settings, the CLI's binding). They need no PostgreSQL, Redis or
embedding model and run in seconds: ``pytest tests/unit``.

``tests/conftest.py`` still applies (its fixtures start nothing until a test asks for one, and
``helpers`` stays importable); a unit test that asks for a fixture of a service is refused before
that fixture starts anything.
"""

from __future__ import annotations

import pytest

#: the fixtures of ``tests/conftest.py`` that start or reach a service, or load the models
SERVICES = frozenset({"pg_admin_url", "template_db", "fresh_db", "empty_db", "redis_base_url",
                      "redis_url", "embedder", "make_env"})


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a unit test that uses a service before any of its fixtures is set up."""
    used = sorted(SERVICES & set(getattr(item, "fixturenames", ())))
    if used:
        pytest.fail(f"{item.nodeid} is a unit test but uses {', '.join(used)}: a test that needs "
                    "PostgreSQL, Redis or the models belongs in tests/, not tests/unit/",
                    pytrace=False)
