"""Valid but unusual sources (they must quantize, with nothing lost) and failures while writing."""

from __future__ import annotations

import errno
import json
import subprocess

import pytest
import torch
from conftest import folder_hashes, load_tensors
from corpus.builders import Q_PROJ, SINGLE, file_tensors, pickle_draft, set_tensors, tiny, tree_state

from eagle3_quant.errors import ResourceError
from eagle3_quant.inspection import inspect_draft
from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.quantize.verify_export import same_bytes
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.reading.safetensors_header import read_header
from eagle3_quant.records.public_names import LOCAL_RECORD, recorded_source_path
from eagle3_quant.util import resources

pytestmark = pytest.mark.slow

FLOAT32_EPS = torch.finfo(torch.float32).eps   # 1.1920929e-07: Quark's scale for an all-zero row


def test_unknown_extra_tensors_are_kept_byte_identical(tmp_path):
    src = tiny(tmp_path)
    extras = {"custom_head.weight": torch.randn(8, 64).to(torch.bfloat16),
              "midlayer.self_attn.rotary_emb.inv_freq": torch.arange(8, dtype=torch.float32),
              "step_counter": torch.tensor([7, 8, 9], dtype=torch.int32),
              "empty_buffer": torch.zeros(0, 4)}
    set_tensors(src / SINGLE, **extras)
    assert set(inspect_draft(src).extra_tensors) == set(extras)
    out = quantize_draft(src, tmp_path / "out", device="cpu").output
    written = {}
    for file in out.glob("*.safetensors"):
        written.update(read_header(file).tensors)
    source = read_header(src / SINGLE).tensors
    for name in extras:
        assert written[name].dtype == source[name].dtype and written[name].shape == source[name].shape, name
        assert same_bytes(source[name], written[name]), name
    assert "custom_head.weight_scale" not in written   # a 2-D extra weight is carried, never quantized


def test_all_zero_rows_get_the_float32_eps_scale_floor(tmp_path):
    src = tiny(tmp_path)
    q = file_tensors(src / SINGLE)[Q_PROJ]
    q[5] = 0
    gate = file_tensors(src / SINGLE)["midlayer.mlp.gate_proj.weight"]
    gate[:3] = 0
    set_tensors(src / SINGLE, midlayer__self_attn__q_proj__weight=q, midlayer__mlp__gate_proj__weight=gate)
    out = load_tensors(quantize_draft(src, tmp_path / "out", device="cpu").output)
    for module, rows in (("midlayer.self_attn.q_proj", [5]), ("midlayer.mlp.gate_proj", [0, 1, 2])):
        scale, weight = out[module + ".weight_scale"], out[module + ".weight"]
        assert bool(torch.isfinite(scale).all()) and bool((scale > 0).all())
        assert scale[rows].tolist() == [FLOAT32_EPS] * len(rows)
        assert not bool(weight[rows].float().any())
        others = [r for r in range(scale.numel()) if r not in rows]
        assert bool((scale[others] > FLOAT32_EPS).all())


@pytest.mark.parametrize("shards", [1, 3])
def test_pickle_weights_with_opt_in_give_the_same_artifact(tmp_path, shards):
    reference_src = tiny(tmp_path / "ref", shards=1)
    reference = quantize_draft(reference_src, tmp_path / "ref-out", device="cpu").output
    src = pickle_draft(tmp_path / "pkl")
    if shards == 3:
        tensors = torch.load(src / "pytorch_model.bin", weights_only=True)
        (src / "pytorch_model.bin").unlink()
        names = sorted(tensors)
        weight_map = {}
        for i in range(3):
            file = f"pytorch_model-{i + 1:05d}-of-00003.bin"
            torch.save({n: tensors[n] for n in names[i::3]}, src / file)
            weight_map.update({n: file for n in names[i::3]})
        (src / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    before = tree_state(tmp_path / "pkl")
    result = quantize_draft(src, tmp_path / "pkl" / "out", device="cpu", allow_pickle=True)
    after = tree_state(tmp_path / "pkl")
    assert {k: v for k, v in after.items() if not k.startswith("out")} == before   # source only read
    assert sorted(p.name for p in (tmp_path / "pkl").iterdir()) == ["out", "src"]   # no scratch folder left
    out = load_tensors(result.output)
    expected = load_tensors(reference)
    assert set(out) == set(expected)
    for name, tensor in expected.items():
        assert out[name].dtype == tensor.dtype and torch.equal(out[name].view(torch.uint8),
                                                               tensor.view(torch.uint8)), name
    assert result.manifest.source.pickle_converted is True
    assert result.manifest.source.path == src.name     # the folder's name: never a local path
    assert recorded_source_path(result.output) == src.resolve()
    assert {i.path for i in result.manifest.inputs} >= {p.name for p in src.glob("*.bin")}
    assert not list(result.output.glob("*.bin"))


def test_quark_sees_only_checked_files(tmp_path):
    """Pickles, subfolders and hidden files next to the weights are neither read nor carried."""
    src = tiny(tmp_path)
    torch.save({"x": torch.zeros(2)}, src / "pytorch_model.bin")
    (src / "original").mkdir()
    set_tensors(src / SINGLE)
    (src / "original" / "consolidated.safetensors").write_bytes((src / SINGLE).read_bytes())
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (src / "tokenizer.json").write_text("{}\n")
    out = quantize_draft(src, tmp_path / "out", device="cpu").output
    assert sorted(p.name for p in out.iterdir() if p.name != LOCAL_RECORD) == [
        "config.json", "eagle3_quant.json", "generation_config.json", SINGLE, "model.safetensors.index.json",
        "tokenizer.json"]


def test_remote_code_in_the_source_is_never_run(tmp_path):
    src = tiny(tmp_path)
    marker = tmp_path / "ran"
    (src / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n"
                                          "class EvilConfig: pass\nclass EvilModel: pass\n")
    config = json.loads((src / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "modeling_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilModel"}
    (src / "config.json").write_text(json.dumps(config))
    inspect_draft(src)
    out = quantize_draft(src, tmp_path / "out", device="cpu").output
    assert not marker.exists()
    assert (out / "modeling_evil.py").read_bytes() == (src / "modeling_evil.py").read_bytes()  # carried, not run


def quark_save_fails_with_enospc(monkeypatch):
    import quark.torch.quantization.file2file_quantization as f2f

    def full(tensors, path, *args, **kwargs):
        with open(path, "wb") as fh:   # a partial file, as a real full disk leaves
            fh.write(b"\0" * 4096)
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(f2f, "save_file", full)


def test_disk_full_while_writing_leaves_nothing(tmp_path, monkeypatch):
    src = tiny(tmp_path, DraftFormat.SPECULATORS, shards=3)
    before = tree_state(tmp_path)
    quark_save_fails_with_enospc(monkeypatch)
    with pytest.raises(ResourceError, match=r"out: disk full while writing the output .* nothing was kept"):
        quantize_draft(src, tmp_path / "out", device="cpu", engine="vllm")
    assert tree_state(tmp_path) == before


def test_disk_full_on_a_real_small_filesystem(tmp_path, monkeypatch):
    """A real ENOSPC from a 64 KB tmpfs (needs permission to mount; the early check is told there is room)."""
    disk = tmp_path / "small-disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        src = tiny(tmp_path)
        before = folder_hashes(src)
        monkeypatch.setattr(resources, "free_disk_bytes", lambda folder: (10**12, folder))
        with pytest.raises(ResourceError, match="disk full while writing the output"):
            quantize_draft(src, disk / "out", device="cpu")
        assert list(disk.iterdir()) == [] and folder_hashes(src) == before
    finally:
        subprocess.run(["umount", str(disk)], check=True)
