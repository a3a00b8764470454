import sys

from tests.cluster.e2e.runner import main

sys.exit(main())
