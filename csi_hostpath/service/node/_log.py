"""The node plugin's one logger: every module of service/node/ logs under this name."""

import logging

log = logging.getLogger("csi_hostpath.service.node")
