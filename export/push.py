"""`push_draft`: publish a validated FP8 draft folder on the Hub, with its model card, idempotently."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, replace
from pathlib import Path

from eagle3_quant import __version__
from eagle3_quant.errors import HubError, NotMeasuredError, NotValidatedError, PublishError
from eagle3_quant.export.card import CARD_NAME, DraftCard, build_card, write_card
from eagle3_quant.export.hub_session import TRANSIENT, HubSession, hub_session, require_online, resolve_token
from eagle3_quant.export.options import PushOptions
from eagle3_quant.export.push_files import PushFile, files_to_send, same_as_remote
from eagle3_quant.options import build_options
from eagle3_quant.reading.config import read_config_file
from eagle3_quant.reading.repo_ids import repo_id_problem
from eagle3_quant.records.evidence import check_integrity, manifest_digests
from eagle3_quant.records.manifest import Manifest
from eagle3_quant.records.validation_report import acceptance_measurements, read_validation

DEFAULT_BRANCH = "main"
ATTEMPTS = 3            # whole-push attempts on a transient Hub error (the commit POST itself is not retried)
RETRY_WAIT_S = 1.0


@dataclass(frozen=True)
class PushResult:
    repo_id: str
    endpoint: str | None        # None on a dry run (nothing contacted)
    repo_url: str | None
    revision: str
    commit_oid: str | None      # None when nothing changed (no commit made) or on a dry run
    commit_url: str | None
    pr_url: str | None
    tag: str | None
    head: str | None            # the revision's commit after the push
    files: tuple[PushFile, ...]
    card: DraftCard
    commit_message: str
    validation_state: str
    dry_run: bool
    attempts: int
    remote_only: tuple[str, ...] = ()   # files on the remote revision that OUT does not have (left untouched)

    @property
    def uploaded(self) -> tuple[PushFile, ...]:
        return tuple(f for f in self.files if f.action == "upload")


def default_commit_message(manifest: Manifest, base_model: str) -> str:
    """Names the scheme, the BF16 draft by its Hub id (at the commit quantized, when it came from the Hub) and the
    tool's version."""
    source = manifest.source
    origin = source.repo_id or base_model
    if source.repo_id and source.commit:
        origin += f"@{source.commit[:12]}"
    if manifest.gguf is not None:
        return f"Upload {manifest.gguf.label} GGUF Eagle3 draft of {origin} for llama.cpp (eagle3-quant {__version__})"
    return f"Upload {manifest.scheme.name} FP8 Eagle3 draft of {origin} (eagle3-quant {__version__})"


def _check_arguments(repo_id: str, revision: str | None, create_pr: bool) -> None:
    problem = repo_id_problem(repo_id)
    if problem:
        raise PublishError(f"{repo_id!r} is {problem}", field="repo_id", hint="use ORG/NAME")
    if create_pr and revision not in (None, DEFAULT_BRANCH):
        raise PublishError("a pull request is always opened against main; do not combine it with a revision",
                           field="revision")


def _remote_state(session: HubSession, repo_id: str, revision: str) -> tuple[str, dict]:
    from huggingface_hub.hf_api import RepoFile

    head = session.call(session.api.model_info, repo_id, revision=revision).sha
    tree = session.call(lambda: list(session.api.list_repo_tree(repo_id, revision=head, recursive=True)))
    return head, {f.path: f for f in tree if isinstance(f, RepoFile)}


def _tag(session: HubSession, repo_id: str, tag: str, commit: str) -> None:
    refs = session.call(session.api.list_repo_refs, repo_id)
    existing = {t.name: t.target_commit for t in refs.tags}
    if tag in existing:
        if existing[tag] != commit:
            raise PublishError(f"tag {tag!r} already exists at {existing[tag][:12]}; tags are never moved",
                               field="tag", hint="choose a new tag")
        return
    session.call(session.api.create_tag, repo_id, tag=tag, revision=commit)


def _compare(session: HubSession, out: Path, repo_id: str, files: list[PushFile], base: str
             ) -> tuple[str, list[PushFile], tuple[str, ...]]:
    """The base revision's head, each file marked upload/unchanged, and remote files OUT lacks."""
    head, remote = _remote_state(session, repo_id, base)
    marked = [replace(f, action="unchanged" if same_as_remote(out, f, remote.get(f.path)) else "upload")
              for f in files]
    local = {f.path for f in files}
    return head, marked, tuple(sorted(p for p in remote if p not in local and p != ".gitattributes"))


def push_draft(out: str | Path, repo_id: str, options: PushOptions | None = None, **overrides) -> PushResult:
    """Publish OUT to `repo_id` (created if needed) with a generated model card.

    `options` (a `PushOptions`; keywords override its fields). Refuses, before any network request and in this
    order, when a file of OUT differs from the manifest or is not listed in it, when OUT has no passing validation
    report (unless allow_unvalidated), when its acceptance was measured neither by `validate --calib` nor by
    `bench` (unless allow_unmeasured), or when the card cannot name the target or the BF16 draft by its Hub id.
    Re-pushing identical content makes no commit.
    """
    opts = build_options(PushOptions, options, overrides)
    revision, create_pr, tag, dry_run = opts.revision, opts.create_pr, opts.tag, opts.dry_run
    out = Path(out)
    _check_arguments(repo_id, revision, create_pr)
    manifest = Manifest.read(out, PublishError)
    config, known = None, {}
    if manifest.gguf is None:      # a GGUF draft has no config.json: its metadata is in the file
        config, config_digest = read_config_file(out / "config.json")      # read once: the card's and the hash's
        known = {config_digest.path: config_digest}
    check_integrity(out, manifest, PublishError, known)   # integrity speaks first
    digests = manifest_digests(manifest)
    validation = read_validation(out, digests)
    if validation.state == "foreign":     # never published, not even with --allow-unvalidated
        raise NotValidatedError(f"refusing to publish: {validation.problem}", path=validation.path,
                                hint="run `eagle3-quant validate OUT` on this folder")
    if not validation.passed and not opts.allow_unvalidated:
        raise NotValidatedError(f"refusing to publish: {validation.problem}", path=validation.path,
                                hint="run `eagle3-quant validate OUT` first, or pass --allow-unvalidated: "
                                     "the card then says so")
    if not acceptance_measurements(out, validation, digests) and not opts.allow_unmeasured:
        raise NotMeasuredError(
            "refusing to publish: how often the target accepts this draft's tokens was never measured", path=out,
            hint="run `eagle3-quant validate OUT --calib CAL` (offline, on a calibration set) or `eagle3-quant "
                 "bench OUT --target TARGET` (vLLM's engine), or pass --allow-unmeasured (a pipeline: "
                 "push.allow_unmeasured: true): the card then says so")
    files = files_to_send(out, manifest)
    card = build_card(out, repo_id, target=opts.target, base_model=opts.base_model, pipeline=opts.pipeline,
                      validation=validation, manifest=manifest, config=config, checked=True)
    card_file = PushFile(CARD_NAME, card.size, hashlib.sha256(card.text.encode("utf-8")).hexdigest(), "card")
    files = sorted([*files, card_file], key=lambda f: f.path)
    message = opts.commit_message or default_commit_message(manifest, card.base_model)
    branch = revision or DEFAULT_BRANCH
    if dry_run:
        return PushResult(repo_id, None, None, branch, None, None, None, tag, None, tuple(files), card, message,
                          validation.state, True, 0)

    token = resolve_token()
    require_online(repo_id)
    card = write_card(out, card)
    with hub_session(token, repo_id) as session:
        session.call(session.api.whoami)
        repo_url = session.call(session.api.create_repo, repo_id, private=opts.private, exist_ok=True)
        if branch != DEFAULT_BRANCH:
            session.call(session.api.create_branch, repo_id, branch=branch, exist_ok=True)
        heads = []
        for attempt in range(1, ATTEMPTS + 1):
            try:
                head, marked, remote_only = _compare(session, out, repo_id, files,
                                                     DEFAULT_BRANCH if create_pr else branch)
                heads.append(head)
                changed = [f.path for f in marked if f.action == "upload"]
                info = session.call(
                    session.api.upload_folder, repo_id=repo_id, folder_path=str(out), allow_patterns=changed,
                    commit_message=message, revision=None if create_pr else branch, create_pr=create_pr,
                    parent_commit=None if create_pr else head) if changed else None
                break
            except HubError as exc:
                if exc.status not in TRANSIENT or attempt == ATTEMPTS:
                    raise
                time.sleep(RETRY_WAIT_S * 2 ** (attempt - 1))
        commit = info.oid if info is not None else None
        if info is None and heads[-1] != heads[0] and not create_pr:
            commit = heads[-1]  # an earlier attempt's commit landed although its response was lost
        new_head = commit if commit and not create_pr else head
        if tag:
            _tag(session, repo_id, tag, commit or head)
        return PushResult(repo_id, session.endpoint, str(repo_url), branch, commit,
                          info.commit_url if info else None, info.pr_url if info else None, tag, new_head,
                          tuple(marked), card, message, validation.state, False, attempt, remote_only)
