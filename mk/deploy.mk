# Deploy targets: the container image, the Helm chart and a kind cluster to run them on.
# Included by the main Makefile, which defines VENV, PY and the `install` target.
#
# chart-lint and chart-test run anywhere: they use Helm's engine from the helm-python-sdk package
# and the Kubernetes schemas bundled in kubernetes-validate, offline. image and kind-deploy need
# docker, kind and helm on PATH; kind-up, kind-down, kind-e2e and kind-smoke need only root: they
# start a dockerd of the project's own where the machine has none and build kind, kubectl and helm
# from their pinned Go modules (tools/kind/, tools/cluster/build.sh).

IMAGE ?= csi-hostpath
# The image tag follows the project version, which is also the chart's appVersion.
IMAGE_TAG ?= $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml | head -n 1)
DOCKER ?= docker
KIND ?= kind
HELM ?= helm
KUBECTL ?= kubectl
CHART_DIR ?= charts/csi-hostpath
RELEASE ?= csi-hostpath
NAMESPACE ?= csi-hostpath
# Extra arguments for `helm upgrade --install`, e.g. HELM_ARGS='--set pool.scope=local'.
HELM_ARGS ?=
# The cluster name prefixes the node names (csi-hostpath-worker, ...) that examples/ use.
KIND_CLUSTER ?= csi-hostpath
KIND_CONFIG ?= examples/kind-config.yaml
# Empty: kind-up makes a node image here, without a registry (tools/kind/node-image.sh, for the
# Kubernetes KUBERNETES_VERSION selects). Where a registry can be reached, kind's own works
# too: KIND_NODE_IMAGE=kindest/node:v1.35.1.
KIND_NODE_IMAGE ?=
# The Kubernetes of the node image, the programs and the e2e suite: empty for the default of
# tools/cluster/versions.env (v1.35.4), or a release or minor with pins of its own
# (tools/cluster/pins.sh: v1.34.4). Passed on explicitly: sudo keeps no environment.
KUBERNETES_VERSION ?=
# Must match the hostPath entries of $(KIND_CONFIG): kind does not expand variables there. Under
# /var/lib, never /tmp (a tmpfs, or cleaned at boot): the pool and the ledger must outlive both.
KIND_SHARED_DIR ?= /var/lib/csi-hostpath-kind
# Creating it needs root; sudo is used only when make does not already run as root.
SUDO ?= $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# `kind load docker-image` fails against Docker Engine 29's containerd image store
# (kubernetes-sigs/kind#3795), so the image travels as an archive: docker save, then
# kind load image-archive, which works on every engine version.
IMAGE_ARCHIVE ?= $(CURDIR)/.run/$(IMAGE)-$(IMAGE_TAG).tar
KIND_ENV = KIND_CLUSTER=$(KIND_CLUSTER) KIND_CONFIG=$(KIND_CONFIG) KIND_NODE_IMAGE=$(KIND_NODE_IMAGE) \
	KIND_SHARED_DIR=$(KIND_SHARED_DIR) KUBERNETES_VERSION=$(KUBERNETES_VERSION)

# $(call need,TOOL): stop with a clear message when TOOL is not on PATH.
need = @command -v $(1) >/dev/null 2>&1 || { echo "$(1) not found: this target needs it on PATH (see docs/kind.md)" >&2; exit 1; }

.PHONY: image chart-lint chart-test chart-render kind-up kind-down kind-deploy kind-e2e kind-smoke

image:  ## build the driver image, tagged with the project version (needs docker)
	$(call need,$(DOCKER))
	$(DOCKER) build --build-arg VERSION=$(IMAGE_TAG) -t $(IMAGE):$(IMAGE_TAG) .

chart-lint: install  ## helm lint --strict the chart, offline, and validate its objects
	$(PY) -m tests.chart.chart_tool lint

# With the chart's own tests, the offline checks of the kind setup, of the kind walk-through and
# of how the project's clusters install the chart, which read it too.
CHART_TESTS := tests/chart tests/k8s/kind/test_kind_e2e.py tests/k8s/kind/test_kind_setup.py \
	tests/k8s/kind/test_kind_walkthrough.py tests/k8s/test_project_clusters.py
chart-test: install  ## render the chart under many value sets and check it (offline)
	$(PY) -m pytest -q $(CHART_TESTS)

chart-render: install  ## print the chart's manifests with default values (like helm template)
	$(PY) -m tests.chart.chart_tool render

kind-up: install  ## kind cluster of examples/kind-config.yaml with the project's images loaded (root: starts a dockerd of its own where the machine has none; prints KUBECONFIG=)
	@$(SUDO) $(KIND_ENV) PY=$(PY) bash tools/kind/up.sh

kind-down: install  ## delete the kind cluster, detach its loop devices, stop the dockerd kind-up started (the shared pool stays)
	@$(SUDO) $(KIND_ENV) PY=$(PY) bash tools/kind/down.sh

kind-deploy: image  ## load the image into kind (as an archive) and helm upgrade --install the chart
	$(call need,$(KIND))
	$(call need,$(HELM))
	mkdir -p $(dir $(IMAGE_ARCHIVE))
	$(DOCKER) save -o $(IMAGE_ARCHIVE) $(IMAGE):$(IMAGE_TAG)
	$(KIND) load image-archive $(IMAGE_ARCHIVE) --name $(KIND_CLUSTER)
	$(HELM) upgrade --install $(RELEASE) $(CHART_DIR) --namespace $(NAMESPACE) \
		--create-namespace --set driver.image.repository=$(IMAGE) \
		--set-string driver.image.tag=$(IMAGE_TAG) $(HELM_ARGS)

# Arguments for tools/kind-e2e.sh: --dry-run prints every step and runs nothing; --keep leaves the
# last cluster up; --only LETTERS, --plain LETTERS (the no-/dev shape's, abdkp), --no-plain.
E2E_ARGS ?=

kind-e2e: install  ## experiments a-q on kind, a b d k p on kind without the host's /dev, nothing left behind (root; E2E_ARGS=--dry-run)
	$(SUDO) KIND_CLUSTER=$(KIND_CLUSTER) KIND_NODE_IMAGE=$(KIND_NODE_IMAGE) \
		KUBERNETES_VERSION=$(KUBERNETES_VERSION) PY=$(PY) \
		bash tools/kind-e2e.sh $(E2E_ARGS)

# CI's proof of kind (.ci/run, after make test): the same script, fewer experiments. kind-up builds
# what the cache lacks (a cold cache too: it never skips), the chart goes in with helm as a user
# installs it, then a b d k on the project's shape and p on the plain one, kind-down, and the check
# that nothing is left on the host.
KIND_SMOKE_ARGS ?= --only abdk --plain p
kind-smoke: install  ## CI's kind check: kind-up (building what is missing), helm install, experiments a b d k (+ p plain), kind-down, nothing left (root)
	$(SUDO) KIND_CLUSTER=$(KIND_CLUSTER) KIND_NODE_IMAGE=$(KIND_NODE_IMAGE) \
		KUBERNETES_VERSION=$(KUBERNETES_VERSION) PY=$(PY) \
		bash tools/kind-e2e.sh $(KIND_SMOKE_ARGS) $(E2E_ARGS)
