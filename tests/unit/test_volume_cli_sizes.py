"""Sizes as people write them on the command line.

Sizes as people write them on the command line: a decimal unit where a binary one was meant,
and a fraction of a binary unit."""

from __future__ import annotations

from csi_hostpath.volume_cli.args import typed_size
from csi_hostpath.volume_cli.commands_volume import _rounded

MiB = 1 << 20


def test_a_rounding_never_says_the_same_figure_twice_and_names_the_decimal_unit() -> None:
    asked = typed_size("10G")
    got = -(-asked // MiB) * MiB
    said = _rounded(asked, got, "ext4")
    assert "9536.7Mi (10000000000 bytes): rounded up to 9537Mi (10000269312 bytes)" in said, said
    assert "G is decimal (10^9 bytes)" in said and "10Gi" in said, said


def test_a_fraction_of_a_unit_is_rounded_up_to_a_whole_byte_as_kubernetes_does() -> None:
    assert typed_size("1.6Gi") == 1717986919  # 1.6 x 2^30 is 1717986918.4
    asked = typed_size("1.6Gi")
    said = _rounded(asked, 1639 * MiB, "ext4")
    assert "1638.4Mi (1717986919 bytes): rounded up to 1639Mi" in said, said
