from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.cli.app import verb


@verb("run")
def run_command(
    pipeline: Annotated[Path, typer.Argument(help="Pipeline file (YAML), e.g. pipelines/kimi-k2.5-eagle3-fp8.yaml.")],
    overrides: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a field: --set push.revision=fp8 --set quantize.device=cpu. Repeatable.")] = None,
    workdir: Annotated[str | None, typer.Option(help="Override workdir.")] = None,
    repo_id: Annotated[str | None, typer.Option("--repo-id", help="Override push.repo_id.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Push as a dry run (prints, sends nothing).")] = False,
    no_push: Annotated[bool, typer.Option("--no-push", help="Run every stage but push (bench included).")] = False,
) -> None:
    """Run calibrate -> quantize -> validate -> bench -> push from one file; stages with valid output are skipped."""
    from eagle3_quant.cli.render_publish import print_pipeline
    from eagle3_quant.pipeline import run_pipeline

    result = run_pipeline(pipeline, [*(overrides or []), *flag_overrides(workdir, repo_id, dry_run, no_push)])
    print_pipeline(result)
    if not result.ok:
        raise typer.Exit(2)


def flag_overrides(workdir: str | None = None, repo_id: str | None = None, dry_run: bool = False,
                   no_push: bool = False) -> list[str]:
    """The `--set` overrides `run`'s own flags stand for."""
    flags = [f"workdir={workdir}"] if workdir else []
    flags += [f"push.repo_id={repo_id}"] if repo_id else []
    flags += ["push.dry_run=true"] if dry_run else []
    flags += ["push.enabled=false"] if no_push else []
    return flags
