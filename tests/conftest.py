from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import pytest

from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.util.progress import Silent
from fixtures.synthetic import write_synthetic_draft

# hub_server: a local Hub, validated OUT copies; tiny_pair: the committed tiny real target/draft pair
pytest_plugins = ["calib_capture_fixtures", "hub_server.fixtures", "tiny_pair_fixtures"]


class Counted(Silent):
    """A Progress that keeps each task's name, total, unit and the items advanced."""

    def __init__(self) -> None:
        self.tasks: list[list] = []

    @contextmanager
    def task(self, name, total, done=0, unit="prompts"):
        row = [name, total, unit, 0]
        self.tasks.append(row)

        def advance(items, tokens=0):
            row[3] += items

        yield advance


def load_tensors(folder: Path) -> dict:
    """Every tensor of every safetensors file in `folder`, by name."""
    from safetensors import safe_open

    tensors = {}
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as fh:
            tensors.update({k: fh.get_tensor(k) for k in fh.keys()})
    return tensors


def folder_hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(autouse=True)
def hub_probe_forgotten():
    """The Hub probe's offline mode lasts a process; each test starts with the environment's own."""
    yield
    from eagle3_quant.reading import hub_reach

    hub_reach.forget()


@pytest.fixture
def make_draft(tmp_path: Path) -> Callable[..., Path]:
    """Build a tiny synthetic draft in tmp_path: make_draft(fmt=..., shards=..., name=...)."""

    def build(fmt: DraftFormat = DraftFormat.SPECFORGE, shards: int = 1, name: str = "src", **kwargs) -> Path:
        return write_synthetic_draft(tmp_path / name, "tiny", fmt, shards=shards, **kwargs)

    return build


@pytest.fixture(scope="session")
def quantized_tiny(tmp_path_factory) -> Callable[..., tuple[Path, Path]]:
    """One Quark run per (format, shards), shared by the tests that only read the result."""
    cache: dict[tuple, tuple[Path, Path]] = {}

    def get(fmt: DraftFormat = DraftFormat.SPECFORGE, shards: int = 1) -> tuple[Path, Path]:
        from eagle3_quant.quantize.api import quantize_draft

        key = (fmt, shards)
        if key not in cache:
            root = tmp_path_factory.mktemp(f"q-{fmt.value}-{shards}")
            src = write_synthetic_draft(root / "src", "tiny", fmt, shards=shards)
            # SGLang 0.5.23 serves only the SpecForge format of these (engines/draft_support.py)
            engine = "both" if fmt is DraftFormat.SPECFORGE else "vllm"
            # an original EAGLE config names no aux layer ids: published on the engines' defaults only when asked
            taps = "as-is" if fmt is DraftFormat.EAGLE else "trained"
            quantize_draft(src, root / "out", device="cpu", engine=engine, serve_taps=taps)
            cache[key] = (src, root / "out")
        return cache[key]

    return get
