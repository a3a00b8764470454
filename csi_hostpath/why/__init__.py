"""`kubectl csi-hostpath why`: the kubectl plugin, a product of its own beside the driver.

rules/ reasons over Kubernetes objects and the driver's ledger view, pure; kube_access.py and
reads.py read the cluster; command.py is the console script `kubectl-csi_hostpath`."""
