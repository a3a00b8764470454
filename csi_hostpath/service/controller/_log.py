"""The controller's one logger: every module of service/controller/ logs under this name."""

import logging

log = logging.getLogger("csi_hostpath.service.controller")
