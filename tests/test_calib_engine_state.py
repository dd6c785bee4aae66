"""`calibrate --backend vllm --force` starts over: every hidden state folder of OUT (the capture's and the engine's
export) is removed, so a corrupt export from an earlier run is never read again; and an import of nothing is
refused. The engine is a stand-in Python: the probe answered as a vLLM CPU build, then an "export" whose
safetensors files are garbage."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from fake_engine import FAKE_PROBE
from tiny_pair_fixtures import PAIR

from eagle3_quant.cli import main
from eagle3_quant.errors import CalibrationDataError

FAKE = FAKE_PROBE + """open("{starts}", "a").write("started\\n")
req = json.load(open(request))
for i, prompt in zip(req["samples"], req["prompts"]):
    open(f"{{req['dump']}}/{{i:06d}}.safetensors", "wb").write(b"not a safetensors file")
    json.dump({{"prompt_next": [1] * (len(prompt) - 1), "output": [1] * req["max_tokens"]}},
              open(f"{{req['dump']}}/{{i:06d}}.json", "w"))
json.dump({{"generate_s": 0.1}}, open(result, "w"))
"""


def test_force_removes_the_engines_export_and_starts_over(tmp_path):
    from eagle3_quant.calib.api import calibrate_target
    from eagle3_quant.calib.vllm_capture import export_dir

    starts = tmp_path / "starts"
    engine = tmp_path / "fake-python"
    engine.write_text(FAKE.format(python=sys.executable, starts=starts))
    engine.chmod(0o755)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": f"prompt {i}: " + "a few words of text " * 6}) + "\n"
                            for i in range(4)))
    out = tmp_path / "cal"
    run = {"num_samples": 2, "seq_len": 32, "generate_tokens": 4, "min_tokens": 4, "backend": "vllm",
           "engine_python": str(engine)}
    for force, started in ((False, 1), (False, 1), (True, 2)):
        with pytest.raises(CalibrationDataError, match="cannot read as a safetensors file"):
            calibrate_target(PAIR / "target", PAIR / "draft", data, out, force=force, **run)
        # without --force the export of the first run is resumed (the engine is not run again); --force runs it
        assert starts.read_text().count("started") == started, force
    assert export_dir(out).is_dir() and not out.exists()


def test_a_calibration_set_listing_no_shards_is_refused_by_the_import(tiny_pair, tmp_path, capsys):
    dump = Path(shutil.copytree(tiny_pair.calib, tmp_path / "dump"))
    index = json.loads((dump / "calib.json").read_text())
    for shard in index["shards"]:
        (dump / shard["file"]).unlink()
    (dump / "calib.json").write_text(json.dumps({**index, "shards": []}))
    out = tmp_path / "cal"
    with pytest.raises(SystemExit) as exit_info:
        main(["calibrate", str(out), "--draft", str(PAIR / "draft"), "--from-dump", str(dump)])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("error: ")]
    assert exit_info.value.code == 2 and lines == [
        f"error: {dump}: holds no sample (calibration format): nothing to import"], err
    assert not out.exists() and not list(tmp_path.glob(".cal*"))
