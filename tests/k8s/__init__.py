"""Everything that needs a Kubernetes cluster, or makes, drives or checks one, with the offline
checks of each: cluster/ (the cluster from binaries, tools/cluster/), kind/ (make kind-e2e,
tools/kind/), images/ (the images those clusters run), experiments/ (make cluster-e2e, run as
`python -m tests.k8s.experiments`), storage_e2e/ (Kubernetes' external storage e2e suite, make
k8s-e2e), and test_project_clusters.py (how each of them installs the chart).

The tests that need a live cluster, a dockerd or a containerd are marked `real`; the live cluster's
run only when asked (CLUSTER_TESTS=1, make cluster-test). The models of Kubernetes that need no
cluster are the e2e harness's (tests/e2e/k8s_models/)."""
