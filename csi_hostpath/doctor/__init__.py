"""`csi-hostpath doctor`: every check of a node the driver needs, each finding with its fix."""

from csi_hostpath.doctor.finding import Finding
from csi_hostpath.doctor.report import diagnose, exit_code, render

__all__ = ["Finding", "diagnose", "exit_code", "render"]
