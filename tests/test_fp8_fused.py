"""The fused per-token FP8 quantization: the Triton kernel gives the bits of ``fp8.quantize_per_token`` (checked with
Triton's interpreter on CPU tensors), and only a GPU tensor ever takes a fused way."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from eagle3_quant.runtime import fp8, fp8_fused
from eagle3_quant.runtime.fp8_linear import Fp8Linear

# Runs in a child: TRITON_INTERPRET must be set before triton is imported. Prints the cases whose bits differ.
INTERPRETED = r"""
import json, torch
from eagle3_quant.runtime import fp8
from eagle3_quant.runtime.fp8_triton import quantize_per_token, inverse_fp32

def gpu_reference(x, dtype):
    # torch on CUDA/ROCm divides by a Python scalar as a multiply by its fp32 reciprocal; the rest is the same
    top = fp8.fp8_max(dtype)
    rowmax = x.abs().amax(dim=-1, keepdim=True).to(torch.float32)
    scale = (rowmax * inverse_fp32(top)).clamp(min=1.0 / (top * 512.0))
    return fp8.quantize_with_scale(x, scale, dtype), scale

def bits(q, scale):
    return q.view(torch.uint8), scale.view(torch.int32)

def grid_row(dtype):
    # every FP8 value, the midpoints between neighbours and one fp32 ulp either side; the row's max is the top,
    # so the scale is exactly 1 (CPU division) and each value reaches the rounding as it is
    top = fp8.fp8_max(dtype)
    grid = torch.arange(256, dtype=torch.uint8).view(dtype).float()
    grid = grid[torch.isfinite(grid) & (grid.abs() <= top)].unique().sort().values
    mids = (grid[1:] + grid[:-1]) / 2
    near = [torch.nextafter(v, v + s) for v in (grid, mids) for s in (1, -1)]
    tiny = torch.tensor([-0.0, 1e-30, -1e-30, 1e-40, -1e-40])
    return torch.cat([grid, mids, *near, tiny, torch.tensor([top])]).clamp(-top, top).reshape(1, -1)

gen = torch.Generator().manual_seed(0)
cases = []
for dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
    cases.append(("grid", dtype, grid_row(dtype)))
    for xdtype in (torch.float32, torch.bfloat16, torch.float16):
        for m, k in ((1, 16), (3, 100), (4, 1), (2, 4095), (2, 5000)):     # 5000 > one block: the row loops
            x = torch.randn(m, k, generator=gen) * torch.logspace(-6, 3, m).reshape(-1, 1)
            if m > 1:
                x[0] = 0.0                                                  # a zero row among others
            cases.append((f"randn {m}x{k}", dtype, x.to(xdtype)))
        cases.append(("zero rows", dtype, torch.zeros(3, 48, dtype=xdtype)))
        cases.append(("no rows", dtype, torch.zeros(0, 48, dtype=xdtype)))
    huge = torch.tensor([[3e38, -1e38, 1.0, 0.0], [65504.0, -65504.0, 3.0, -0.0], [1e-38, -1e-39, 0.0, 2e-45]])
    cases += [("huge fp32", dtype, huge), ("huge bf16", dtype, huge.to(torch.bfloat16)),
              ("huge fp16", dtype, huge[1:2].half()),
              ("inf and nan", dtype, torch.tensor([[float("inf"), 1.0, -2.0], [float("nan"), 1.0, -1.0]]))]
failures = []
for name, dtype, x in cases:
    for reciprocal, reference in ((False, fp8.quantize_per_token), (True, gpu_reference)):
        want = bits(*reference(x, dtype))
        got = bits(*quantize_per_token(x, dtype, reciprocal=reciprocal))
        if not all(torch.equal(a, b) for a, b in zip(want, got)):
            failures.append(f"{name} {x.dtype} -> {dtype} reciprocal={reciprocal}")
print(json.dumps({"cases": len(cases), "failures": failures}))
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed here: the kernel's "
                    "numerics are checked where it is (make setup-sglang installs it)")
def test_the_triton_kernel_gives_the_bits_of_the_eager_function(tmp_path):
    version = tuple(int(part) for part in importlib.metadata.version("triton").split(".")[:2])
    if version < (3, 9):   # seen with 3.6 (torch 2.11's) and numpy 2: `range(0, K, BLOCK)` fails in the interpreter
        pytest.skip(f"triton {version}'s interpreter cannot loop to a runtime bound under this numpy; the kernel's "
                    "numerics are checked with triton >= 3.9")
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    done = subprocess.run([sys.executable, "-c", INTERPRETED], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["cases"] > 40 and result["failures"] == []


def test_only_a_gpu_tensor_takes_a_fused_way(monkeypatch):
    for device in ("cpu", "meta", torch.device("cpu")):
        assert fp8_fused.quant_method(device) == "eager"
    monkeypatch.setattr(fp8_fused, "_available", lambda method: method == "triton")
    assert fp8_fused.quant_method("cuda:0") == "triton"
    monkeypatch.setattr(fp8_fused, "_available", lambda method: method == "torch.compile")
    assert fp8_fused.quant_method("cuda") == "torch.compile"
    monkeypatch.setattr(fp8_fused, "_available", lambda method: False)
    assert fp8_fused.quant_method("cuda:1") == "eager"


def test_a_cpu_tensor_runs_the_eager_function_and_never_a_kernel(monkeypatch):
    def no_kernel(*args):
        raise AssertionError("a fused way ran for a CPU tensor")

    monkeypatch.setattr(fp8_fused, "_run", no_kernel)
    x = torch.randn(5, 96, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    for dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        q, scale = fp8_fused.quantize_per_token(x, dtype)
        want_q, want_scale = fp8.quantize_per_token(x, dtype)
        assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8)) and torch.equal(scale, want_scale)
    weight, weight_scale = fp8.quantize_weight_per_channel(torch.randn(32, 96))
    out = Fp8Linear(weight, weight_scale)(x)
    a, scale_a = fp8.quantize_per_token(x)
    assert torch.equal(out, fp8.fp8_linear(a, scale_a, weight, weight_scale))


def test_a_static_input_scale_never_takes_the_per_token_way(monkeypatch):
    def per_token(*args, **kwargs):
        raise AssertionError("per-token quantization ran for a static input scale")

    monkeypatch.setattr(fp8_fused, "quantize_per_token", per_token)
    weight, weight_scale = fp8.quantize_weight_per_tensor(torch.randn(32, 64))
    out = Fp8Linear(weight, weight_scale, torch.tensor([0.02]))(torch.randn(3, 64).to(torch.bfloat16))
    assert out.shape == (3, 32)


def test_a_way_that_fails_on_first_use_is_recorded_and_the_next_is_used(monkeypatch):
    gpu_tensor = SimpleNamespace(device=torch.device("cuda:0"))       # only its device is read
    calls = []

    def run(method, x, dtype):
        calls.append(method)
        if method == "triton":
            raise RuntimeError("no compiler for this arch")
        return "compiled result"

    monkeypatch.setattr(fp8_fused, "_available", lambda method: True)
    monkeypatch.setattr(fp8_fused, "_run", run)
    monkeypatch.setattr(fp8_fused, "FAILURES", {})
    monkeypatch.setattr(fp8_fused, "_WORKED", set())
    with pytest.warns(RuntimeWarning, match="triton"):
        assert fp8_fused.quantize_per_token(gpu_tensor) == "compiled result"
    assert calls == ["triton", "torch.compile"] and "RuntimeError" in fp8_fused.FAILURES["cuda:0 triton"]
    assert fp8_fused.quant_method("cuda:0") == "torch.compile" and fp8_fused.quant_method("cuda:1") == "triton"
    with pytest.raises(RuntimeError, match="no compiler"):            # a forced way is never replaced
        fp8_fused.quantize_per_token(gpu_tensor, method="triton")
    with pytest.raises(ValueError, match="one of"):
        fp8_fused.quantize_per_token(gpu_tensor, method="cuda")


def test_a_way_that_worked_once_raises_its_later_errors(monkeypatch):
    gpu_tensor = SimpleNamespace(device=torch.device("cuda:0"))
    outcomes = iter(["first result", RuntimeError("out of memory")])

    def run(method, x, dtype):
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(fp8_fused, "_available", lambda method: True)
    monkeypatch.setattr(fp8_fused, "_run", run)
    monkeypatch.setattr(fp8_fused, "FAILURES", {})
    monkeypatch.setattr(fp8_fused, "_WORKED", set())
    assert fp8_fused.quantize_per_token(gpu_tensor) == "first result"
    with pytest.raises(RuntimeError, match="out of memory"):
        fp8_fused.quantize_per_token(gpu_tensor)
    assert fp8_fused.FAILURES == {}


def test_importing_the_fp8_runtime_imports_no_triton():
    code = ("import sys, torch; from eagle3_quant.runtime.fp8_linear import Fp8Linear; "
            "from eagle3_quant.runtime import fp8; w, s = fp8.quantize_weight_per_channel(torch.randn(16, 32)); "
            "Fp8Linear(w, s)(torch.randn(2, 32)); print('triton' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU: the fused way runs there only")
@pytest.mark.parametrize("xdtype", [torch.bfloat16, torch.float16, torch.float32])
def test_on_a_gpu_the_fused_way_gives_the_bits_of_the_eager_ops_there(xdtype):
    arch = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "")
    dtype = torch.float8_e4m3fnuz if torch.version.hip and arch.startswith("gfx942") else torch.float8_e4m3fn
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randn(m, k, generator=gen) * torch.logspace(-6, 3, m).reshape(-1, 1)
            for m, k in ((1, 7168), (4, 14336), (16, 18432), (64, 4096), (3, 100))]
    rows.append(torch.tensor([[3e38, -1e38, 1.0, 0.0], [0.0, 0.0, 0.0, -0.0], [65504.0, -65504.0, 3.0, -0.0]]))
    assert fp8_fused.quant_method("cuda") in ("triton", "torch.compile")
    for x in rows:
        if xdtype == torch.float16:
            x = x.clamp(-65504.0, 65504.0)
        x = x.to("cuda", xdtype)
        q, scale = fp8_fused.quantize_per_token(x, dtype)
        want_q, want_scale = fp8.quantize_per_token(x, dtype)
        assert torch.equal(scale.view(torch.int32), want_scale.view(torch.int32)), (fp8_fused.quant_method("cuda"),
                                                                                    list(x.shape))
        assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8)), (fp8_fused.quant_method("cuda"),
                                                                            list(x.shape))
