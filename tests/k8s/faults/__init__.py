"""Faults in the real cluster (kind): every component killed with SIGKILL in every phase of a
volume's life, a worker partitioned, powered off or rebooted under a writing pod, and a seeded
chaos run; the checks sample each node's mounts and the ledger, not only the API's objects.
`python -m tests.k8s.faults --help`; docs/reliability.md says how to run it and what it checks.
"""
