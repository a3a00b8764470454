# Benchmark targets. Included by the main Makefile, which defines VENV, PY and `install`.
#
# `make bench` needs root (it attaches loop devices and mounts filesystems), like `make test`.
# It is a measurement, not a test: it exits non-zero only when a section could not run or when
# something was left behind (a loop device, a mount or a file). See docs/benchmarks.md.

BENCH_OUT ?= bench-results
# Extra arguments for python -m bench, e.g. BENCH_ARGS='--samples 100 --volumes 200'.
BENCH_ARGS ?=
# One section (or several, comma-separated) alone, e.g. SECTION=scale; default all.
SECTION ?=
# The workload bench-profile samples: ext4, xfs, block (lifecycles), ledger, or scale (the node
# calls with 500 ext4 volumes staged beside them).
SCENARIO ?= ext4

.PHONY: bench bench-profile

bench: install  ## run the benchmark suite (root): writes bench-results/bench.md and bench.json
	$(PY) -m bench --out $(BENCH_OUT) $(if $(SECTION),--only $(SECTION)) $(BENCH_ARGS)

bench-profile: install  ## py-spy profile of the plugin under one workload (SCENARIO=ext4|xfs|block|ledger|scale)
	$(PY) -m pip install -q py-spy
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m bench.profile $(SCENARIO)
