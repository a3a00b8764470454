"""The store's one logger: every module of store/ and store/backing/ logs under this name."""

import logging

log = logging.getLogger("csi_hostpath.store")
