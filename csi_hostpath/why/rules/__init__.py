"""The plugin's reasoning, pure (no I/O): Kubernetes objects and the driver's view in
(diagnosis.Observed), each claim's phases and the one blocking reason out (blocker.diagnose)."""
