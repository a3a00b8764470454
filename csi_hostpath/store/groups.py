"""Volume group snapshots, one record each in the pool (POOL/groups/<group-id>.json).

The members are ordinary snapshots (files and rows like any other); the record says which
snapshots form the group. It is written before the first member is cut (complete=false), so a
retry after a crash finds the group by name and finishes it, and rewritten when all are cut."""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path

from csi_hostpath.store.pool_layout import write_atomically

GROUP_ID_PATTERN = re.compile(r"group-[0-9a-f]{32}")


def new_group_id() -> str:
    return f"group-{secrets.token_hex(16)}"


def is_group_id(value: str) -> bool:
    return GROUP_ID_PATTERN.fullmatch(value) is not None


@dataclass
class GroupRecord:
    group_id: str
    name: str
    source_volume_ids: list[str]
    created_at: float
    # source volume → its member snapshot, filled in as each is cut
    members: dict[str, str] = field(default_factory=dict)
    complete: bool = False

    @property
    def snapshot_ids(self) -> list[str]:
        return [self.members[v] for v in self.source_volume_ids if v in self.members]


class GroupRecords:
    def __init__(self, pool_root: Path) -> None:
        self.root = pool_root / "groups"

    def _path(self, group_id: str) -> Path:
        if not is_group_id(group_id):
            raise ValueError(f"not a group snapshot ID: {group_id!r}")
        return self.root / f"{group_id}.json"

    def get(self, group_id: str) -> GroupRecord | None:
        if not is_group_id(group_id):
            return None
        try:
            data = json.loads(self._path(group_id).read_text())
        except (FileNotFoundError, ValueError):
            return None
        return GroupRecord(**data)

    def all(self) -> list[GroupRecord]:
        found = []
        for path in sorted(self.root.glob("group-*.json")):
            record = self.get(path.stem)
            if record is not None:
                found.append(record)
        return found

    def by_name(self, name: str) -> GroupRecord | None:
        return next((g for g in self.all() if g.name == name), None)

    def group_of(self, snapshot_id: str) -> str:
        """The group a snapshot belongs to, or ''."""
        return self.member_index().get(snapshot_id, "")

    def member_index(self) -> dict[str, str]:
        """Every member snapshot → its group, read once for a whole listing."""
        return {s: g.group_id for g in self.all() for s in g.members.values()}

    def save(self, record: GroupRecord) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        write_atomically(self._path(record.group_id), json.dumps(asdict(record)).encode())

    def remove(self, group_id: str) -> None:
        if is_group_id(group_id):
            self._path(group_id).unlink(missing_ok=True)
