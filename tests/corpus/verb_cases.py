"""The bad-input corpus for every verb but `quantize` (tests/corpus/cases.py holds quantize's).

Each case builds its inputs under a root folder and returns the CLI arguments; the test runs them through the
real CLI entry (in-process) and asserts exit status 2, one `error:` line holding every `says` fragment, no
traceback, the tree under the root unchanged (nothing half-written, sources untouched) and no Hub request.
Files outside the folders given (`secret.txt`) are never read: the cases that point at them assert the error
comes before any read, and that nothing of them reaches the output.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from calib_fixtures import write_calibration, write_target

from corpus.builders import SINGLE, poke, split, tiny, write_raw
from fixtures.synthetic import write_synthetic_draft


@dataclass(frozen=True)
class VerbCase:
    id: str
    build: Callable[[Path], list[str]]       # root -> CLI arguments
    says: tuple[str, ...]


def secret(root: Path) -> Path:
    path = root / "secret.txt"
    path.write_text("a private file next to the folders given\n")
    return path


QUANTIZED: list[Path] = []     # the shared real Quark output (conftest's quantized_tiny), set by the test


def quantized(root: Path) -> Path:
    """A copy of a real quantized tiny draft, without its hidden local record."""
    out = root / "fp8"
    shutil.copytree(QUANTIZED[0], out, ignore=shutil.ignore_patterns(".*"))
    return out


def edit_manifest(out: Path, change: Callable[[dict], object]) -> Path:
    data = json.loads((out / "eagle3_quant.json").read_text())
    change(data)
    (out / "eagle3_quant.json").write_text(json.dumps(data))
    return out


def calib_set(root: Path, name: str = "cal") -> Path:
    target = write_target(root / "target")
    return write_calibration(root / name, target, samples=4, seq_len=20)


def edit_calib_index(cal: Path, change: Callable[[dict], object]) -> Path:
    index = json.loads((cal / "calib.json").read_text())
    change(index)
    (cal / "calib.json").write_text(json.dumps(index))
    return cal


def nan_states(cal: Path) -> Path:
    shard = cal / "shard-00000.safetensors"
    poke(shard, "aux_hidden_states.1", (3, 7), float("nan"))
    return cal


def truncated_shard(cal: Path) -> Path:
    shard = cal / "shard-00000.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    return cal


def index_shard_outside(root: Path, cal: Path) -> Path:
    """The index names a real calibration shard lying outside the set's folder."""
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(cal / "shard-00000.safetensors", elsewhere / "shard-00000.safetensors")
    return edit_calib_index(cal, lambda i: i["shards"][0].update(file="../elsewhere/shard-00000.safetensors"))


def pipeline(root: Path, text: str) -> Path:
    path = root / "pipeline.yaml"
    path.write_text(text)
    return path


def tiny_pipeline(root: Path, extra: str = "") -> Path:
    src = tiny(root)
    return pipeline(root, f"source: {src}\nworkdir: {root / 'work'}\npush:\n  enabled: false\n{extra}")


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True))


def _header_deep(root: Path) -> Path:
    src = tiny(root)
    _, data = split(src / SINGLE)
    write_raw(src / SINGLE, b"{" + b'"a":{' * 60_000 + b"}" * 60_001, data)
    return src


VERB_CASES: tuple[VerbCase, ...] = (
    # validate
    VerbCase("validate-manifest-not-json",
             lambda r: ["validate", str(edit_manifest_text(quantized(r), "{\"outputs\": [")), "--no-kernel"],
             ("eagle3_quant.json", "not valid JSON")),
    VerbCase("validate-nan-gate", lambda r: ["validate", str(quantized(r)), "--min-sqnr-db", "nan", "--no-kernel"],
             ("sqnr", "nan is not a finite number")),       # the CLI: at the option; the API: at the gate
    VerbCase("validate-calib-shard-outside",
             lambda r: ["validate", str(quantized(r)), "--calib", str(index_shard_outside(r, calib_set(r))),
                        "--no-kernel"],
             ("calib.json", "field 'shards.file'", "not a path inside the calibration folder")),
    # push (all --dry-run: even so nothing may be read outside OUT)
    VerbCase("push-manifest-lists-outside-file",
             lambda r: [*_push(edit_manifest(quantized(r), lambda d: d["outputs"].append(
                 {"path": "../secret.txt", "size": secret(r).stat().st_size, "sha256": "0" * 64})))],
             ("eagle3_quant.json", "field 'outputs.path'", "'../secret.txt' is not a path inside the output folder")),
    VerbCase("push-manifest-absolute-output",
             lambda r: [*_push(edit_manifest(quantized(r), lambda d: d["outputs"].append(
                 {"path": str(secret(r)), "size": 1, "sha256": "0" * 64})))],
             ("field 'outputs.path'", "is not a path inside the output folder")),
    VerbCase("push-manifest-not-an-object", lambda r: [*_push(edit_manifest_text(quantized(r), "[1, 2]"))],
             ("eagle3_quant.json", "the manifest is not a JSON object")),
    VerbCase("push-manifest-outputs-not-a-list",
             lambda r: [*_push(edit_manifest(quantized(r), lambda d: d.update(outputs="model.safetensors")))],
             ("field 'outputs'", "is not a list of objects")),
    VerbCase("push-foreign-validation-report", lambda r: [*_push(foreign_report(r))],
             ("validation.json", "belongs to another artifact", "model.safetensors")),
    VerbCase("push-report-names-no-files", lambda r: [*_push(unbound_report(r))],
             ("validation.json", "does not name the files it validated")),
    VerbCase("push-invalid-repo-id", lambda r: ["push", str(quantized(r)), "--repo-id", "org/a--b", "--dry-run"],
             ("field 'repo_id'", "not a valid Hub repo id")),
    # card
    VerbCase("card-manifest-nested-too-deep",
             lambda r: ["card", str(edit_manifest_text(quantized(r), "[" * 100_000 + "]" * 100_000))],
             ("eagle3_quant.json", "nested deeper than 64 levels")),
    VerbCase("card-manifest-nan", lambda r: ["card", str(nan_manifest(quantized(r)))],
             ("eagle3_quant.json", "field 'device'", "NaN is not a JSON number")),
    # inspect
    VerbCase("inspect-invalid-repo-id", lambda r: ["inspect", "org/a..b"], ("org/a..b", "not a valid Hub repo id")),
    VerbCase("inspect-header-nested-too-deep", lambda r: ["inspect", str(_header_deep(r))],
             (SINGLE, "nested too deeply")),
    # run
    VerbCase("run-yaml-alias-bomb", lambda r: ["run", str(pipeline(r, ALIAS_BOMB))],
             ("pipeline.yaml", "anchors and aliases")),
    VerbCase("run-bad-set-yaml", lambda r: ["run", str(tiny_pipeline(r)), "--set", "push.dry_run=[unclosed"],
             ("--set push.dry_run", "not a readable YAML value")),
    VerbCase("run-unknown-validate-option",
             lambda r: ["run", str(tiny_pipeline(r, "validate:\n  min_top1: 0.9\n"))],
             ("field 'validate'", "unknown key(s) 'min_top1'")),
    VerbCase("run-nan-gate",
             lambda r: ["run", str(tiny_pipeline(r, "validate:\n  gates:\n    min_weight_sqnr_db: .nan\n"))],
             ("field 'validate.gates.min_weight_sqnr_db'", "is not a finite number")),
    VerbCase("run-nan-auto-exclude",
             lambda r: ["run", str(tiny_pipeline(r, "calibrate:\n  data: x.jsonl\ntarget: org/target\n"
                                                    "quantize:\n  auto_exclude: .nan\n"))],
             ("field 'quantize.auto_exclude'", "is not a fraction")),
    VerbCase("run-invalid-push-repo-id",
             lambda r: ["run", str(pipeline(r, f"source: {tiny(r)}\nworkdir: {r / 'work'}\n"
                                               "push:\n  repo_id: org/a--b\n"))],
             ("field 'push.repo_id'", "not a valid Hub repo id")),
    VerbCase("run-source-neither-folder-nor-repo-id",
             lambda r: ["run", str(pipeline(r, f"source: ../nope\nworkdir: {r / 'work'}\npush:\n  enabled: false\n"))],
             ("field 'source'", "no such folder")),
    VerbCase("run-duplicate-push-section",       # the second section would drop the first's dry_run
             lambda r: ["run", str(pipeline(r, f"source: {tiny(r)}\nworkdir: {r / 'work'}\npush:\n  dry_run: true\n"
                                               "  repo_id: org/x\npush:\n  repo_id: org/x\n"))],
             ("pipeline.yaml", "key 'push' appears twice (lines 3 and 6)")),
    VerbCase("run-key-not-a-name", lambda r: ["run", str(tiny_pipeline(r, "1: one\n"))],
             ("pipeline.yaml", "key 1 is not a name")),
    VerbCase("run-empty-source",
             lambda r: ["run", str(pipeline(r, f"source: ''\nworkdir: {r / 'work'}\npush:\n  enabled: false\n"))],
             ("pipeline.yaml", "field 'source'", "'' is empty")),
    VerbCase("run-placeholder-repository",
             lambda r: ["run", str(pipeline(r, f"source: {tiny(r)}\nworkdir: {r / 'work'}\npush:\n"
                                               "  repo_id: ORG/tiny-fp8\n")), "--dry-run"],
             ("field 'push.repo_id'", "'ORG/tiny-fp8' is a placeholder")),
    VerbCase("run-workdir-inside-source",
             lambda r: ["run", str(pipeline(r, f"source: {tiny(r)}\nworkdir: {r / 'src' / 'work'}\n"
                                               "push:\n  enabled: false\n"))],
             ("field 'workdir'", "is inside source")),
    # card, push, estimate: what reaches a card belongs to this artifact, integrity named first
    VerbCase("card-changed-artifact", lambda r: ["card", str(changed(quantized(r))), *NAMES],
             ("the artifact differs from its manifest", "model.safetensors changed after export")),
    VerbCase("card-local-target", lambda r: ["card", str(quantized(r)), "--repo-id", "org/x", "--target", str(r)],
             ("field 'target'", "not a Hub repo id", "the card names the target by its Hub id")),
    VerbCase("card-validation-nested-too-deep",
             lambda r: ["card", str(_deep_report(quantized(r))), *NAMES],
             ("validation.json", "nested deeper than 64 levels")),
    VerbCase("push-changed-never-validated", lambda r: [*_push(changed(quantized(r)))],
             ("the artifact differs from its manifest", "model.safetensors changed after export")),
    VerbCase("push-file-name-forges-a-line", lambda r: [*_push(named(quantized(r), "x\nerror: forged"))],
             ("files not in the manifest", "'x\\nerror: forged'")),
    VerbCase("estimate-another-artifacts-report",
             lambda r: ["estimate", str(quantized(r)), "--verify-ms", "2", "--validation",
                        str(acceptance_report(r / "other.json", r / "fp8", foreign=True)), "--write"],
             ("other.json", "field 'artifact_files'", "belongs to another artifact")),
    VerbCase("estimate-hand-edited-acceptance",
             lambda r: ["estimate", str(quantized(r)), "--verify-ms", "2", "--validation",
                        str(acceptance_report(r / "edited.json", r / "fp8", rates=[0.95, 0.9, 0.85])), "--write"],
             ("edited.json", "field 'metrics.acceptance_length_fp8'", "is not 1 + the sum")),
    # gguf and bench --engine llamacpp: refused at the options, before llama.cpp's tools are looked for
    VerbCase("gguf-calib-without-draft-vocab",
             lambda r: ["gguf", str(tiny(r)), str(r / "out"), "--target", str(r), "--calib", str(calib_set(r))],
             ("field 'calib'", "--calib is read only for --draft-vocab")),
    VerbCase("gguf-pre-tokenizer-forges-a-line",
             lambda r: ["gguf", str(tiny(r)), str(r / "out"), "--target", str(r), "--pre-tokenizer", "gpt\nerror: x"],
             ("field 'pre_tokenizer'", "is not a pre-tokenizer name")),
    VerbCase("bench-llamacpp-without-one-slot",
             lambda r: ["bench", str(quantized(r)), "--engine", "llamacpp", "--target", str(r), "--slots", "4"],
             ("field 'slots'", "[4] lacks 1")),
    VerbCase("bench-llamacpp-slot-level-twice",
             lambda r: ["bench", str(quantized(r)), "--engine", "llamacpp", "--target", str(r), "--slots", "1,1"],
             ("field 'slots'", "[1, 1] repeats a level")),
    # what reaches an engine is judged before any starts; a number past any bound stops in the pipeline file too
    VerbCase("bench-engine-args-reserved-tokenizer",
             lambda r: ["bench", str(quantized(r)), "--target", str(r), "--engine-args", '{"tokenizer": "/etc"}'],
             ("engine_args.tokenizer", "set by bench itself")),
    VerbCase("bench-engine-args-key-with-escape",
             lambda r: ["bench", str(quantized(r)), "--target", str(r), "--engine-args", '{"seed\\u001b[2J": 1}'],
             ("field 'engine_args'", "not a vllm.LLM argument name")),
    VerbCase("run-layout-number-past-every-bound",
             lambda r: ["run", str(tiny_pipeline(r, "bench:\n  pipeline_parallel_size: 100000000000000000000\n"))],
             ("field 'bench.pipeline_parallel_size'", "is not an integer in 1..2147483647")),
    VerbCase("run-engine-args-flag-spelling",
             lambda r: ["run", str(tiny_pipeline(r, "target: org/t\nbench:\n  engine_args: {max-num-batched-tokens: 8, "
                                                    "tensor-parallel-size: 2}\n")), "--dry-run"],
             ("field 'bench.engine_args'", "the layout option --tensor-parallel-size")),
    VerbCase("run-push-base-model-a-local-path",
             lambda r: ["run", str(pipeline(r, f"source: {tiny(r)}\nworkdir: {r / 'work'}\npush:\n  repo_id: org/x\n"
                                               "  base_model: ../draft\n")), "--dry-run"],
             ("field 'push.base_model'", "the card names the base_model by its Hub id")),
    VerbCase("validate-device-not-there",
             lambda r: ["validate", str(quantized(r)), "--device", "cuda:7", "--no-kernel"],
             ("field 'device'", "'cuda:7': this machine has")),
    # sensitivity
    VerbCase("sensitivity-calib-shard-outside",
             lambda r: ["sensitivity", str(tiny(r)), "--calib", str(index_shard_outside(r, calib_set(r))),
                        "--device", "cpu"],
             ("calib.json", "field 'shards.file'", "'../elsewhere/shard-00000.safetensors'")),
    VerbCase("sensitivity-nan-states",
             lambda r: ["sensitivity", str(tiny(r)), "--calib", str(nan_states(calib_set(r))), "--device", "cpu"],
             ("shard-00000.safetensors sample 1", "field 'aux_hidden_states'", "1 NaN/Inf value(s)")),
    VerbCase("sensitivity-truncated-shard",
             lambda r: ["sensitivity", str(tiny(r)), "--calib", str(truncated_shard(calib_set(r))),
                        "--device", "cpu"],
             ("shard-00000.safetensors", "cannot read this calibration shard")),
    VerbCase("sensitivity-nan-weight",
             lambda r: ["sensitivity", str(poked_tiny(r)), "--calib", str(calib_set(r)), "--device", "cpu"],
             (SINGLE, "tensor 'fc.weight'", "NaN/Inf")),
    VerbCase("sensitivity-index-shards-not-a-list",
             lambda r: ["sensitivity", str(tiny(r)), "--calib",
                        str(edit_calib_index(calib_set(r), lambda i: i.update(shards={"file": "x"}))),
                        "--device", "cpu"],
             ("calib.json", "field 'shards'", "is not a list")),
    # calibrate --from-dump
    VerbCase("calibrate-import-nan-states",
             lambda r: ["calibrate", str(r / "cal-out"), "--draft", str(calib_draft(r)), "--from-dump",
                        str(nan_states(calib_set(r, "dump")))],
             ("sample 1", "field 'aux_hidden_states'", "NaN/Inf")),
    VerbCase("calibrate-import-shard-outside",
             lambda r: ["calibrate", str(r / "cal-out"), "--draft", str(calib_draft(r)), "--from-dump",
                        str(index_shard_outside(r, calib_set(r, "dump")))],
             ("calib.json", "field 'shards.file'", "not a path inside the calibration folder")),
)


NAMES = ("--repo-id", "org/draft-fp8", "--target", "org/target", "--base-model", "org/draft")


def _deep_report(out):
    """OUT with a validation.json nested 100,000 levels deep (the docs promise a 64-level limit)."""
    (out / "validation.json").write_text("[" * 100_000 + "]" * 100_000)
    return out


def _push(out: Path) -> list[str]:
    return ["push", str(out), "--repo-id", "org/draft-fp8", "--dry-run"]


def changed(out: Path) -> Path:
    """One byte of the weights changed after quantize (the manifest still lists the old sha256)."""
    data = bytearray((out / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (out / "model.safetensors").write_bytes(bytes(data))
    return out


def named(out: Path, name: str) -> Path:
    (out / name).write_text("not in the manifest")
    return out


def acceptance_report(path: Path, out: Path, *, foreign: bool = False, rates=(0.8, 0.6, 0.45)) -> Path:
    """A passing report with measured acceptance for the artifact OUT (`foreign`: naming other files' sha256) whose
    acceptance length is 1 + the sum of the per-position rates the report was written with."""
    files = {p.name: "0" * 64 if foreign else hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()
             if p.name not in ("eagle3_quant.json", "README.md")}
    metrics = {"per_position_acceptance_fp8": list(rates), "acceptance_length_fp8": 1 + sum((0.8, 0.6, 0.45)),
               "k": 3, "drafts": 6000}
    path.write_text(json.dumps({"report_version": 1, "passed": True, "artifact": out.name, "artifact_files": files,
                                "checks": [], "metrics": metrics}))
    return path


def edit_manifest_text(out: Path, text: str) -> Path:
    (out / "eagle3_quant.json").write_text(text)
    return out


def nan_manifest(out: Path) -> Path:
    return edit_manifest(out, lambda d: d.update(device=float("nan")))


def foreign_report(root: Path) -> Path:
    """A passing report written for another artifact (other weights) copied into this one."""
    out = quantized(root)
    files = {p.name: "0" * 64 for p in out.iterdir() if p.name not in ("eagle3_quant.json", "README.md")}
    (out / "validation.json").write_text(json.dumps({"report_version": 1, "passed": True, "artifact": "other-fp8",
                                                     "artifact_files": files, "checks": [], "metrics": {}}))
    return out


def unbound_report(root: Path) -> Path:
    out = quantized(root)
    (out / "validation.json").write_text(json.dumps({"report_version": 1, "passed": True, "checks": []}))
    return out


def poked_tiny(root: Path) -> Path:
    src = tiny(root)
    poke(src / SINGLE, "fc.weight", (1, 2), float("nan"))
    return src


def calib_draft(root: Path) -> Path:
    """A draft whose taps and sizes match calib_set's states (hidden_states 1, 2, 3)."""
    return write_synthetic_draft(root / "draft", "tiny", aux_layer_ids=[0, 1, 2])   # SpecForge counts outputs


assert len({c.id for c in VERB_CASES}) == len(VERB_CASES)
