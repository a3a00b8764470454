"""The package's own metadata, built by its build backend as `make install` builds it: no
deprecation warning on every install (the license as a TOML table printed one four times on a
first `make run`), and the license where packaging tools read it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# setuptools reads an SPDX string in project.license from this release on (PEP 639).
SPDX_SETUPTOOLS = (77, 0)


def _setuptools_version() -> tuple[int, ...]:
    import setuptools

    return tuple(int(p) for p in setuptools.__version__.split(".")[:2] if p.isdigit())


def test_the_metadata_builds_without_a_deprecation_warning(tmp_path: Path) -> None:
    if _setuptools_version() < SPDX_SETUPTOOLS:
        pytest.skip(f"setuptools {_setuptools_version()} predates SPDX license strings")
    # A copy of what the backend reads, so nothing is written into the checkout.
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    shutil.copy(REPO / "README.md", tmp_path)
    (tmp_path / "csi_hostpath").mkdir()
    shutil.copy(REPO / "csi_hostpath" / "__init__.py", tmp_path / "csi_hostpath")
    (tmp_path / "out").mkdir()
    built = subprocess.run(
        [
            sys.executable,
            "-W",
            "always",
            "-c",
            "from setuptools import build_meta; "
            "print(build_meta.prepare_metadata_for_build_wheel('out'))",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "deprecated" not in built.stderr.lower(), built.stderr
    metadata = (tmp_path / "out" / built.stdout.split()[-1] / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()


def test_the_build_requires_a_setuptools_that_reads_the_license() -> None:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in project["build-system"]["requires"]
