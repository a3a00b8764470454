import sys

from tests.k8s.experiments.runner import main

sys.exit(main())
