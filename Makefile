# Two entry points: `make run` and `make test`. Both build .venv from the hashed lock files.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
export LITELLM_LOCAL_MODEL_COST_MAP := True
export LITELLM_OFFLINE_MODE := true

.PHONY: run test lint format lock bench clean

$(BIN)/.runtime: requirements.lock
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes --no-deps -r requirements.lock
	@! find $(VENV) -name 'litellm_init.pth' | grep -q . || (echo "litellm_init.pth found: compromised litellm" && exit 1)
	touch $@

$(BIN)/.dev: $(BIN)/.runtime requirements-dev.lock
	$(BIN)/pip install --quiet --require-hashes --no-deps -r requirements-dev.lock
	touch $@

run: $(BIN)/.runtime
	$(BIN)/python -m bot

test: $(BIN)/.dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q -p no:cacheprovider

format: $(BIN)/.dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

lock:
	uv pip compile --python-version 3.11 --generate-hashes --no-header requirements.in -o requirements.lock
	uv pip compile --python-version 3.11 --generate-hashes --no-header requirements-dev.in -o requirements-dev.lock

bench: $(BIN)/.dev
	$(BIN)/python benchmarks/turn_overhead.py
	$(BIN)/python benchmarks/consolidation.py
	$(BIN)/python benchmarks/retry_storm.py
	$(BIN)/python benchmarks/memory_recall.py
	$(BIN)/python benchmarks/groq_rate_limits.py
	$(BIN)/python benchmarks/burst.py
	$(BIN)/python benchmarks/reminders.py
	$(BIN)/python benchmarks/mcp.py

clean:
	rm -rf $(VENV)
