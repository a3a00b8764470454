# The real cluster from binaries on this machine (tools/cluster/, docs/kind.md): Kubernetes'
# control plane as host processes and two nodes, each in its own namespaces with its own
# containerd, kubelet and kube-proxy. Needs root. Included by the main Makefile.
# CLUSTER_NAME=NAME (make cluster-up CLUSTER_NAME=e2e): a cluster of that name, beside the
# default one; unset, the default cluster.

.PHONY: cluster-up cluster-down

cluster-up:  ## bring up the real two-node cluster (root; CLUSTER_NAME=NAME for another beside it); prints its kubeconfig
	@CLUSTER_NAME=$(CLUSTER_NAME) bash tools/cluster/up.sh

cluster-down:  ## end every process, mount, loop device and network device the cluster made (root; CLUSTER_NAME=NAME: that one's only)
	@CLUSTER_NAME=$(CLUSTER_NAME) bash tools/cluster/down.sh

.PHONY: cluster-test
cluster-test: install  ## the real cluster's own tests: up, two Ready nodes, isolation, down leaves nothing, a second cluster beside the first (root)
	CLUSTER_TESTS=1 $(PY) -m pytest -q -m real tests/k8s/cluster $(PYTEST_ARGS)

# Arguments for the experiments' runner (python -m tests.k8s.experiments --help): --only LETTERS,
# --skip LETTERS, --keep (leave the cluster up), --no-build; against another cluster (kind):
# CLUSTER_E2E_ARGS='--kubeconfig FILE --kind' (no build, no up, no down).
CLUSTER_E2E_ARGS ?=

.PHONY: cluster-e2e
cluster-e2e: install  ## build what is missing, cluster up, snapshot support + helm install, experiments a-l, table, cluster down (root)
	CLUSTER_NAME=$(CLUSTER_NAME) $(PY) -m tests.k8s.experiments $(CLUSTER_E2E_ARGS)
