"""The experiments of docs/kind.md, run against a kind cluster (make kind-e2e), checked the way a
user checks them (the API's objects, events, pod logs, the driver's own ledger CLI).

One module per group of experiments; `runner` picks, orders, times and tabulates them.
"""
