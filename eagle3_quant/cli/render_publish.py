"""Terminal output for push, card and run. Pure presentation."""

from __future__ import annotations

import typer
from rich.table import Table

from eagle3_quant.cli.render import console
from eagle3_quant.errors import one_line
from eagle3_quant.util.formatting import human_bytes


def print_push(result) -> None:
    title = (f"dry run: would send to {result.repo_id} ({result.revision})"
             if result.dry_run else f"{result.repo_id} ({result.revision})")
    table = Table(title=title)
    for col in ("file", "size", "kind", "sha256", "action"):
        table.add_column(col)
    for f in result.files:
        action = "would send" if result.dry_run else f.action
        table.add_row(f.path, human_bytes(f.size), f.kind, f.sha256[:16], action)
    console.print(table)
    console.print(f"total {human_bytes(sum(f.size for f in result.files))} in {len(result.files)} files; "
                  f"commit message: {result.commit_message}", markup=False)
    if result.validation_state != "passed":
        console.print(f"[yellow]warning:[/] validation {result.validation_state}; the card says so")
    if result.dry_run:
        typer.echo(f"----- {result.card.path or 'README.md'} (model card) -----")
        typer.echo(result.card.text)
        typer.echo("----- end of model card -----")
        console.print("dry run: nothing was sent and nothing was written")
        return
    for name in result.remote_only:
        console.print(f"note: {name} is on the remote but not in OUT (left as it is)", markup=False)
    if result.commit_oid:
        console.print(f"pushed {len(result.uploaded)} changed file(s) to {result.repo_url}: commit "
                      f"{result.commit_oid}" + (f" (attempt {result.attempts})" if result.attempts > 1 else ""),
                      markup=False)
    else:
        console.print(f"no changes: {result.repo_url} ({result.revision}) already holds these files at commit "
                      f"{result.head}; no commit made", markup=False)
    if result.pr_url:
        console.print(f"pull request: {result.pr_url}", markup=False)
    if result.tag:
        console.print(f"tag {result.tag} -> {result.commit_oid or result.head}", markup=False)


def print_pipeline(result) -> None:
    if result.push is not None:
        print_push(result.push)
    spec = result.spec
    if result.planned:
        from eagle3_quant.pipeline import paths_line

        console.print(paths_line(spec), markup=False, soft_wrap=True)
    title = f"pipeline {spec.path}: {spec.source} -> {spec.out}"
    table = Table(title=f"dry run of {title}: nothing was run, written or sent" if result.planned else title)
    for col in ("stage", "status", "seconds", "detail"):
        table.add_column(col)
    colours = {"ran": "green", "would run": "green", "skipped": "cyan", "failed": "red", "not run": "red",
               "unavailable": "yellow"}
    for s in result.stages:
        colour = colours.get(s.status, "white")
        table.add_row(s.name, f"[{colour}]{s.status}[/]", f"{s.seconds:.1f}", s.detail.replace("[", "\\["))
    console.print(table)
    for s in result.stages:
        if s.status == "failed":
            typer.echo(one_line(f"error: {s.name}: {s.detail}"), err=True)
