"""The profiler's kernel names: which are GEMMs, of which family, and the GEMM a name shows (types, scales).

- cuBLASLt's Hopper kernels are ``nvjet_sm90_*``; FP8 ones are typed ``qq..`` (``nvjet_sm90_qqtst_..``): E4M3 or
  E5M2, the name does not say which, nor the scale mode.
- ATen's CUTLASS rowwise kernel is ``f8f8bf16_rowwise`` (E4M3 x E4M3 -> BF16, rowwise); other CUTLASS templates
  show ``float_e4m3_t``; cuBLAS's ``*xmma*gemm*`` kernels show ``e4m3``.
- Tensile's ``Cijk_<A>_<B>_<types>_..`` (rocBLAS and hipBLASLt alike: a name alone does not show which library):
  the ProblemType name of ``Tensile/SolutionStructs/Problem.py`` with rocisa's type letters (``tensilelite/src/
  DataTypes.cpp`` TypeAbbrev): ``F8`` E4M3 (fnuz too before ``F8N`` existed), ``F8N`` E4M3 fnuz, ``B8``/``B8N``
  E5M2, ``F4`` E2M1, ``B`` BF16, ``H`` FP16, ``S`` FP32. ``F8BS``: F8 in, BF16 out, FP32 compute; a two-letter
  token before another type token names A and B when the MAC type differs (``F8NH_HHS``: FP8 x FP16, not an FP8
  GEMM). ``SABV``: vector (rowwise) A/B scales, ``SAB``: scalar, neither: none; ``MXAE8B32``/``MXA32``: E8M0
  scales per block of 32 (MX); a lone ``MX`` token is FP32 math in XF32 (``M`` + ``X``), not microscaling.
- rocRoller's (hipBLASLt's) ``RR_GEMM_<TT>_<A>_<B>_<C>_<D>_<Acc>_[SA_<mode><type>_<block>_][SB_..]WGT_..``
  (``rocroller/gemm.cpp`` genKernelName): mode ``B`` block scales, ``S`` one scale.
- AITER's Triton ``_gemm_afp4_wfp4_kernel`` (``aiter/ops/triton/gemm_afp4wfp4.py``): MXFP4 x MXFP4, E8M0 per 32.
"""

from __future__ import annotations

import re

from eagle3_quant.validate.gemm_forms import AMBIGUOUS, NAMED_FP8, NOT_FP8, GemmForm

GEMM_FAMILIES = (("nvjet", re.compile(r"^(nvjet(?:_sm\d+)?)_")),
                 ("CUTLASS", re.compile(r"cutlass|f8f8bf16", re.I)),
                 ("Cijk (Tensile)", re.compile(r"^(Cijk)_")),
                 ("rocRoller", re.compile(r"^RR_GEMM_")),
                 ("AITER", re.compile(r"^_gemm_a\w+_kernel")),
                 ("cuBLAS xmma", re.compile(r"xmma\w*gemm|gemm\w*xmma", re.I)),
                 ("gemm", re.compile(r"gemm", re.I)))
# the library a family's name proves ran; Tensile's Cijk_ kernels serve rocBLAS and hipBLASLt alike
FAMILY_LIBRARY = {"nvjet": "cuBLASLt", "nvjet_sm90": "cuBLASLt", "nvjet_sm100": "cuBLASLt",
                  "CUTLASS": "CUTLASS (ATen rowwise)", "rocRoller": "hipBLASLt (rocRoller)", "AITER": "AITER",
                  "cuBLAS xmma": "cuBLAS"}
TENSILE_CHARS = ("F8B8N", "B8F8N", "F8B8", "B8F8", "4xi8", "E5M3", "I64", "F8N", "B8N", "F8", "B8", "F6", "B6", "F4",
                 "E8", "I8", "S", "D", "C", "Z", "H", "I", "B", "X")
TENSILE_ELEMENTS = {"S": "FP32", "D": "FP64", "H": "FP16", "B": "BF16", "X": "XF32", "I": "I32", "I8": "I8",
                    "4xi8": "I8", "F8": "E4M3" + AMBIGUOUS, "F8N": "E4M3 fnuz", "B8": "E5M2" + AMBIGUOUS,
                    "B8N": "E5M2 fnuz", "F6": "E2M3", "B6": "E3M2", "F4": "E2M1"}
TENSILE_MIXED = {"F8B8": ("F8", "B8"), "B8F8": ("B8", "F8"), "F8B8N": ("F8N", "B8N"), "B8F8N": ("B8N", "F8N")}
TENSILE_MX = re.compile(r"^MX[AB](?:(E8|F8|E5M3)B)?(\d+)$")
MX_SCALE_TYPES = {None: "ue8m0", "E8": "ue8m0", "F8": "ue4m3", "E5M3": "ue5m3", "E8M0": "ue8m0", "E4M3": "ue4m3",
                  "Float": "f32"}
ROCROLLER_ELEMENTS = {"FP8": "E4M3" + AMBIGUOUS, "BF8": "E5M2" + AMBIGUOUS, "FP6": "E2M3", "BF6": "E3M2",
                      "FP4": "E2M1", "Half": "FP16", "Float": "FP32", "BFloat16": "BF16", "Double": "FP64"}
AITER_GEMMS = {"afp4_wfp4": GemmForm("AITER", "E2M1", "E2M1", "BF16", "block32_ue8m0", "kernel name")}
NVJET = re.compile(r"^nvjet(?:_sm\d+)?_(qq)?")
NAMED_FP8_PARTS = re.compile(r"e4m3|e5m2|f8f8|fp8|float8", re.I)


def kernel_family(name: str) -> str | None:
    """The GEMM family of a kernel name, None for any other kernel (quantization, copies, reductions)."""
    for family, pattern in GEMM_FAMILIES:
        found = pattern.search(name)
        if found:
            return found.group(1) if found.groups() else family
    return None


def _tensile_chars(token: str) -> list[str] | None:
    chars, rest = [], token
    while rest:
        char = next((c for c in TENSILE_CHARS if rest.startswith(c)), None)
        if char is None:
            return None
        chars.append(char)
        rest = rest[len(char):]
    return chars


def _tensile(name: str) -> GemmForm | None:
    parts = name.split("_")[3:]        # after Cijk, A<..>, B<..>
    first = _tensile_chars(parts[0]) if parts else None
    if not first:
        return None
    nxt = _tensile_chars(parts[1]) if len(parts) > 1 else None
    if len(first) == 2 and nxt and len(nxt) == 3:   # DataTypeA + DataTypeB, then the MAC type token
        a, b, mac = first[0], first[1], nxt
    else:
        a, b = TENSILE_MIXED.get(first[0], (first[0], first[0]))
        mac = first
    out = mac[1] if len(mac) == 3 else mac[0]
    blocks = [TENSILE_MX.match(p) for p in parts if TENSILE_MX.match(p)]
    if blocks:
        scale = f"block{blocks[0].group(2)}_{MX_SCALE_TYPES[blocks[0].group(1)]}"
    else:
        scale = "rowwise" if "SABV" in parts else "tensorwise" if "SAB" in parts else "none"
    elements = (TENSILE_ELEMENTS.get(t, t) for t in (a, b, out))
    return GemmForm("Tensile", *elements, scale, "kernel name")


def _rocroller_scale(parts: list[str], tag: str) -> str:
    if tag not in parts:
        return "none"
    mode = parts[parts.index(tag) + 1]
    if mode.startswith("S"):
        return "tensorwise"
    return f"block{parts[parts.index(tag) + 2]}_{MX_SCALE_TYPES.get(mode[1:], mode[1:].lower())}"


def _rocroller(name: str) -> GemmForm | None:
    parts = name.split("_")
    if len(parts) < 8:
        return None
    a, b, _, d = (ROCROLLER_ELEMENTS.get(t, t) for t in parts[3:7])
    modes = {_rocroller_scale(parts, "SA"), _rocroller_scale(parts, "SB")}
    return GemmForm("hipBLASLt (rocRoller)", a, b, d, modes.pop() if len(modes) == 1 else "A/B differ",
                    "kernel name")


def decode(name: str) -> GemmForm | None:
    """The GEMM a kernel name shows (None fields where it does not say), None for a name that is no GEMM or says
    nothing of its types."""
    family = kernel_family(name)
    if family is None:
        return None
    if name.startswith("nvjet"):
        fp8 = NVJET.match(name).group(1)
        return GemmForm("cuBLASLt", *(NAMED_FP8 if fp8 else NOT_FP8,) * 2, None, None, "kernel name")
    if name.startswith("Cijk_"):
        return _tensile(name)
    if name.startswith("RR_GEMM_"):
        return _rocroller(name)
    if family == "AITER":
        return next((f for key, f in AITER_GEMMS.items() if f"_gemm_{key}_kernel" in name), None)
    if "f8f8bf16_rowwise" in name:
        return GemmForm("CUTLASS (ATen rowwise)", "E4M3", "E4M3", "BF16", "rowwise", "kernel name")
    element = NAMED_FP8 if NAMED_FP8_PARTS.search(name) else NOT_FP8
    return GemmForm(FAMILY_LIBRARY.get(family, family), element, element, None, None, "kernel name")


def fp8_by_name(name: str) -> bool:
    """Does this GEMM kernel's name show FP8 x FP8 operands?"""
    form = decode(name)
    return form is not None and form.fp8
