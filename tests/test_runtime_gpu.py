"""The FP8 runtime on a real GPU: the layouts we enforce are the ones GPU `_scaled_mm` accepts, and its
result matches the dequantized reference up to the GPU kernel's accumulation order."""

from __future__ import annotations

import pytest
import torch
from draft_variants import write_fp8_checkpoint

from eagle3_quant import load_draft
from eagle3_quant.runtime import fp8

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU for _scaled_mm")]


def _fp8_dtype() -> torch.dtype:
    arch = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "")
    return torch.float8_e4m3fnuz if torch.version.hip and arch.startswith("gfx942") else torch.float8_e4m3fn


@pytest.mark.parametrize("m", [1, 7, 64])
def test_rowwise_scaled_mm_on_gpu_matches_dequantized_reference(m):
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(m, 256, generator=gen), torch.randn(384, 256, generator=gen) * 0.06
    dtype = _fp8_dtype()
    a, sa = fp8.quantize_per_token(x.cuda(), dtype)
    wq, sw = fp8.quantize_per_token(w.cuda(), dtype)
    out = fp8.fp8_linear(a, sa, wq, sw.reshape(-1))
    ref = fp8.dequantized_matmul(a, sa, wq, sw.reshape(-1))
    assert out.dtype == torch.bfloat16 and out.is_cuda
    torch.testing.assert_close(out.float(), ref.float(), rtol=1.6e-2, atol=1e-2)


def test_fp8_draft_on_gpu_agrees_with_cpu(tmp_path, make_draft):
    out = write_fp8_checkpoint(make_draft(), tmp_path / "fp8", static=False, per_tensor=False)
    gen = torch.Generator().manual_seed(0)
    ids, aux, emb = (torch.randint(0, 512, (2, 16), generator=gen), torch.randn(2, 16, 192, generator=gen),
                     torch.randn(512, 64, generator=gen))
    with torch.no_grad():
        cpu = load_draft(out, embedding=emb)(ids, aux)[0]
        gpu = load_draft(out, device="cuda", embedding=emb)(ids.cuda(), aux.cuda())[0].cpu()
    assert (cpu.argmax(-1) == gpu.argmax(-1)).float().mean() >= 0.95
    torch.testing.assert_close(gpu.float(), cpu.float(), rtol=0.05, atol=0.05)


@pytest.mark.parametrize("fp8_draft", [False, True], ids=["bf16", "ptpc"])
def test_a_draft_step_replays_as_a_cuda_graph_with_the_eager_result(tmp_path, make_draft, fp8_draft):
    src = make_draft()
    folder = write_fp8_checkpoint(src, tmp_path / "fp8", static=False, per_tensor=False) if fp8_draft else src
    gen = torch.Generator().manual_seed(1)
    draft = load_draft(folder, device="cuda", embedding=torch.randn(512, 64, generator=gen))
    ids = torch.randint(0, 512, (4, 1), generator=gen).cuda()
    aux = torch.randn(4, 1, 192, generator=gen).cuda()
    positions = torch.full((4, 1), 7, dtype=torch.long, device="cuda")
    with torch.no_grad():
        eager = draft(ids, aux, positions)[0].clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = draft(ids, aux, positions)[0]
        graph.replay()
        torch.cuda.synchronize()
    torch.testing.assert_close(captured, eager, rtol=0, atol=0)
