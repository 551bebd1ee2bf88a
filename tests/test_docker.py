"""docker/: the compose file is valid, the Dockerfile has its stages, every command is real.

No Docker engine runs here: the compose file is checked with ``docker-compose config`` (Debian
package ``docker-compose``), and every command the files run is run here with ``--help``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"


def _docker_compose() -> str:
    """The docker-compose binary, or a skip (which fails a CI run: scripts/setup.sh installs it)."""
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose)")
    return binary


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    binary = _docker_compose()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TILEWISE_", "POSTGRES_"))}
    env["TILEWISE_API_TOKEN"] = "test-token"
    done = subprocess.run(
        [binary, "-f", str(COMPOSE), "config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = yaml.safe_load(done.stdout)
    return config


def _stages(text: str) -> list[tuple[str, str, list[str]]]:
    """(image, name, instructions) per FROM of a Dockerfile (continuation lines joined)."""
    logical = re.sub(r"\\\n", " ", text)
    stages: list[tuple[str, str, list[str]]] = []
    for line in logical.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if match:
            stages.append((match[1], (match[2] or "").lower(), []))
        elif stages:
            stages[-1][2].append(line)
    return stages


def _run_help(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` (a `tilewise ...` command) with ``--help``: every option before it is parsed."""
    assert argv[0] == "tilewise", argv
    script = Path(sys.executable).parent / "tilewise"
    assert script.exists(), "the tilewise console script is not installed in this environment"
    return subprocess.run(
        [str(script), *argv[1:], "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_dockerfile_is_multi_stage_builder_then_runtime() -> None:
    stages = _stages(DOCKERFILE.read_text())
    names = [name for _, name, _ in stages]
    assert names == ["builder", "runtime"]
    builder, runtime = stages[0][2], stages[1][2]
    assert any(re.search(r"python -m venv", i) for i in builder)
    assert any(re.search(r"RUN pip install \.$", i) for i in builder)
    assert any(re.match(r"COPY --from=builder ", i) for i in runtime)
    assert any("apt-get install" in i and re.search(r"\bclang(-\d+)?\b", i) for i in runtime)
    assert not any("pip install" in i for i in runtime), "the runtime stage only copies the venv"
    for image, _, _ in stages:
        assert "slim" in image or image.startswith("${")
    assert re.search(r"ARG PYTHON_IMAGE=python:3\.\d+-slim", DOCKERFILE.read_text())


def test_dockerfile_copies_what_pip_install_needs() -> None:
    """The builder copies every file pyproject.toml needs, and the .dockerignore lets it in."""
    text = DOCKERFILE.read_text()
    ignore = (ROOT / "docker" / "Dockerfile.dockerignore").read_text().split()
    for needed in (
        "pyproject.toml",
        "README.md",
        "tilewise",
        "tuner",
        "kernels",
        "api",
        "migrations",
    ):
        assert re.search(rf"COPY .*\b{re.escape(needed)}\b", text), needed
        assert f"!{needed}" in ignore or f"!{needed}/" in ignore, needed
        assert (ROOT / needed).exists(), needed


def test_dockerfile_cmd_is_a_real_command() -> None:
    (cmd,) = re.findall(r"^CMD (\[.*\])$", DOCKERFILE.read_text(), re.MULTILINE)
    argv = yaml.safe_load(cmd)
    done = _run_help(argv)
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_services_and_their_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "migrate", "api", "worker"}
    postgres = services["postgres"]
    assert postgres["image"] == "postgres:16"
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    for name in ("api", "worker"):
        assert services[name]["depends_on"] == {
            "postgres": {"condition": "service_healthy"},
            "migrate": {"condition": "service_completed_successfully"},
        }
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert services["api"]["environment"]["TILEWISE_API_TOKEN"] == "test-token"
    for name in ("migrate", "api", "worker"):
        url = services[name]["environment"]["TILEWISE_DB_URL"]
        assert url.startswith("postgresql+psycopg://") and "@postgres:5432/" in url
        assert services[name]["build"]["dockerfile"] == "docker/Dockerfile"


def test_compose_requires_an_api_token() -> None:
    binary = _docker_compose()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TILEWISE_", "POSTGRES_"))}
    done = subprocess.run(
        [binary, "-f", str(COMPOSE), "config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0 and "TILEWISE_API_TOKEN" in done.stderr


def test_every_compose_command_is_a_real_command(compose: dict[str, Any]) -> None:
    for name in ("migrate", "api", "worker"):
        argv = compose["services"][name]["command"]
        done = _run_help(argv)
        assert done.returncode == 0, f"{name}: {shlex.join(argv)}: {done.stdout}{done.stderr}"


def test_migrate_runs_the_readme_command(compose: dict[str, Any]) -> None:
    argv = compose["services"]["migrate"]["command"]
    assert argv[:3] == ["tilewise", "db", "upgrade"]
    readme = (ROOT / "README.md").read_text()
    assert "tilewise db upgrade" in readme


def test_api_serves_on_every_interface_without_local_workers(compose: dict[str, Any]) -> None:
    argv = compose["services"]["api"]["command"]
    assert argv[:2] == ["tilewise", "serve"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--workers") + 1] == "0"
    assert compose["services"]["worker"]["command"][:2] == ["tilewise", "worker"]
