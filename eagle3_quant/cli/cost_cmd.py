from __future__ import annotations

import json
from typing import Annotated

import typer

from eagle3_quant.cli.app import verb
from eagle3_quant.cli.numbers import number_option
from eagle3_quant.devices import DEVICE_PROFILES
from eagle3_quant.options import COUNT, STEPS


@verb("cost")
def cost_command(
    src: Annotated[str, typer.Argument(help="Draft folder (BF16 source or quantized output) or Hub repo id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    device_profile: Annotated[str | None, typer.Option(
        "--device-profile", help=f"{', '.join(DEVICE_PROFILES)}: print the bandwidth floor of a draft step.")] = None,
    draft_vocab: Annotated[int | None, number_option(
        COUNT, "--draft-vocab", help="Also project a pruned draft vocabulary of N tokens.")] = None,
    k: Annotated[int, number_option(STEPS, "--k", help="Draft steps per cycle for the cycle floor.")] = 3,
    revision: Annotated[str | None, typer.Option(help="Hub revision.")] = None,
) -> None:
    """Bytes, FLOPs and KV cache of one draft step, BF16 vs as written, from headers only. Instant."""
    from eagle3_quant.cost import checkpoint_cost

    report = checkpoint_cost(src, revision=revision, draft_vocab=draft_vocab, device_profile=device_profile, k=k)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2, allow_nan=False))
        return
    from eagle3_quant.cli.render_cost import print_cost

    print_cost(report)
