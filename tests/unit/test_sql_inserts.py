"""Every INSERT in the package names its columns.

Every INSERT in the package names its columns, so a column added by a migration never shifts
a value into the wrong place. The one positional INSERT left
(store/backing/adopt_pool.py, a restored hold) failed this test on the old code."""

from __future__ import annotations

import re
from pathlib import Path

import csi_hostpath

PACKAGE = Path(csi_hostpath.__file__).parent
# INSERT [OR IGNORE|REPLACE|...] INTO table VALUES: no column list between the table and VALUES.
POSITIONAL = re.compile(r"INSERT\s+(?:OR\s+\w+\s+)?INTO\s+\w+\s+VALUES", re.IGNORECASE)


def test_every_insert_names_its_columns() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}: {match.group(0)}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "_pb" not in path.parts
        for match in POSITIONAL.finditer(path.read_text())
    ]
    assert found == []
