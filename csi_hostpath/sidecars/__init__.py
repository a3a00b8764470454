"""The node plugin's kubelet-facing sidecars, served by the driver's own image.

`csi-hostpath registrar` (registrar.py) does what node-driver-registrar does, and
`csi-hostpath livenessprobe` (livenessprobe.py) what livenessprobe does: the Go module proxy this
project builds from serves neither, so the chart runs these by default. Their flags (flags.py)
keep upstream's names. Neither imports a service: they only speak gRPC to the driver's socket and
to the kubelet.
"""
