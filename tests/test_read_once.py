"""`bench`, `validate` and `push` read the artifact and its BF16 reference once and hand the parsed objects on: in
their own process each config.json is opened once (counted by Python's audit hook on every `open`); engine children,
run in their own processes, read their own copies. The engine here is a stand-in Python that answers like vLLM's CPU
build; the offline prediction runs for real."""

from __future__ import annotations

import collections
import os
import shutil
import sys
from pathlib import Path

from fake_engine import FAKE_PROBE
from tiny_pair_fixtures import PAIR

FAKE = FAKE_PROBE + """prompts = json.load(open(request))["prompts"]
good = {{"outputs": [[1, 2, 3, 4] for _ in prompts], "per_request": [None for _ in prompts],
         "counters": {{"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_position": []}},
         "load_s": 1.0, "generate_s": 1.0, "generated_tokens": 4 * len(prompts), "substituted_ops": {{}}}}
open(result, "w").write(json.dumps(good))
"""
OPENED: collections.Counter = collections.Counter()
WATCHED: set[str] = set()


def _count(event: str, args: tuple) -> None:
    if event == "open" and WATCHED and args and isinstance(args[0], str | bytes | os.PathLike):
        path = os.path.realpath(os.fsdecode(args[0]))
        if path in WATCHED:
            OPENED[path] += 1


sys.addaudithook(_count)          # for the whole test process: it counts only while WATCHED names files


def opens_during(files: list[Path], call) -> dict[str, int]:
    OPENED.clear()
    WATCHED.update(str(f.resolve()) for f in files)
    try:
        call()
    finally:
        WATCHED.clear()
    return {Path(p).parent.name + "/" + Path(p).name: n for p, n in OPENED.items()}


def test_bench_opens_the_artifacts_and_the_references_config_once(tiny_pair, tmp_path):
    from eagle3_quant.bench.api import bench_draft

    artifact = Path(shutil.copytree(tiny_pair.fp8, tmp_path / "art"))
    engine = tmp_path / "fake-python"
    engine.write_text(FAKE.format(python=sys.executable))
    engine.chmod(0o755)
    configs = [artifact / "config.json", PAIR / "draft" / "config.json"]
    prompts = str(PAIR / "heldout_prompts.safetensors")
    counted = opens_during(configs, lambda: bench_draft(
        artifact, target=str(PAIR / "target"), reference=PAIR / "draft", prompts=prompts, num_prompts=2,
        max_tokens=4, engine_python=str(engine)))
    assert counted == {"art/config.json": 1, "draft/config.json": 1}
    assert (artifact / "bench.json").is_file()


def test_validate_opens_the_artifacts_and_the_references_config_once(tiny_pair, tmp_path):
    from eagle3_quant.validate.api import validate_draft

    artifact = Path(shutil.copytree(tiny_pair.fp8, tmp_path / "art"))
    configs = [artifact / "config.json", PAIR / "draft" / "config.json"]
    counted = opens_during(configs, lambda: validate_draft(
        artifact, reference=PAIR / "draft", calib=tiny_pair.calib, max_samples=2, kernel=False, vllm=False,
        sglang=False))
    assert counted == {"art/config.json": 1, "draft/config.json": 1}


def test_push_opens_the_artifacts_config_once(tiny_pair, tmp_path):
    from eagle3_quant.export.push import push_draft

    artifact = Path(shutil.copytree(tiny_pair.fp8, tmp_path / "art"))
    counted = opens_during([artifact / "config.json"], lambda: push_draft(
        artifact, "org/draft-fp8", allow_unvalidated=True, allow_unmeasured=True, dry_run=True, target="org/target",
        base_model="org/draft"))
    assert counted == {"art/config.json": 1}
