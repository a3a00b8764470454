# Reliability targets. Included by the main Makefile, which defines VENV, PY and `install`.
#
# `make test` already runs a short chaos run (10 lifecycles) with the rest of tests/e2e; `make
# chaos` is the long one: kill -9 (in the freeze window of snapshots and clones too) and state
# loss, and it prints the files lost and the filesystems left frozen (both must be 0). Both
# need root, like `make test`. See docs/reliability.md.

# How many volume lifecycles, each with one kill -9 in it.
CHAOS_LIFECYCLES ?= 200
# Empty: a new random seed, printed at the start. Set it to repeat a run's choices.
CHAOS_SEED ?=

.PHONY: chaos

chaos: install  ## kill -9 and state-loss chaos, 200 lifecycles (root); CHAOS_SEED=N repeats
	CHAOS_LIFECYCLES=$(CHAOS_LIFECYCLES) CHAOS_SEED=$(CHAOS_SEED) \
		$(PY) -m pytest -q -s tests/e2e/test_chaos.py $(PYTEST_ARGS)
