"""`make bench`: the driver's cost against the bare tools, on real loop devices.

Not a test: it measures and reports (bench-results/bench.md and bench.json), and it fails only
when it could not measure or when it left a loop device, a mount or a file behind.
See docs/benchmarks.md for what each figure means.
"""
