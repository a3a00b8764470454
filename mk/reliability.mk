# Reliability targets. Included by the main Makefile, which defines VENV, PY and `install`.
#
# `make test` already runs a short chaos run (20 lifecycles) with the rest of tests/e2e; `make
# chaos` is the long one. Both need root, like `make test`. See docs/reliability.md.

# How many volume lifecycles, each with one kill -9 in it.
CHAOS_LIFECYCLES ?= 200
# Empty: a new random seed, printed at the start. Set it to repeat a run's choices.
CHAOS_SEED ?=

.PHONY: chaos

chaos: install  ## kill -9 chaos, 200 volume lifecycles (root); CHAOS_SEED=N repeats a run
	CHAOS_LIFECYCLES=$(CHAOS_LIFECYCLES) CHAOS_SEED=$(CHAOS_SEED) \
		$(PY) -m pytest -q -s tests/e2e/test_chaos.py $(PYTEST_ARGS)
