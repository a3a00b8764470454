"""End-to-end tests: the Kubernetes roles (provisioner, attacher, kubelet) driving real driver
processes, one controller and several node plugins in their own mount namespaces."""
