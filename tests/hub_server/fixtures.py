"""Fixtures for publishing tests: a running local Hub and validated (or not) copies of a real quantized draft.

Import them into a test module: `from hub_server.fixtures import hub, make_out  # noqa: F401`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from . import running_hub

TOKEN = "hf_TestSecretToken0123456789abcdef"
USER = "alice"

SOURCE_HUB_ID = "org/tiny-eagle3"      # the Hub id make_out's artifacts record for their BF16 source
PASSED_REPORT = {
    "report_version": 1,
    "passed": True,
    "target": "example-org/target",
    "checks": [{"name": "structure", "status": "passed", "detail": "7 FP8 linears, scales finite"},
               {"name": "acceptance", "status": "passed", "detail": "ratio 0.998 >= 0.99"},
               {"name": "kernel_mi355x", "status": "skipped", "detail": "no ROCm device"}],
    "metrics": {"acceptance_length_bf16": 2.412, "acceptance_length_fp8": 2.407, "acceptance_ratio": 0.9979,
                "top1_agreement": 0.9912, "kl": 0.00131, "compute_dtype": "bfloat16",
                "prediction": {"engine": "vllm", "compute_dtype": "bfloat16", "dtype_reason": "the draft's dtype"}},
    "kernel": {"status": "passed", "device": "cpu", "backend": "torch._scaled_mm (CPU)",
               "kernels": ["aten::_scaled_mm"]},
}


def bound(report: dict, out: Path) -> dict:
    """The report made evidence for OUT (as `validate` writes it): it names OUT's artifact files by sha256.
    A report that already has `artifact_files` is left as it is."""
    from eagle3_quant.records.evidence import artifact_digests

    return report if "artifact_files" in report else {**report, "artifact": out.name,
                                                      "artifact_files": artifact_digests(out)}


def failed_report() -> dict:
    report = json.loads(json.dumps(PASSED_REPORT))
    report["passed"] = False
    report["checks"][1] = {"name": "acceptance", "status": "failed", "detail": "ratio 0.91 < 0.99"}
    return report


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A local Hub named by HF_ENDPOINT, with HF_TOKEN set to a valid token and HF_HOME isolated."""
    with running_hub({TOKEN: USER}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield server


@pytest.fixture
def hub_client(hub, monkeypatch):
    """huggingface_hub pointed at the local Hub in this process (for reading back what a push wrote)."""
    from huggingface_hub import HfApi, constants

    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    return HfApi(endpoint=hub.url, token=TOKEN)


@pytest.fixture
def make_out(quantized_tiny, tmp_path):
    """make_out(report) -> a copy of a real quantized tiny draft with that validation.json (None: no report), its
    manifest naming the source as a download of `hub_id` (the card's base model; None: a local draft only)."""

    def build(report: dict | str | None = PASSED_REPORT, name: str = "out", hub_id: str | None = SOURCE_HUB_ID
              ) -> Path:
        _, source_out = quantized_tiny()
        out = tmp_path / name
        shutil.copytree(source_out, out)
        manifest = json.loads((out / "eagle3_quant.json").read_text())
        manifest["source"]["hub_id"] = hub_id
        (out / "eagle3_quant.json").write_text(json.dumps(manifest, indent=2))
        if isinstance(report, dict):
            (out / "validation.json").write_text(json.dumps(bound(report, out), indent=2))
        elif isinstance(report, str):
            (out / "validation.json").write_text(report)
        return out

    return build
