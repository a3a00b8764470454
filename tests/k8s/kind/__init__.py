"""make kind-e2e, kind-up and kind-down (tools/kind-e2e.sh, tools/kind/): offline, and the
project's own dockerd for real."""
