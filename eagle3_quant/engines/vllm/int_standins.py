"""The INT8, INT4, NVFP4 and MXFP8 linear kernels the ``vllm_load`` worker gives vLLM 0.33's CPU platform.

NVFP4 and MXFP8: vLLM's own ``EmulationNvFp4LinearKernel`` and ``EmulationMxfp8LinearKernel`` (what it runs on GPUs
without native FP4/MX GEMMs; the CPU platform lists no kernel for either). INT8 and INT4: vLLM's CPU kernels
(``CPUInt8ScaledMMLinearKernel``, ``CPUWNA16LinearKernel``) call ``_C`` ops that the vLLM wheel this worker imports
does not ship, so their GEMM is computed in torch from the parameters exactly as vLLM's Quark schemes load and
convert them (``QuarkW8A8Int8``: int8 ``[N, K]`` with ``[N, 1]`` scales; ``QuarkW4A16Int4``: after
``canonicalize_quark_packed_int4`` and ``_convert_awq_to_standard_format``, codes packed along the input dimension,
zero points along the output one): INT8 with the CUTLASS/oneDNN math (per-token scale ``amax / 127``, codes rounded
half to even, exact integer accumulation, both scales applied in fp32), INT4 as ``(code - zero point) * scale``.
Imported only inside the worker.
"""

from __future__ import annotations

import torch

INT_STAND_IN = ("INT8 and INT4 GEMMs: torch code with the math of vLLM's CPU kernels (CPUInt8ScaledMMLinearKernel, "
                "CPUWNA16LinearKernel), whose _C ops this vLLM wheel lacks, on the parameters as vLLM's Quark schemes "
                "loaded and converted them")
EMULATION_NOTE = ("NVFP4 and MXFP8 linears: vLLM's own EmulationNvFp4LinearKernel / EmulationMxfp8LinearKernel, "
                  "registered for the CPU platform (it lists none)")
SHIFTS = tuple(range(0, 32, 4))


def _unpack_rows(packed: torch.Tensor) -> torch.Tensor:
    """int32 [R / 8, C] packed along dim 0 (standard order) -> int32 [R, C]."""
    shifts = torch.tensor(SHIFTS, dtype=torch.int32, device=packed.device)
    codes = (packed.to(torch.int32)[:, None, :] >> shifts[None, :, None]) & 0xF
    return codes.reshape(-1, packed.shape[1])


def register_cpu_kernels() -> None:
    from vllm.model_executor.kernels import linear
    from vllm.model_executor.kernels.linear.mixed_precision.cpu import CPUWNA16LinearKernel
    from vllm.model_executor.kernels.linear.mxfp8.emulation import EmulationMxfp8LinearKernel
    from vllm.model_executor.kernels.linear.nvfp4.emulation import EmulationNvFp4LinearKernel
    from vllm.model_executor.kernels.linear.scaled_mm.cpu import CPUInt8ScaledMMLinearKernel
    from vllm.platforms import PlatformEnum

    class TorchInt8ScaledMM(CPUInt8ScaledMMLinearKernel):
        def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
            pass

        def apply_weights(self, layer, x, bias=None):
            w_q, w_s, _, _, _ = self._get_layer_params(layer)
            x2 = x.reshape(-1, x.shape[-1]).to(torch.float32)
            amax = x2.abs().amax(dim=-1, keepdim=True)
            codes = torch.round(x2 * torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))).clamp(-128, 127)
            acc = (codes.to(torch.float64) @ w_q.to(torch.float64).T).to(torch.float32)
            out = acc * (amax / 127.0) * w_s.to(torch.float32).reshape(1, -1)
            if bias is not None:
                out = out + bias.to(torch.float32)
            return out.to(x.dtype).reshape(*x.shape[:-1], -1)

    class TorchWNA16(CPUWNA16LinearKernel):
        @classmethod
        def can_implement(cls, c):      # CPUWNA16's multiple-of-32 sizes bind its C++ kernel, not this torch GEMM
            return True, None

        def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
            if not self.config.zero_points and self.w_zp_name is not None:
                setattr(layer, self.w_zp_name, None)

        def apply_weights(self, layer, x, bias=None):
            w_q, w_s, w_zp = self._get_weight_params(layer)
            codes = _unpack_rows(w_q)                                            # [K, N]
            groups = w_s.shape[0]
            per_group = codes.shape[0] // groups
            zero = _unpack_rows(w_zp).T if w_zp is not None else torch.full((groups, codes.shape[1]), 8)  # [G, N]
            weight = (codes - zero.repeat_interleave(per_group, 0)).to(torch.float32) * \
                w_s.to(torch.float32).repeat_interleave(per_group, 0)
            out = x @ weight.to(x.dtype)
            return out + bias if bias is not None else out

    linear._POSSIBLE_INT8_KERNELS[PlatformEnum.CPU] = [TorchInt8ScaledMM]
    linear._POSSIBLE_KERNELS[PlatformEnum.CPU] = [TorchWNA16]
    linear._POSSIBLE_NVFP4_KERNELS[PlatformEnum.CPU] = [EmulationNvFp4LinearKernel]
    linear._POSSIBLE_MXFP8_KERNELS[PlatformEnum.CPU] = [EmulationMxfp8LinearKernel]
