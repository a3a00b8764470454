"""Every test in this folder runs on real loop devices, mounts and filesystems (root): each is
marked `real` here, once, so `make unit` (-m 'not real') leaves them out and the workdir fixture
gives them the thorough kernel cleanup. Tests that run on both system layers (the fake one and
the real one, through a parametrized fixture) live outside this folder and mark their real half."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


# Before the mark plugin's own hook: `-m real` / `-m 'not real'` select on this mark.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.real)
