# Two entry points: `make run` and `make test`. Both build .venv from the hashed lock files.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
export LITELLM_LOCAL_MODEL_COST_MAP := True
export LITELLM_OFFLINE_MODE := true

.PHONY: run test lint format lock bench clean

# The project installs itself into its venv (editable, built by the locked setuptools), so
# `python -m bot` and scripts import it like any package from any folder. Child processes
# do not rely on it: they are told their parent's tree (primitives/interpreter.py).
$(BIN)/.runtime: requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes --no-deps -r requirements.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	@! find $(VENV) -name 'litellm_init.pth' | grep -q . || (echo "litellm_init.pth found: compromised litellm" && exit 1)
	touch $@

$(BIN)/.dev: $(BIN)/.runtime requirements-dev.lock
	$(BIN)/pip install --quiet --require-hashes --no-deps -r requirements-dev.lock
	touch $@

run: $(BIN)/.runtime
	$(BIN)/python -m bot

# Two test processes (pytest-xdist): most tests wait on bots, streams and restarts rather than
# compute, so two fill the 2 cores of CI. Each process has its own loop, shared provider
# workers and temporary folders (tests/support/shared_workers.py); no test takes a fixed port.
test: $(BIN)/.dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2

format: $(BIN)/.dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

lock:
	uv pip compile --python-version 3.11 --generate-hashes --no-header requirements.in -o requirements.lock
	uv pip compile --python-version 3.11 --generate-hashes --no-header requirements-dev.in -o requirements-dev.lock

# Run from the root as modules: the benchmarks import the test fakes (tests/) of this tree.
bench: $(BIN)/.dev
	$(BIN)/python -m benchmarks.turn_overhead
	$(BIN)/python -m benchmarks.consolidation
	$(BIN)/python -m benchmarks.retry_storm
	$(BIN)/python -m benchmarks.memory_recall
	$(BIN)/python -m benchmarks.groq_rate_limits
	$(BIN)/python -m benchmarks.burst
	$(BIN)/python -m benchmarks.reminders
	$(BIN)/python -m benchmarks.mcp

clean:
	rm -rf $(VENV)
