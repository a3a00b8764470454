"""The Linux system layer's one logger: every module of system/linux/ logs under this name."""

import logging

log = logging.getLogger("csi_hostpath.system.linux")
