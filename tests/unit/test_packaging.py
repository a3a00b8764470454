"""The package's own metadata, built as `make install` builds it, without warnings.

The package's own metadata, built by its build backend as `make install` builds it: no
deprecation warning on every install (the license as a TOML table printed one four times on a
first `make run`), and the license where packaging tools read it. `make install` drops the one
notice setuptools prints on every editable install, and nothing else."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# setuptools reads an SPDX string in project.license from this release on (PEP 639).
SPDX_SETUPTOOLS = (77, 0)
# What pip passes on from setuptools' editable_wheel (an InformationOnly warning, which pip shows as
# a BuildBackendWarning even under -q): the title, then the body.
EDITABLE_NOTICE = (
    "Editable installation.\n!!\n\n  Please be careful with folders in your working directory "
    "with the same\n  name as your package as they may take precedence during imports.\n!!"
)
# Any other warning of the build must still show.
OTHER_BUILD_WARNING = (
    "Compat editable installs\n!!\n\n  The 'compat' editable mode is transitional and will be "
    "removed\n!!"
)


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


def _editable_install_recipe(tmp_path: Path) -> list[str]:
    """The command `make install` runs to install the package, as `make -n` prints it."""
    dry = subprocess.run(
        ["make", "-n", "-C", str(REPO), "install", f"VENV={tmp_path / 'venv'}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    [line] = [cmd for cmd in dry.stdout.splitlines() if "pip install" in cmd and " -e " in cmd]
    return shlex.split(line)


def test_make_install_drops_the_editable_notice_and_shows_every_other_warning(
    tmp_path: Path,
) -> None:
    argv = _editable_install_recipe(tmp_path)
    interpreter_flags = argv[1 : argv.index("-m")]
    # pip re-raises the backend's warnings in its own process (pyproject_hooks' warn_explicit):
    # the interpreter's flags are what filters them.
    shown = subprocess.run(
        [
            sys.executable,
            *interpreter_flags,
            "-c",
            "import sys, warnings\n"
            "from pip._vendor.pyproject_hooks import BuildBackendWarning\n"
            "for text in sys.argv[1:]:\n"
            "    warnings.warn_explicit(text, BuildBackendWarning, 'editable_wheel.py', 354)\n",
            EDITABLE_NOTICE,
            OTHER_BUILD_WARNING,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stderr
    assert "Please be careful with folders" not in shown, shown
    assert "Compat editable installs" in shown, shown
