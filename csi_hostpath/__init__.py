"""csi_hostpath: a CSI driver whose volumes are sparse files on loop devices."""

__version__ = "0.1.0"
