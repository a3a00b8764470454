"""Everything that needs a Kubernetes cluster, or makes, drives or checks one, with the offline
checks of each: kind/ (make kind-up, make kind-e2e, tools/kind/), images/ (the programs and images
the kind cluster runs, tools/cluster/build.sh and images.sh), experiments/ (run by make kind-e2e as
`python -m tests.k8s.experiments`), faults/ (the fault harness on kind), storage_e2e/ (Kubernetes'
external storage e2e suite, make k8s-e2e), and test_project_clusters.py (how each of them installs
the chart).

The tests that need a dockerd or a containerd are marked `real`. The models of Kubernetes that
need no cluster are the e2e harness's (tests/e2e/k8s_models/)."""
