"""What every command works with: where things are, the records, the output, and a driver
connection opened on first use (so a usage error never waits for a socket)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from csi_hostpath.volume_cli.args import Places
from csi_hostpath.volume_cli.cli_errors import CliError
from csi_hostpath.volume_cli.client import DriverClient
from csi_hostpath.volume_cli.exit_codes import NOT_FOUND
from csi_hostpath.volume_cli.output import Output
from csi_hostpath.volume_cli.records import CSI_NAME_PREFIX, Records, RecordsFile, VolumeRecord


@dataclass
class Context:
    places: Places
    out: Output
    records: RecordsFile = field(init=False)
    _driver: DriverClient | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.records = RecordsFile(self.places.records_dir)

    @property
    def driver(self) -> DriverClient:
        if self._driver is None:
            self._driver = DriverClient(self.places.endpoint, self.places.guessed)
        return self._driver

    def close(self) -> None:
        if self._driver is not None:
            self._driver.close()

    def csi_name(self, name: str) -> str:
        """The CreateVolume/CreateSnapshot name: the idempotency key, so a retry after a lost
        answer (or lost records) gets the same volume back instead of a second one."""
        return CSI_NAME_PREFIX + name


def volume_named(records: Records, name: str) -> VolumeRecord:
    vol = records.volumes.get(name)
    if vol is None:
        hint = " (that is a snapshot)" if name in records.snapshots else ""
        raise CliError(
            NOT_FOUND,
            f"no volume named {name!r}{hint}",
            "see `csi-hostpath volume list`; create it with `csi-hostpath volume create "
            f"{name} --size 1Gi`",
        )
    return vol


def absolute(path: str) -> str:
    """The path as the kernel will show it in mountinfo: absolute, symlinks resolved."""
    return os.path.realpath(os.path.abspath(path))
