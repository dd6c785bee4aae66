"""`make gpu-check` (`python -m benchmarks.gpu_check`): the project's GPU paths on this machine's first GPU, in one run.

Needs torch, the project and amd-quark (no vLLM, no network); works with an editable or a regular install, from the
checkout's root. Parts, each ``passed``, ``failed`` or ``skipped`` with its reason:

1. ``environment``: device, torch / CUDA or HIP, transformers, amd-quark, triton, how the project is installed.
2. ``gpu_tests``: the tests marked ``gpu`` (pytest), counted by outcome.
3. ``kernel:<shape>``: the kernel check (validate/kernel_check.py) on synthetic Llama-3.1-8B and Kimi-K2.5 shaped
   PTPC drafts: library, operand types, scale mode, numerics, per-linear timing.
4. ``same_bytes``: the real pair's draft quantized with the defaults on the CPU and on the GPU: every output file's
   sha256 must agree.
5. ``step:<shape>``: a whole draft step, BF16 / PTPC / static FP8, eager and as a CUDA graph, beside the cost floor
   (benchmarks/draft_step.py).

Writes ``gpu-check.json`` (``--json``) and prints one table; exit status 1 when a part failed. On a CPU the GPU parts
report ``skipped`` with the reason, never ``passed``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHAPES = ("llama3-8b", "kimi-k2.5")
DEFAULT_JSON = Path("gpu-check.json")
TEST_TIMEOUT_S = 240


@dataclass(frozen=True)
class Part:
    name: str
    status: str                # passed | failed | skipped
    detail: str                # one line a person reads
    seconds: float = 0.0
    data: dict = field(default_factory=dict)


def _versions() -> dict:
    found = {}
    for dist in ("torch", "transformers", "amd-quark", "triton", "safetensors", "eagle3-quant"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def install_kind() -> str:
    """"editable", "regular" or "checkout only" (no installed distribution; a build's egg-info does not count)."""
    urls = [d.read_text("direct_url.json") for d in metadata.distributions()
            if (d.metadata["Name"] or "").lower() == "eagle3-quant" and d.read_text("RECORD") is not None]
    if not urls:
        return "checkout only"
    return "editable" if any(u and json.loads(u).get("dir_info", {}).get("editable") for u in urls) else "regular"


def environment(device: str) -> Part:
    import torch

    from eagle3_quant.validate.platform import detect_platform

    platform = detect_platform(device)
    data = {"platform": platform.to_dict(), "versions": _versions(), "install": install_kind(),
            "python": sys.version.split()[0]}
    where = f"{platform.name} ({platform.arch})" if platform.kind != "cpu" else "CPU only"
    versions = data["versions"]
    detail = f"{where}; torch {torch.__version__} ({platform.kind} {platform.runtime_version or '-'}); " \
             f"amd-quark {versions['amd-quark']}; triton {versions['triton']}; {data['install']} install"
    return Part("environment", "passed" if platform.kind != "cpu" else "skipped",
                detail if platform.kind != "cpu" else f"no GPU: {detail}", data=data)


def junit_outcomes(xml_text: str) -> dict[str, list[str]]:
    """passed / failed / skipped test ids from a pytest JUnit XML report."""
    outcomes: dict[str, list[str]] = {"passed": [], "failed": [], "skipped": []}
    for case in ET.fromstring(xml_text).iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes["failed"].append(test)
        elif case.find("skipped") is not None:
            outcomes["skipped"].append(test)
        else:
            outcomes["passed"].append(test)
    return outcomes


def gpu_tests(gpu: bool) -> Part:
    with tempfile.TemporaryDirectory(prefix="eagle3-gpu-tests-") as tmp:
        report = Path(tmp) / "junit.xml"
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                               f"--junitxml={report}", "tests"], cwd=REPO, capture_output=True, text=True,
                              timeout=TEST_TIMEOUT_S)
        if not report.is_file():
            return Part("gpu_tests", "failed", f"pytest wrote no report (exit {done.returncode}): "
                        + " | ".join((done.stderr or done.stdout).strip().splitlines()[-2:]))
        outcomes = junit_outcomes(report.read_text())
    counts = {k: len(v) for k, v in outcomes.items()}
    detail = f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
    if outcomes["failed"]:
        status, detail = "failed", detail + ": " + ", ".join(t.rsplit("::", 1)[-1] for t in outcomes["failed"])
    elif not counts["passed"]:
        status = "skipped" if not gpu else "failed"
        detail += " (no GPU here)" if not gpu else " (a GPU is here but no GPU test ran)"
    else:
        status = "passed"
    return Part("gpu_tests", status, detail, data={"outcomes": outcomes, "exit": done.returncode})


def kernel_part(shape: str, artifact: Path, device: str) -> Part:
    from eagle3_quant.validate.kernel_check import run_kernel_check
    from eagle3_quant.validate.linear_timing import timing_lines

    kernel = run_kernel_check(artifact, device)
    timing = kernel.get("timing")
    table = (timing_lines(timing) + layer_lines(timing)) if timing else [f"timing: {kernel.get('timing_skipped')}"]
    return Part(f"kernel:{shape}", kernel.get("status", "failed"), kernel.get("reason", ""),
                data={**kernel, "table": table})


def layer_lines(timing: dict) -> list[str]:
    """Per linear, ms by batch size: BF16, quantization + GEMM, the GEMM alone, the tensorwise GEMM."""
    columns = (("bf16_ms", "BF16"), ("fp8_ms", "quant+GEMM"), ("gemm_only_ms", "GEMM"),
               ("tensorwise_ms", "tensorwise"))
    lines = [f"per linear, ms at {'/'.join(map(str, timing['batch_sizes']))} rows:"]
    for layer in timing.get("layers", []):
        cells = [f"{label} " + "/".join(f"{t:.3f}" for t in layer[key]) for key, label in columns if layer.get(key)]
        lines.append(f"  {layer['layer']} {'x'.join(map(str, layer['shape']))}: " + "; ".join(cells))
    return lines


def output_digests(made) -> dict[str, str]:
    """File -> sha256 of a quantize result, as its manifest records them (the manifest itself, which names the
    device, is not among them)."""
    return {digest.path: digest.sha256 for digest in made.manifest.outputs}


def same_bytes(device: str, gpu: bool, workdir: Path) -> Part:
    from eagle3_quant.quantize.api import quantize_draft
    from fixtures.real_pair.draft_files import DRAFT_DIR

    cpu = output_digests(quantize_draft(DRAFT_DIR, workdir / "rp-cpu", device="cpu"))
    if not gpu:
        return Part("same_bytes", "skipped", "no GPU: only the CPU artifact was made", data={"cpu": cpu})
    made = output_digests(quantize_draft(DRAFT_DIR, workdir / "rp-gpu", device=device))
    differ = sorted(name for name in cpu.keys() | made.keys() if cpu.get(name) != made.get(name))
    detail = f"{len(cpu)} files, sha256 identical on CPU and {device}" if not differ else \
        f"differ between CPU and {device}: {', '.join(differ)}"
    return Part("same_bytes", "failed" if differ else "passed", detail, data={"cpu": cpu, device: made})


def step_part(shape: str, source: Path, artifact: Path, device: str) -> Part:
    from benchmarks.draft_step import run_step_bench

    record = run_step_bench(shape, source, artifact, device)
    return Part(f"step:{shape}", record.get("status", "failed"), record.get("summary", ""), data=record)


def _timed(name: str, make: Callable[[], Part]) -> Part:
    started = time.perf_counter()
    try:
        part = make()
    except Exception as exc:          # one part's failure is reported, the others still run
        part = Part(name, "failed", f"{type(exc).__name__}: {exc}")
    return Part(part.name, part.status, part.detail, round(time.perf_counter() - started, 1), part.data)


def run_gpu_check(device: str | None = None, shapes: tuple[str, ...] = SHAPES, tests: bool = True) -> list[Part]:
    import torch

    from benchmarks.draft_step import write_step_source

    gpu = torch.cuda.is_available() and (device is None or device.startswith("cuda"))
    device = device or ("cuda" if gpu else "cpu")
    parts = [_timed("environment", lambda: environment(device))]
    if tests:
        parts.append(_timed("gpu_tests", lambda: gpu_tests(gpu)))
    with tempfile.TemporaryDirectory(prefix="eagle3-gpu-check-") as tmp:
        work = Path(tmp)
        parts.append(_timed("same_bytes", lambda: same_bytes(device, gpu, work)))
        for shape in shapes:
            if not gpu:
                parts += [Part(f"kernel:{shape}", "skipped", "no CUDA/ROCm GPU: the FP8 GEMM path cannot run here"),
                          Part(f"step:{shape}", "skipped", "no CUDA/ROCm GPU: a draft step is timed on a GPU only")]
                continue
            from eagle3_quant.quantize.api import quantize_draft

            source = write_step_source(shape, work / f"{shape}-bf16")
            artifact = quantize_draft(source, work / f"{shape}-ptpc", device=device).output
            parts.append(_timed(f"kernel:{shape}", lambda s=shape, a=artifact: kernel_part(s, a, device)))
            parts.append(_timed(f"step:{shape}", lambda s=shape, src=source, a=artifact: step_part(s, src, a, device)))
    return parts


def render(parts: list[Part]) -> str:
    width = max(len(p.name) for p in parts)
    lines = [f"{'part':{width}}  {'status':8} {'s':>6}  detail"]
    lines += [f"{p.name:{width}}  {p.status:8} {p.seconds:6.1f}  {p.detail}" for p in parts]
    for part in parts:
        for line in part.data.get("table", []):
            lines.append(f"  {part.name}: {line}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda, cuda:1, ... (default: the first GPU)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where the record goes")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="synthetic draft shapes for the kernel and step")
    parser.add_argument("--no-tests", action="store_true", help="skip the GPU-only tests")
    args = parser.parse_args(argv)
    shapes = tuple(s for s in args.shapes.split(",") if s)
    parts = run_gpu_check(args.device, shapes, tests=not args.no_tests)
    args.json.write_text(json.dumps({"parts": [asdict(p) for p in parts]}, indent=1, allow_nan=False,
                                    default=str) + "\n")
    print(render(parts))
    print(f"record: {args.json}")
    return 1 if any(p.status == "failed" for p in parts) else 0


if __name__ == "__main__":
    sys.exit(main())
