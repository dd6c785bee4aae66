"""Device profiles (eagle3_quant/devices.py): the five GPUs, how this machine's GPU is recognised, and
`--scheme auto --device-profile`'s ladder keeping only what the device runs natively, every other candidate left
in the table with its reason (the schemes' native devices: eagle3_quant/schemes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eagle3_quant.cli import main
from eagle3_quant.devices import (
    DEVICE_PROFILES,
    PROFILE_CHOICES,
    current_profile,
    get_device_profile,
    not_native,
    profile_of,
    resolve_profile,
)
from eagle3_quant.errors import SchemeError
from eagle3_quant.quantize.auto_ladder import build_ladder
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.schemes import DEVICE_PROFILE_NAMES, SCHEMES
from fixtures.synthetic import write_synthetic_draft


def test_the_profiles_are_the_schemes_devices():
    assert tuple(DEVICE_PROFILES) == DEVICE_PROFILE_NAMES == ("mi355x", "mi300x", "h200", "h100", "b200")
    assert PROFILE_CHOICES == (*DEVICE_PROFILE_NAMES, "current")
    assert all(set(s.native_devices) <= set(DEVICE_PROFILES) for s in SCHEMES.values())
    assert [DEVICE_PROFILES[n].hbm_bytes_per_s for n in ("h100", "h200", "b200")] == [3.35e12, 4.8e12, 8.0e12]
    with pytest.raises(SchemeError, match="unknown device profile 'a100'; valid profiles: mi355x, mi300x") as err:
        get_device_profile("a100")
    assert err.value.field == "device_profile" and resolve_profile(None) is None


@pytest.mark.parametrize("name, arch, profile", [
    ("NVIDIA H200", "sm_90", "h200"),
    ("NVIDIA H100 80GB HBM3", "sm_90", "h100"),
    ("NVIDIA B200", "sm_100", "b200"),
    ("AMD Instinct MI355X", "gfx950", "mi355x"),
    ("AMD Instinct MI300X", "gfx942", "mi300x"),
    ("AMD Radeon Graphics", "gfx942", "mi300x"),     # ROCm names some boards generically: the architecture decides
    ("NVIDIA A100-SXM4-80GB", "sm_80", None),
    ("AMD Radeon RX 7900 XTX", "gfx1100", None),
])
def test_a_gpu_is_recognised_by_its_driver_name_or_rocm_architecture(name, arch, profile):
    found = profile_of(name, arch)
    assert (found.name if found else None) == profile


def test_current_names_this_machines_gpu_or_refuses():
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(SchemeError, match="--device-profile current: this machine has no GPU; name one of "
                                              "mi355x, mi300x, h200, h100, b200"):
            resolve_profile("current")
        return
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    arch = props.gcnArchName.split(":")[0] if torch.version.hip else f"sm_{props.major}{props.minor}"
    expected = profile_of(props.name, arch)
    if expected is None:
        with pytest.raises(SchemeError, match=f"{props.name} .* is none of the profiles"):
            current_profile()
    else:
        assert current_profile() == expected


def test_a_scheme_is_left_out_where_it_does_not_run_natively():
    for scheme in SCHEMES.values():
        for name, profile in DEVICE_PROFILES.items():
            why = not_native(scheme, profile)
            assert (why is None) == (name in scheme.native_devices)
            if why:
                assert why.startswith(f"{name} runs no {scheme.name} GEMM natively (native on ")
                assert why.endswith(f"{', '.join(scheme.native_devices) or 'no device'})")
    assert not_native(SCHEMES["ptpc_fp8"], DEVICE_PROFILES["h200"]) is None


def test_the_ladder_keeps_every_candidate_and_leaves_out_what_a_device_cannot_run(tmp_path: Path):
    draft = read_draft(write_synthetic_draft(tmp_path / "src", "tiny"))
    plain = build_ladder(draft, (), "auto", [128])
    by_device = {name: build_ladder(draft, (), "auto", [128], profile=get_device_profile(name))
                 for name in ("h200", "mi355x")}
    for name, ladder in by_device.items():
        assert [c.name for c in ladder.candidates] == [c.name for c in plain.candidates]   # every row stays
        for c in ladder.candidates:
            assert (c.left_out is None) == (name in SCHEMES[c.scheme].native_devices), c.name
            assert c.left_out is None or c.left_out.startswith(f"{name} runs no {c.scheme} GEMM natively")
    kept = {name: {c.scheme for c in ladder.candidates if c.left_out is None} for name, ladder in by_device.items()}
    assert "ptpc_fp8" in kept["h200"] & kept["mi355x"]
    assert "w_mxfp4_a_mxfp4" in kept["mi355x"] - kept["h200"]          # MXFP4's GEMM: gfx950 (and sm100)


def test_cost_and_quantize_take_every_profile(tmp_path: Path, capsys):
    src = write_synthetic_draft(tmp_path / "src", "tiny")
    for name in ("h100", "b200"):
        with pytest.raises(SystemExit) as exit_:
            main(["cost", str(src), "--device-profile", name])
        assert exit_.value.code in (0, None)
        assert DEVICE_PROFILES[name].device in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["quantize", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--device-profile" in text and "--measure-all" in text and "b200|current" in text.replace(" ", "")
