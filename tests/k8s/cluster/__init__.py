"""The cluster from binaries (tools/cluster/): its build pins, its scripts offline, and the real
cluster (CLUSTER_TESTS=1, make cluster-test)."""
