# Kubernetes' external storage e2e suite against the driver, on kind (tools/cluster/k8s-e2e.sh;
# docs/conformance.md). Needs root. Included by the main Makefile.

# ginkgo processes: two cores run about three specs at a time before the waits grow long.
K8S_E2E_PROCS ?= 3
K8S_E2E_TIMEOUT ?= 150m
# 1: only the [Disruptive] specs, serially.
K8S_E2E_DISRUPTIVE ?= 0
# 1: leave the cluster up at the end.
K8S_E2E_KEEP ?= 0
# Extra arguments for the script, e.g. K8S_E2E_ARGS=--dry-run.
K8S_E2E_ARGS ?=

.PHONY: k8s-e2e k8s-bench

k8s-e2e: install  ## the Kubernetes external storage e2e suite on kind: up, chart, suite, junit + summary, down (root)
	@K8S_E2E_PROCS=$(K8S_E2E_PROCS) K8S_E2E_TIMEOUT=$(K8S_E2E_TIMEOUT) \
		K8S_E2E_DISRUPTIVE=$(K8S_E2E_DISRUPTIVE) K8S_E2E_KEEP=$(K8S_E2E_KEEP) PY=$(CURDIR)/$(PY) \
		KIND_CLUSTER=$(KIND_CLUSTER) KUBERNETES_VERSION=$(KUBERNETES_VERSION) \
		bash tools/cluster/k8s-e2e.sh $(K8S_E2E_ARGS)

# How many times k8s-bench repeats its set of measurements.
K8S_BENCH_ROUNDS ?= 1

k8s-bench: install  ## in-cluster latency of the driver on kind: claim -> pod Running (20 in a row, 20 at once), snapshot -> restored Bound (root)
	@K8S_E2E_KEEP=$(K8S_E2E_KEEP) K8S_BENCH_ROUNDS=$(K8S_BENCH_ROUNDS) \
		K8S_E2E_LOCAL=0 PY=$(CURDIR)/$(PY) KIND_CLUSTER=$(KIND_CLUSTER) \
		KUBERNETES_VERSION=$(KUBERNETES_VERSION) \
		bash tools/cluster/k8s-e2e.sh --bench $(K8S_E2E_ARGS)
