"""csi-sanity conformance: the real binary (test_csi_sanity.py), and every case the upstream suite
(kubernetes-csi/csi-test, pkg/sanity) runs, re-implemented in Python, one file per CSI service
(test_sanity_<service>*.py: the controller's cases in five files, the node's in two).

The Python cases run against a real `csi-hostpath serve` process, and in process on the fake
layer, under csi-sanity's default configuration: 10 GiB volumes (sparse, so cheap), a
SINGLE_NODE_WRITER mount capability with no fs_type, one endpoint serving every service, made-up
IDs from csi-sanity's ID generator, a fresh target and staging directory per test, and
csi-sanity's cleanup after each one. Each test's docstring gives its case's Describe/It path in
csi-sanity; a case csi-sanity skips when the driver does not advertise a capability is skipped here
the same way. See docs/conformance.md for why, and for the case-by-case mapping."""
