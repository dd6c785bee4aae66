"""`make demo`: build the built-in tiny draft, quantize it, show what was done. No download."""

from __future__ import annotations

import sys
from pathlib import Path

from eagle3_quant.cli.render import console, human_bytes, print_inspection, print_loader_check
from eagle3_quant.inspection import inspect_draft
from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.synthetic import write_synthetic_draft


def run_demo(folder: Path) -> None:
    source = folder / "tiny-eagle3-bf16"
    if not (source / "config.json").exists():
        write_synthetic_draft(source, "tiny")
    console.rule("1. inspect the BF16 draft (headers only)")
    print_inspection(inspect_draft(source))
    console.rule("2. quantize with AMD Quark (ptpc_fp8)")
    result = quantize_draft(source, folder / "tiny-eagle3-fp8", force=True)
    print_loader_check(result.loader_check)
    console.rule("3. manifest")
    data = result.manifest.data
    console.print(f"{result.manifest_path}  (scheme {data['scheme']['name']}, {result.seconds:.1f} s)")
    for entry in data["outputs"]:
        console.print(f"  {entry['path']:<32} {human_bytes(entry['size']):>10}  sha256 {entry['sha256'][:16]}…")
    console.print(f"vLLM exclude patterns: {data['exclude']['vllm_patterns']}")


if __name__ == "__main__":
    run_demo(Path(sys.argv[1] if len(sys.argv) > 1 else "demo-out"))
