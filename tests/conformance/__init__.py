"""csi-sanity-equivalent conformance tests: every case the upstream csi-sanity suite
(kubernetes-csi/csi-test, pkg/sanity) runs, re-implemented in Python against a real driver.
See docs/conformance.md for why, and for the case-by-case mapping."""
