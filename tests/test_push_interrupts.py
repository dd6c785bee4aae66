"""Ctrl-C and SIGKILL in the middle of a push: the Hub holds nothing or the whole commit, and a re-run completes.

The real CLI pushes from a subprocess to the local test Hub (tests/hub_server); the server holds the LFS upload
or the commit request open, the client is signalled while it waits, then the server goes on with whatever
it received.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading

import pytest
from hub_server.server import HubHandler

from eagle3_quant.export.push import push_draft
from eagle3_quant.records.public_names import LOCAL_RECORD

pytestmark = pytest.mark.slow   # the OUT fixture is a real Quark output
REPO = "alice/tiny-eagle3-fp8"


def hold(monkeypatch, step: str) -> tuple[threading.Event, threading.Event, threading.Event]:
    """Make the server stop at `step` (a HubHandler method) until released; returns (reached, release, done)."""
    reached, release, done = threading.Event(), threading.Event(), threading.Event()
    original = getattr(HubHandler, step)

    def held(self, *args):
        reached.set()
        release.wait(120)
        try:
            return original(self, *args)
        finally:
            done.set()

    monkeypatch.setattr(HubHandler, step, held)
    return reached, release, done


def published(server, out) -> dict[str, str]:
    """path -> sha256 of the files on main, .gitattributes aside; checked against OUT's bytes."""
    repo = server.store.repos[REPO]
    files = repo.commits[repo.branches["main"]].files
    return {path: entry.sha256 for path, entry in files.items() if path != ".gitattributes"}


def local_files(out) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir() if not p.name.startswith(".")}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "sigkill"])
@pytest.mark.parametrize("step", ["_lfs_put", "_commit_ndjson"], ids=["during-lfs-upload", "during-commit"])
def test_interrupted_push_leaves_no_half_commit_and_rerun_completes(make_out, hub, monkeypatch, sig, step):
    out = make_out()
    reached, release, done = hold(monkeypatch, step)
    proc = subprocess.Popen([sys.executable, "-c", "from eagle3_quant.cli import main; main()", "push", str(out),
                             "--repo-id", REPO], env=dict(os.environ), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert reached.wait(120), proc.communicate(timeout=5)
        proc.send_signal(sig)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass   # an upload worker thread is still waiting for the held response
    finally:
        release.set()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == (130 if sig == signal.SIGINT else -signal.SIGKILL), err
    assert "Traceback" not in err
    assert not [p for p in out.iterdir() if p.name.startswith(".") and p.name != LOCAL_RECORD]   # no temp card
    assert done.wait(60)   # the server went on with whatever it had received

    expected = local_files(out)
    assert published(hub, out) in ({}, expected)   # nothing, or the whole commit: never a part of it
    if step == "_lfs_put":
        assert published(hub, out) == {}   # the commit request was never sent
    push_draft(out, REPO)                  # re-running completes
    assert published(hub, out) == expected
    assert hub.store.commit_count(REPO) == 2   # the repo's first commit and exactly one commit of the draft
