import sys

from csi_hostpath.cli import main

sys.exit(main())
