"""kind: make kind-e2e, kind-up and kind-down (tools/kind-e2e.sh, tools/kind/) and the kind
walk-through (examples/, docs/kind.md) offline, and the project's own dockerd for real."""
