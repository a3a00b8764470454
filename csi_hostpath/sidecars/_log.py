"""The sidecars' one logger: the registrar and the livenessprobe log under this name."""

import logging

log = logging.getLogger("csi_hostpath.sidecars")
