"""A parallel layout vLLM refuses is refused before anything loads, in the installed vLLM's own words
(engines/vllm/layout_child.py runs vLLM's ``LLM`` and ``create_engine_config`` checks and builds each draft at the
tensor-parallel size on the meta device); and the CPU build's changes reach every vLLM process through vLLM's own
plugin loader (engines/vllm/cpu_plugin.py, ``vllm.general_plugins``).

Each refusal starts vLLM's import and config only (about ten seconds here), never an engine: the error names vLLM's
message and its file, exit 2, nothing written. The messages asserted are vLLM 0.32's (the CPU build in
.venv-engine): vllm/config/model.py (heads, ``SupportsPP``), vllm/config/parallel.py (expert parallelism),
vllm/entrypoints/llm.py (data parallelism in one process), vllm/distributed/utils.py ``divide`` (the draft's
vocabulary across ``ParallelLMHead``)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from engine_env import needs_engine
from tiny_pair_fixtures import PAIR

from eagle3_quant.cli import main
from eagle3_quant.engine_layout import EngineLayout
from eagle3_quant.engines.environment import VLLM_CHILDREN, find_engine_python, probe_engine
from eagle3_quant.engines.layout_check import LayoutRun, check_layout
from eagle3_quant.errors import EngineLayoutError

pytestmark = [pytest.mark.slow, needs_engine]
PROMPTS = PAIR / "heldout_prompts.safetensors"


def refused(args: list[str], capsys) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    seconds = time.monotonic() - started
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("error: ")]
    assert exit_info.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0], seconds


@pytest.fixture(scope="module")
def artifact(tiny_pair, tmp_path_factory) -> Path:
    import shutil

    return Path(shutil.copytree(tiny_pair.fp8, tmp_path_factory.mktemp("layout") / "ptpc"))


def bench_args(artifact: Path, *layout: str) -> list[str]:
    return ["bench", str(artifact), "--target", str(PAIR / "target"), "--reference", str(PAIR / "draft"),
            "--prompts", str(PROMPTS), "--num-prompts", "2", "--max-tokens", "4", "--no-predict", *layout]


def test_pipeline_parallel_hidden_state_export_is_refused_with_the_way_out(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": f"def f{i}(x):\n    return x + {i}\n" * 8}) + "\n" for i in range(4)))
    line, seconds = refused(["calibrate", str(tmp_path / "cal"), "--target", str(PAIR / "target"), "--draft",
                             str(PAIR / "draft"), "--data", str(data), "--num-samples", "2", "--seq-len", "64",
                             "--backend", "vllm", "--pipeline-parallel-size", "2"], capsys)
    assert "Pipeline parallelism is not supported for this model" in line and "SupportsPP" in line
    assert "vllm/config/model.py:" in line and "pipeline parallel 2" in line
    assert "--tensor-parallel-size" in line and "calibrate --from-dump" in line and "nothing was loaded" in line
    assert not (tmp_path / "cal").exists()
    print(f"refused in {seconds:.1f} s")


@pytest.mark.parametrize("layout, words", [
    (("--tensor-parallel-size", "3"), "Total number of attention heads (4) must be divisible by tensor parallel "
                                      "size (3)"),
    (("--enable-expert-parallel",), "Number of experts in the model must be greater than 0 when expert parallelism "
                                    "is enabled"),
    (("--data-parallel-size", "2"), "LLM(data_parallel_size=2) is not supported for single-process usage"),
    (("--max-model-len", "100000"), "User-specified max_model_len (100000) is greater than the derived "
                                    "max_model_len (max_position_embeddings=512"),     # vllm/config/model.py
    (("--engine-args", '{"not_an_engine_arg": 1}'), "not_an_engine_arg"),
])
def test_layouts_vllm_refuses_are_refused_before_the_engine(artifact, capsys, layout, words):
    before = sorted(p.name for p in artifact.iterdir())
    line, seconds = refused(bench_args(artifact, *layout), capsys)
    assert words in line and "vllm/" in line and "nothing was loaded" in line and ".;" not in line, line
    assert sorted(p.name for p in artifact.iterdir()) == before          # no bench.json, no log
    print(f"refused in {seconds:.1f} s")


def test_a_draft_the_layout_cannot_split_is_refused(real_pair_target):
    """The real pair's target takes tensor parallel 3 (9 heads), its draft does not: vLLM's ParallelLMHead splits
    the 16,384-token draft vocabulary (vllm/distributed/utils.py ``divide``)."""
    python = find_engine_python()
    info = probe_engine(python)
    from fixtures.real_pair.draft_files import DRAFT_DIR as draft

    request = {"target": str(real_pair_target), "draft": str(draft), "k": 3, "dtype": "bfloat16", "prompts": [[1]],
               "max_tokens": 4, "max_model_len": 256, "max_num_seqs": 4, "seed": 0, "sweep": None,
               "quantization": None, "engine": {"tensor_parallel_size": 3}, "changes": [], "top_logits": 0}
    with pytest.raises(EngineLayoutError) as caught:
        check_layout(python, info, EngineLayout(tensor_parallel_size=3),
                     [LayoutRun("the reference draft", "serve_child", request)])
    message = str(caught.value)
    assert "16384 is not divisible by 3" in message and "the draft split across the ranks" in message
    assert caught.value.field == "tensor_parallel_size"
    one = {**request, "engine": {}}
    # one process: nothing to ask, nothing started
    assert check_layout(python, info, EngineLayout(), [LayoutRun("x", "serve_child", one)]) == []


PLUGIN_PROBE = """
import json, multiprocessing, os, sys
sys.path.insert(0, {children!r})
import cpu_plugin


def worker(queue):
    from vllm.plugins import load_general_plugins

    load_general_plugins()                 # what every vLLM worker does when it starts
    import cpu_changes

    queue.put(cpu_changes.APPLIED)


if __name__ == "__main__":
    cpu_plugin.install(["fast_scaled_mm"])
    context = multiprocessing.get_context("spawn")     # vLLM's CPU platform spawns its workers
    queue = context.Queue()
    process = context.Process(target=worker, args=(queue,))
    process.start()
    print(json.dumps(queue.get(timeout=300)))
    process.join()
"""


def test_the_changes_reach_a_spawned_process_through_vllms_plugin_loader(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PLUGIN_PROBE.format(children=str(VLLM_CHILDREN)))
    python = find_engine_python()
    done = subprocess.run([str(python.path), str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "VLLM_TARGET_DEVICE": "cpu", "HOME": str(Path.home())})
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["fast_scaled_mm"]


@pytest.fixture(scope="module")
def real_pair_target() -> Path:
    from fixtures.real_pair.target import DONE, cache_dir

    target = cache_dir() / "target"
    if not (target / DONE).is_file():
        pytest.skip("the real pair is not prepared: make real-pair")
    return target
