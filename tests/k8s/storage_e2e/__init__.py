"""Kubernetes' external storage e2e suite against the driver: its test-driver files, the chart
values of its run, and the summary of a run's report (make k8s-e2e, tools/cluster/k8s-e2e.sh)."""
