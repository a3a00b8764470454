"""The mountinfo parser of the real implementation, on text: no kernel, no root."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from csi_hostpath.system.linux import parse_mountinfo, topmost, unescape_mountinfo

_MOUNTINFO = (
    "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
    "30 27 7:3 / /var/lib/kubelet/plugins/x/globalmount rw,relatime shared:12 master:1"
    " - ext4 /dev/loop3 rw\n"
    "31 27 7:3 /sub /pods/with\\040space\\011tab\\134slash ro,nosuid,nodev,relatime"
    " - ext4 /dev/loop3 rw\n"
    "40 27 0:6 /loop3 /pods/block rw - devtmpfs devtmpfs rw,size=1k\n"
    "41 40 0:50 / /pods/block rw - tmpfs tmp\\040fs rw\n"
    "garbage line\n"
)


def test_parse_mountinfo_fields() -> None:
    records = parse_mountinfo(_MOUNTINFO)
    assert [r.mount_id for r in records] == [22, 30, 31, 40, 41]
    staged = records[1].entry
    assert staged.mount_point == "/var/lib/kubelet/plugins/x/globalmount"
    assert (staged.fs_type, staged.source, staged.device_number) == ("ext4", "/dev/loop3", "7:3")
    assert staged.options == ("rw", "relatime")
    bound = records[2].entry
    assert bound.mount_point == "/pods/with space\ttab\\slash"
    assert bound.root == "/sub"
    assert bound.options == ("ro", "nosuid", "nodev", "relatime")
    assert records[4].entry.source == "tmp fs"


def test_topmost_follows_parent_ids_not_just_order() -> None:
    records = parse_mountinfo(_MOUNTINFO)
    top = topmost(records, "/pods/block")
    assert top is not None
    assert top.fs_type == "tmpfs"
    # Listed in the other order, the mount on top is still the one nothing sits on.
    reordered = topmost(list(reversed(records)), "/pods/block")
    assert reordered == top
    assert topmost(records, "/nowhere") is None


def _kernel_escape(text: str) -> str:
    # What the kernel's seq_path does to the characters that would break the line format.
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in text)


@given(st.text(alphabet=st.characters(codec="utf-8"), min_size=1))
def test_unescape_inverts_the_kernel_escape(text: str) -> None:
    assert unescape_mountinfo(_kernel_escape(text)) == text


@given(st.text(alphabet=st.sampled_from("ab/ \t\\\n"), min_size=1).map(lambda t: "/" + t))
def test_parse_round_trips_escaped_mount_points(path: str) -> None:
    line = f"100 1 7:1 / {_kernel_escape(path)} rw,relatime shared:1 - ext4 /dev/loop1 rw\n"
    (record,) = parse_mountinfo(line)
    assert record.entry.mount_point == path
