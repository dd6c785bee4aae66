from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.cli.app import verb
from eagle3_quant.cli.numbers import number_option
from eagle3_quant.devices import DEVICE_PROFILES
from eagle3_quant.errors import OptionsError
from eagle3_quant.options import STEPS, TIME
from eagle3_quant.records.bench_run import BENCH_NAME
from eagle3_quant.records.validation_report import REPORT_NAME


@verb("estimate")
def estimate_command(
    out: Annotated[Path, typer.Argument(help="Quantized draft folder.")],
    verify_ms: Annotated[float | None, number_option(
        TIME, "--verify-ms", help="Time of one target forward (verification), ms (a GGUF draft: the costs "
        f"llama.cpp measured in OUT/{BENCH_NAME}).")] = None,
    validation: Annotated[Path | None, typer.Option(
        help=f"Validation report with per-position acceptance (default: OUT/{REPORT_NAME}).")] = None,
    draft_ms: Annotated[float | None, number_option(
        TIME, "--draft-ms", help="Draft-side time of one cycle, ms (default: measured kernel timings, else the "
        "bandwidth floor).")] = None,
    k: Annotated[int | None, number_option(STEPS, "--k", help="Draft steps per cycle (default: the report's k).")]
    = None,
    device_profile: Annotated[str, typer.Option(
        "--device-profile", help=f"{', '.join(DEVICE_PROFILES)}: bandwidth for the floor.")] = "mi355x",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    write: Annotated[bool, typer.Option("--write", help="Write OUT/speedup_estimate.json, which the model card "
                                        "then shows with its inputs (default: print only).")] = False,
) -> None:
    """Estimate the speedup of serving with this draft: tokens per cycle from measured acceptance, a cycle model."""
    from eagle3_quant.records.gguf_artifact import is_gguf_artifact
    from eagle3_quant.speedup import estimate_draft, estimate_gguf

    if is_gguf_artifact(out):
        for flag, value in (("--verify-ms", verify_ms), ("--draft-ms", draft_ms)):
            if value is not None:
                raise OptionsError(f"{flag}: a GGUF draft's costs are what llama.cpp measured (OUT/{BENCH_NAME})",
                                   field=flag[2:].replace("-", "_"), hint=f"leave {flag} out")
        result = estimate_gguf(out, validation=validation, k=k, write=write)
    else:
        if verify_ms is None:
            raise OptionsError("--verify-ms is required (the time of one target forward, ms)", field="verify_ms")
        result = estimate_draft(out, verify_ms, validation=validation, draft_ms=draft_ms, k=k,
                                device_profile=device_profile, write=write)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2, allow_nan=False))
        return
    from eagle3_quant.cli.render_cost import print_estimate

    print_estimate(result, out / "speedup_estimate.json" if write else None)
