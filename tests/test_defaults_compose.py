"""`calibrate` with its default options, then `validate --calib`, measures acceptance (issue 11, item 6).

On the committed tiny pair, from plain-text prompts: by default `calibrate` appends the target's own greedy
continuation, so validation has chain starts to replay. The pair's draft nests its ids (SpecForge), so the default
engine (vLLM) feeds it other layers than it was trained on: both commands say so in one line.
"""

from __future__ import annotations

import json

import pytest
from validate_helpers import copy_artifact

from eagle3_quant.cli import main

pytestmark = pytest.mark.slow
NOTE = ("vllm feeds this draft hidden_states[0, 1, 2] as its config stands, but the config says it was trained on "
        "hidden_states[1, 2, 3]: `validate` measures the acceptance under each, `quantize` (--serve-taps trained) "
        "writes the ids so that every engine feeds the trained ones")


def test_calibrate_defaults_then_validate_measures_acceptance(tiny_pair, tmp_path, capsys):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_pair.target)
    rows = [{"text": tokenizer.decode(p[:48].tolist())} for p in tiny_pair.prompts[-24:]]
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cal = tmp_path / "cal"
    with pytest.raises(SystemExit) as exit_info:     # only the number of prompts is chosen: it sets the test's time
        main(["calibrate", str(cal), "--target", str(tiny_pair.target), "--draft", str(tiny_pair.draft),
              "--data", str(data), "--num-samples", "16"])
    printed = capsys.readouterr()
    assert exit_info.value.code in (0, None), printed.err
    assert f"note: {NOTE}" in " ".join((printed.out + printed.err).split())

    out = copy_artifact(tiny_pair.fp8, tmp_path / "fp8")
    with pytest.raises(SystemExit):
        main(["validate", str(out), "--reference", str(tiny_pair.draft), "--calib", str(cal), "--no-kernel",
              "--no-sglang", "--json"])
    report = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["acceptance_ratio"]["detail"].startswith("acceptance length FP8"), checks["acceptance_ratio"]
    assert report["metrics"]["drafts"] > 100 and report["metrics"]["acceptance_length_bf16"] > 1.0
    # the artifact is quantize's default (--serve-taps trained): vLLM now feeds it the trained layers
    assert report["metrics"]["aux_layer_ids"] == [1, 2, 3]
    assert not any(n.startswith("vllm feeds") for n in report["metrics"]["taps"]["notes"])
    assert checks["sglang_load"]["status"] == "skipped"
