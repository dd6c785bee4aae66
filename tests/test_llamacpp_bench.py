"""`bench --engine llamacpp` in llama.cpp's own server on the tiny pair (few, small server starts), then validate,
estimate, card and push of the GGUF draft; the refusals before any server starts; a server that cannot bind, dies or
does not answer, and Ctrl-C: one clear error, no llama-server left running."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from llamacpp_env import llama_servers, needs_llamacpp, run
from tiny_pair_fixtures import PAIR

from eagle3_quant.engines.llamacpp.server import LlamaServer, ServerSpec
from eagle3_quant.engines.llamacpp.tools import find_tools
from eagle3_quant.errors import EngineError
from eagle3_quant.records.llamacpp_bench import LlamaCppBenchRun

pytestmark = [needs_llamacpp, pytest.mark.slow]
PROMPTS = PAIR / "heldout_prompts.safetensors"
BENCH = ("--prompts", str(PROMPTS), "--num-prompts", "6", "--max-tokens", "12", "--repeats", "2")


@pytest.fixture(scope="module")
def benched(tmp_path_factory) -> Path:
    """The tiny draft's Q8_0 GGUF, benched against the tiny target converted on the fly, at 1 and 2 slots and at a
    second context length."""
    root = tmp_path_factory.mktemp("llamacpp")
    out = root / "q8"
    assert run(["gguf", str(PAIR / "draft"), str(out), "--target", str(PAIR / "target"),
                "--pre-tokenizer", "gpt-2"]) == 0
    assert run(["bench", str(out), "--target", str(PAIR / "target"), *BENCH, "--slots", "1,2",
                "--long-context", "160"]) == 0
    return out


def test_bench_records_llamacpps_own_counts_outputs_and_speeds(benched):
    record = LlamaCppBenchRun.read(benched)
    assert record.engine["name"] == "llama.cpp" and record.engine["build_info"] == find_tools().build.build_info
    assert record.target["architecture"] == "llama" and record.target["layers"] == 4
    for _, acceptance in record.acceptance.items():
        assert acceptance.counters_agree and acceptance.drafts > 0 and len(acceptance.per_prompt) == 6
        assert 1.0 <= acceptance.acceptance_length <= 4.0
    ratio = record.acceptance_ratio
    assert ratio.low <= ratio.ratio <= ratio.high
    for _, match in record.lossless.drafts.items():
        assert match.sequences == 6 and match.real_differences == 0
    assert [s.slots for s in record.speed] == [1, 2]
    for speed in record.speed:
        assert speed.repeats == 2 and all(v > 0 for v in speed.tokens_per_s.values())
        for _, ratio in speed.speedup.items():
            assert ratio.low <= ratio.ratio <= ratio.high and len(ratio.per_repeat) == 2
    assert [b.context for b in record.breakdown] == ["prompts", "long"]
    assert record.breakdown[1].depth > record.breakdown[0].depth
    step = record.breakdown[0].drafts["artifact"]
    assert step.verify_ms > 0 and step.draft_ms is not None and step.step_ms > 0
    assert step.rest_ms == pytest.approx(step.step_ms - step.verify_ms - step.draft_ms)
    one, decode = record.speed_at(1).speedup.artifact, record.speed_at(1).decode_speedup.artifact
    said = next(words for words, holds in (("speeds this target up", one.low > 1),
                                           ("speeds decoding up", decode.low > 1),
                                           ("slows this target down", one.high < 1),
                                           ("slows decoding down", decode.high < 1),
                                           ("neither speeds up nor slows", True)) if holds)
    assert record.verdict.startswith(f"the Q8_0 draft {said}")     # the first interval that excludes 1 speaks
    assert set(record.speed_model) == {"reference", "artifact"}
    assert llama_servers() == []


def test_validate_estimate_card_and_push_of_the_gguf(benched, tiny_pair, hub, hub_client, capsys):
    assert run(["validate", str(benched), "--calib", str(tiny_pair.calib), "--max-samples", "16"]) == 0
    report = json.loads((benched / "validation.json").read_text())
    checks = {c["name"]: c["status"] for c in report["checks"]}
    assert checks["gguf_file"] == checks["acceptance_ratio"] == checks["weight_sqnr"] == "passed"
    assert checks["kernel_path"] == checks["vllm_load"] == "skipped"
    assert report["metrics"]["prediction"]["engine"].startswith("llama.cpp")
    assert run(["estimate", str(benched), "--write"]) == 0
    estimate = json.loads((benched / "speedup_estimate.json").read_text())
    assert estimate["token_ms"] > 0 and estimate["measured"]["speedup"] > 0
    assert run(["estimate", str(benched), "--verify-ms", "3"]) == 2
    assert "a GGUF draft's costs are what llama.cpp measured" in capsys.readouterr().err
    assert run(["card", str(benched), "--print", "--repo-id", "alice/tiny-gguf", "--target", "org/target",
                "--base-model", "org/tiny-eagle3"]) == 0
    card = capsys.readouterr().out
    for words in ("Q8_0 GGUF", "--spec-type draft-eagle3", "## Measured in llama.cpp's server", "**Verdict:**",
                  "Speed model"):
        assert words in card
    assert run(["push", str(benched), "--repo-id", "alice/tiny-gguf", "--target", "org/target",
                "--base-model", "org/tiny-eagle3"]) == 0
    files = set(hub_client.list_repo_files("alice/tiny-gguf"))
    assert {"draft-Q8_0.gguf", "eagle3_quant.json", "validation.json", "bench.json", "README.md"} <= files


def test_a_target_that_is_not_the_drafts_is_refused_before_any_server(benched, capsys, tmp_path):
    draft = benched / "draft-Q8_0.gguf"
    assert run(["bench", str(benched), "--target", str(draft), *BENCH]) == 2
    assert "the target is an Eagle-3 draft, not a model" in capsys.readouterr().err
    text = tmp_path / "t.gguf"
    text.write_text("not a model")
    assert run(["bench", str(benched), "--target", str(text), *BENCH]) == 2
    assert "not a GGUF file" in capsys.readouterr().err
    from fixtures.real_pair.target import cache_dir

    other = next((cache_dir() / "gguf").glob("*.gguf"), None) if (cache_dir() / "gguf").is_dir() else None
    if other is not None:       # the real pair's target: another vocabulary and hidden size
        assert run(["bench", str(benched), "--target", str(other), *BENCH]) == 2
        assert "hidden size is 576" in capsys.readouterr().err
    assert run(["bench", str(benched), "--target", str(PAIR / "target"), *BENCH, "--engine-python", "x"]) == 2
    assert "--engine-python is not an option of llama.cpp runs" in capsys.readouterr().err
    assert llama_servers() == []


@pytest.fixture(scope="module")
def target_gguf(tmp_path_factory) -> Path:
    from eagle3_quant.engines.llamacpp.convert import convert

    file = tmp_path_factory.mktemp("target") / "target.gguf"
    convert(find_tools(), PAIR / "target", file, pre_tokenizer="gpt-2")
    return file


def test_a_gguf_that_is_no_eagle3_draft_is_refused(benched, target_gguf, capsys):
    assert run(["bench", str(benched), "--target", str(target_gguf), "--reference", str(target_gguf), *BENCH]) == 2
    assert "architecture 'llama': not an Eagle-3 draft" in capsys.readouterr().err


def test_a_busy_port_a_dead_server_and_a_silent_one_are_each_one_error(target_gguf, tmp_path):
    tools = find_tools()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        spec = ServerSpec(target_gguf, None, 3, 1, 256, 1, port=busy.getsockname()[1])
        with pytest.raises(EngineError, match="couldn't bind"):
            with LlamaServer(tools, spec, tmp_path / "busy.log", "none"):
                pass
    body = {"prompt": [1, 2, 3], "n_predict": 4000, "temperature": 0.0, "ignore_eos": True}
    with LlamaServer(tools, ServerSpec(target_gguf, None, 3, 1, 4096, 1), tmp_path / "slow.log", "none") as server:
        with pytest.raises(EngineError, match="did not answer .* within"):
            server.complete(body, 0.2)
    with LlamaServer(tools, ServerSpec(target_gguf, None, 3, 1, 256, 1), tmp_path / "dead.log", "none") as server:
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
        with pytest.raises(EngineError, match=r"died \(status -9\)"):
            server.complete({"prompt": [1, 2], "n_predict": 2}, 10)
    assert llama_servers() == []


def test_ctrl_c_ends_every_server(benched):
    proc = subprocess.Popen([str(Path(sys.executable).parent / "eagle3-quant"), "bench", str(benched), "--target",
                             str(PAIR / "target"), *BENCH], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(llama_servers()) < 3 and proc.poll() is None:
        time.sleep(0.2)
    assert len(llama_servers()) == 3, "the three servers never started"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err
    assert llama_servers() == []
