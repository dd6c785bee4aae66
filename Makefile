# eagle3-quant developer commands. `make demo` and `make test` set everything up themselves.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Installed only when the venv has no torch: bring your own ROCm/CUDA torch with VENV_FLAGS=--system-site-packages
TORCH_SPEC ?= torch==2.13.0
VENV_FLAGS ?=
STAMP := $(VENV)/.eagle3-quant-installed
DEMO_DIR ?= demo-out

.PHONY: setup test test-fast lint demo bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

test: setup
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

lint: setup
	$(BIN)/ruff check .

demo: setup
	$(BIN)/python -m fixtures.demo $(DEMO_DIR)

bench: setup
	$(BIN)/python -m bench

clean:
	rm -rf $(DEMO_DIR) .pytest_cache .ruff_cache
