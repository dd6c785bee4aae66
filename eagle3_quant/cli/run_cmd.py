from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from eagle3_quant.cli.app import verb


@verb("run")
def run_command(
    pipeline: Annotated[Path, typer.Argument(help="Pipeline file (YAML), e.g. pipelines/kimi-k2.5-eagle3-fp8.yaml.")],
    overrides: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a field: --set push.revision=fp8 --set quantize.device=cpu. Repeatable.")] = None,
    workdir: Annotated[str | None, typer.Option(help="Override workdir.")] = None,
    repo_id: Annotated[str | None, typer.Option("--repo-id", help="Override push.repo_id.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check the file and say what each stage would do, "
                                          "and why; run, write and send nothing.")] = False,
    no_push: Annotated[bool, typer.Option("--no-push", help="Run every stage but push (bench included).")] = False,
) -> None:
    """Run calibrate -> quantize -> validate -> bench -> push from one file; stages with valid output are skipped."""
    from eagle3_quant.cli.render_publish import print_pipeline

    settings = [*(overrides or []), *flag_overrides(workdir, repo_id, no_push)]
    if dry_run:
        from eagle3_quant.pipeline import plan_pipeline

        result = plan_pipeline(pipeline, settings)
    else:
        from eagle3_quant.cli.progress import TerminalProgress
        from eagle3_quant.pipeline import run_pipeline

        result = run_pipeline(pipeline, settings, progress=TerminalProgress())
    print_pipeline(result)
    if not result.ok:
        raise typer.Exit(2)


def flag_overrides(workdir: str | None = None, repo_id: str | None = None, no_push: bool = False
                   ) -> list[tuple[str, Any]]:
    """The fields `run`'s own flags set, as values (a flag's text is never read as YAML: `--workdir 007`)."""
    flags: list[tuple[str, Any]] = [("workdir", workdir)] if workdir is not None else []
    flags += [("push.repo_id", repo_id)] if repo_id is not None else []
    flags += [("push.enabled", False)] if no_push else []
    return flags
