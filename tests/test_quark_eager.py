"""`import_quark` runs Quark's fake quantizer eagerly (QUARK_DISABLE_COMPILE's switch, unless the user set it): the
bytes Quark writes are the same as with its default `torch.compile`d quantizer, for the paths that call it (static
input scales and AWQ's clip search on the tiny pair's calibration set)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from conftest import load_tensors

from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.quantize.quark_import import import_quark

pytestmark = pytest.mark.slow


def _bytes(folder) -> dict:
    return {name: tensor.contiguous().view(-1).view(dtype=torch.uint8).tolist()
            for name, tensor in load_tensors(folder).items()}


@pytest.mark.parametrize("scheme", ["fp8", "w4a16_int4"])
def test_eager_writes_the_compiled_bytes(tiny_pair, tmp_path, monkeypatch, scheme):
    monkeypatch.delenv("QUARK_DISABLE_COMPILE", raising=False)
    import_quark()
    from quark.torch.quantization import tensor_quantize

    assert tensor_quantize.QUARK_DISABLE_COMPILE is True
    import quark.torch.kernel as kernel

    compiled_calls = []
    compiled_quantizer = kernel.scaled_fake_quantize_compiled

    def counted(*args):
        compiled_calls.append(args[0])
        return compiled_quantizer(*args)

    monkeypatch.setattr(kernel, "scaled_fake_quantize_compiled", counted)
    written, calls = {}, {}
    for eager in (False, True):
        monkeypatch.setenv("QUARK_DISABLE_COMPILE", "1" if eager else "0")    # import_quark keeps it
        monkeypatch.setattr(tensor_quantize, "QUARK_DISABLE_COMPILE", eager)
        out = tmp_path / f"{scheme}-{'eager' if eager else 'compiled'}"
        quantize_draft(tiny_pair.draft, out, scheme=scheme, calib=tiny_pair.calib, quantize_fc=True, device="cpu")
        written[eager], calls[eager] = _bytes(out), len(compiled_calls)
    assert calls[False] > 0 and calls[True] == calls[False]      # compiled the first time only
    assert written[True].keys() == written[False].keys()
    assert [n for n in written[True] if written[True][n] != written[False][n]] == []


def test_a_user_setting_is_kept():
    code = ("from eagle3_quant.quantize.quark_import import import_quark; import_quark(); "
            "from quark.torch.quantization import tensor_quantize as t; print(t.QUARK_DISABLE_COMPILE)")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "QUARK_DISABLE_COMPILE": "0"}).stdout.split()
    assert shown[-1] == "False"
