"""Runs `csi-hostpath volume ...` as a person would: a subprocess per command, its output and exit
code kept, and the --json document checked against the schema."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from csi_hostpath.volume_cli.output import SCHEMA, SCHEMA_VERSION


@dataclass
class Result:
    rc: int
    out: str
    err: str

    @property
    def doc(self) -> dict[str, Any]:
        return dict(json.loads(self.out))


@dataclass
class Cli:
    """Runs `python -m csi_hostpath volume ...` with the driver found through the environment
    ($CSI_HOSTPATH_ENDPOINT, $CSI_HOSTPATH_RUN_DIR), the way a shell session would."""

    root: Path
    env: dict[str, str]

    def __call__(self, *args: str, cwd: Path | None = None, ok: bool = True) -> Result:
        return self.command("volume", *args, cwd=cwd, ok=ok)

    def command(self, *args: str, cwd: Path | None = None, ok: bool = True) -> Result:
        """Any csi-hostpath command (`inspect`, `ledger ...`), in the same environment."""
        proc = subprocess.run(
            [sys.executable, "-m", "csi_hostpath", *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=cwd or self.root,
            timeout=120,
            check=False,
        )
        result = Result(proc.returncode, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
        if ok:
            assert result.rc == 0, f"{args}: rc {result.rc}\n{proc.stdout}\n{proc.stderr}"
        return result

    def json(self, *args: str, cwd: Path | None = None) -> Any:
        doc = self(*args, "--json", cwd=cwd).doc
        command = args[0]
        assert doc["schema"] == SCHEMA_VERSION and doc["command"] == command and doc["ok"]
        key, fields, many = SCHEMA[command]
        assert set(doc) == {"schema", "command", "ok", key}
        payload = doc[key]
        for item in payload if many else [payload]:
            assert set(item) == set(fields), f"{command}: {sorted(item)}"
        return payload
