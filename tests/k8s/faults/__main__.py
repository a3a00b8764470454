import sys

from tests.k8s.faults.main import main

sys.exit(main())
