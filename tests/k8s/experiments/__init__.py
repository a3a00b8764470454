"""`make cluster-e2e`: the experiments of docs/kind.md run against a real cluster, checked the way
a user checks them (the API's objects, events, pod logs, the driver's own ledger CLI).

The cluster from binaries (tools/cluster/) by default; any kubeconfig (kind, a real cluster) with
`--kubeconfig FILE --no-cluster`. One module per group of experiments; `runner` picks, orders,
times and tabulates them.
"""
