"""A model of the Kubernetes parts that place node-local volumes on many machines: the
distributed external-provisioner (with its capacity controller) and the kube-scheduler's
VolumeBinding capacity filter. Each module names the upstream file and function it follows; the
API objects are the attach model's own (tests/e2e/k8s_models/objects.py)."""
