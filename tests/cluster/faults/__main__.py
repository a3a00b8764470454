import sys

from tests.cluster.faults.main import main

sys.exit(main())
