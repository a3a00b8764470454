"""The system layer's one logger for its shared modules (runner, iolimits); system/linux/ has its
own."""

import logging

log = logging.getLogger("csi_hostpath.system")
