"""Facts the user-facing documents state, each checked against its source.

Facts the user-facing documents state that live elsewhere: each is checked against its source,
so a change there shows here. (The README's console session has its own test, run on a real
driver: tests/real/test_readme_session.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def test_the_readme_gives_the_charts_minimum_kubernetes() -> None:
    chart = yaml.safe_load((REPO / "charts" / "csi-hostpath" / "Chart.yaml").read_text())
    minimum = re.fullmatch(r">=(\d+)\.(\d+)\.0-0", chart["kubeVersion"])
    assert minimum is not None, chart["kubeVersion"]
    major, minor = minimum.groups()
    assert f"needs Kubernetes {major}.{minor} or later" in README
    assert f"`{chart['kubeVersion']}`" in README


def test_the_readme_says_make_test_runs_the_real_csi_sanity_and_where_it_comes_from() -> None:
    assert "our own equivalent" not in README
    assert "runs\nthe real csi-sanity" in README or "runs the real csi-sanity" in README
    pins = (REPO / "tools" / "go-tools.txt").read_text()
    assert "csi-sanity" in pins and "tools/go-tools.txt" in README and "make go-tools" in README


def test_the_readme_runs_in_any_shell() -> None:
    # `kill %1` needs an interactive shell's job control; a script has none.
    assert not re.search(r"kill %\d", README)


def test_operations_cites_nothing_a_user_cannot_read() -> None:
    text = (REPO / "docs" / "operations.md").read_text()
    assert not re.search(r"\bseed \d+\b", text)  # a test-round document no user has
