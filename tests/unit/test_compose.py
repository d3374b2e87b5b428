"""``compose.yaml`` gives each service only its own role's credentials (issue 25, case 8): the
PostgreSQL superuser's password and the migrator login reach the one-shot ``migrate`` service
alone; the writer, the workers and the explorer hold the runtime login's password only."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml
from helpers import skip_or_fail

COMPOSE = Path(__file__).resolve().parents[2] / "compose.yaml"
RUNTIME_SERVICES = ("writer", "worker", "explorer")


def _services() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]  # `<<` merges resolved


def test_only_the_migrate_service_holds_the_superuser_password() -> None:
    services = _services()
    for name in RUNTIME_SERVICES:
        service = services[name]
        assert service["secrets"] == ["memarc_db_password"], (name, service["secrets"])
        env = service["environment"]
        assert not [k for k in env if k.startswith("MEMARC_MIGRATOR_")], (name, env)
        assert env["MEMARC_DATABASE_URL"].startswith("postgresql://memarc@"), name
    migrate = services["migrate"]
    assert set(migrate["secrets"]) == {"memarc_db_password", "postgres_password"}
    assert migrate["environment"]["MEMARC_MIGRATOR_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert migrate["environment"]["MEMARC_DATABASE_URL"].startswith("postgresql://memarc@")


def test_docker_compose_reads_the_file(tmp_path: Path) -> None:
    """The file is valid for docker-compose (``config``, with the secret files it names). Without
    Debian's ``docker-compose`` it skips, or fails under ``MEMARC_NO_SKIP`` (``.ci/run`` installs
    it, so in CI it always runs)."""
    if shutil.which("docker-compose") is None:
        skip_or_fail("no docker-compose binary (CI installs Debian's docker-compose)")
    work = tmp_path / "deploy"
    (work / "secrets").mkdir(parents=True)
    for secret in ("postgres_password", "memarc_db_password"):
        (work / "secrets" / secret).write_text("x\n")
    shutil.copy(COMPOSE, work / "compose.yaml")
    r = subprocess.run(["docker-compose", "-f", "compose.yaml", "config", "--quiet"], cwd=work,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
