"""A draft step makes and copies no CPU tensor once the draft and its inputs live on a device, so an engine can
capture it as a CUDA graph. Checked on the CPU with the meta device: every op of the second step is recorded, and
none may touch a CPU tensor (the first step may: it puts the rotary table on the device once)."""

from __future__ import annotations

import pytest
import torch
from draft_variants import write_fp8_checkpoint, write_variant
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from eagle3_quant import load_draft


class CpuTensorOps(TorchDispatchMode):
    """The ops that took or made a CPU tensor while the mode was on."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in tree_leaves((args, kwargs, out))):
            self.ops.append(str(func))
        return out


def _cpu_ops_of_second_step(folder, batch: int = 2) -> list[str]:
    config = load_draft(folder, embedding=torch.zeros(512, 64)).config
    draft = load_draft(folder, embedding=torch.zeros(512, 64)).to("meta")
    ids = torch.zeros(batch, 1, dtype=torch.long, device="meta")
    aux = torch.zeros(batch, 1, draft.spec.num_aux * config.target_hidden_size, device="meta")
    positions = torch.zeros(batch, 1, dtype=torch.long, device="meta")
    with torch.no_grad():
        draft(ids, aux, positions)
        with CpuTensorOps() as mode:
            logits, hidden = draft(ids, aux, positions)
    assert logits.device.type == "meta" and hidden.shape[:2] == (batch, 1)
    return mode.ops


@pytest.mark.parametrize("variant", ["specforge", "llama3-rope", "yarn-rope", "qwen3", "mla", "mla-deepseek-yarn"])
def test_a_bf16_draft_step_touches_no_cpu_tensor(tmp_path, variant):
    assert _cpu_ops_of_second_step(write_variant(tmp_path / variant, variant)) == []


@pytest.mark.parametrize(("static", "per_tensor"), [(False, False), (True, True)], ids=["ptpc", "static"])
def test_an_fp8_draft_step_touches_no_cpu_tensor(tmp_path, static, per_tensor):
    src = write_variant(tmp_path / "src", "specforge")
    fp8 = write_fp8_checkpoint(src, tmp_path / "fp8", static=static, per_tensor=per_tensor)
    assert _cpu_ops_of_second_step(fp8) == []


def test_the_rotary_table_is_made_once_per_device_with_the_cpu_bits(tmp_path):
    draft = load_draft(write_variant(tmp_path / "d", "llama3-rope"), embedding=torch.zeros(512, 64))
    positions = torch.arange(5).expand(2, 5)
    first = draft.rope.cos_sin(positions, torch.float32)
    table = draft.rope._on_device[torch.device("cpu")]
    second = draft.rope.cos_sin(positions, torch.float32)
    assert draft.rope._on_device[torch.device("cpu")] is table
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(first, draft.spec.rope.cos_sin(positions, torch.float32),
                                                 strict=True))
