# eagle3-quant developer commands. `make demo` and `make test` set everything up themselves.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Installed only when the venv has no torch: bring your own ROCm/CUDA torch with VENV_FLAGS=--system-site-packages
TORCH_SPEC ?= torch==2.13.0
VENV_FLAGS ?=
STAMP := $(VENV)/.eagle3-quant-installed
# vLLM's own code for the vllm_load check: --no-deps over .venv (never replaces torch/transformers)
VLLM_STAMP := $(VENV)/.eagle3-quant-vllm-installed
DEMO_DIR ?= demo-out

.PHONY: setup setup-vllm test test-fast lint demo bench bench-vllm clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): $(STAMP) requirements-vllm.txt
	$(BIN)/pip install -q --no-deps -r requirements-vllm.txt
	touch $(VLLM_STAMP)

test: setup setup-vllm
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

lint: setup
	$(BIN)/ruff check .

demo: setup
	$(BIN)/python -m fixtures.demo $(DEMO_DIR)

bench: setup
	$(BIN)/python -m bench

bench-vllm: setup setup-vllm
	$(BIN)/python -m bench.vllm_load

clean:
	rm -rf $(DEMO_DIR) .pytest_cache .ruff_cache
