"""`csi-hostpath volume`: local volumes without Kubernetes, through the driver's own CSI calls
in the order Kubernetes makes them, so the ledger, fencing and audit apply unchanged.

args.py (arguments, default places), client.py (the CSI connection), records.py (names → IDs,
mounts), output.py (human and --json output, the schema), exit_codes.py (the exit codes),
cli_errors.py (a failure's message, next step and exit code),
commands_*.py (the subcommands; who keeps a path busy comes from system/holders.py), main.py
(runs one). This file imports nothing, so `csi-hostpath --help` and the ledger commands don't
pay for grpc."""
