"""The api layer's one logger: every servicer module logs under this name. The one line per RPC
keeps a name of its own, csi_hostpath.rpc (rpc_log.py), so it can be filtered apart."""

import logging

log = logging.getLogger("csi_hostpath.api")
