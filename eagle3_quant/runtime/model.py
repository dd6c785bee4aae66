"""`Eagle3Draft`: a Llama-style Eagle3 draft as a plain PyTorch module.

Submodule names equal the checkpoint's tensor names (``fc``, ``midlayer.*`` or ``layers.0.*``, ``norm``,
``lm_head``, ``d2t``/``t2d``, the embedding when the checkpoint holds one), so ``state_dict()`` is the checkpoint.
One draft step (see eagle3-facts.md section 3)::

    h = fc(fc_norm/input_norm(aux))                  # only on the first step; later steps get the fed-back h
    x = cat(input_layernorm(embed(ids)), hidden_norm(h)); residual = h (or hidden_norm(h))
    h = residual + o_proj(attn(q/k/v_proj(x))); h = h + mlp(post_attention_layernorm(h))
    logits = lm_head(norm(h)); fed back: h (or norm(h) with norm_output)

Computed as vLLM 0.33 computes it: attention scores in fp32; each residual add in fp32 inside a fused
add+RMSNorm that normalizes the unrounded sum and keeps the sum rounded to the draft's dtype as the residual.
"""

from __future__ import annotations

import torch
from torch import nn

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.reading.families import DraftFamily
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.runtime.attention import Attention, CausalContext
from eagle3_quant.runtime.fp8_linear import Fp8Linear
from eagle3_quant.runtime.int_linear import Int4Linear, Int8Linear
from eagle3_quant.runtime.mla import MlaAttention
from eagle3_quant.runtime.mx_linear import MxLinear
from eagle3_quant.runtime.nvfp4_linear import NvFp4Linear
from eagle3_quant.runtime.rope import RopeTable
from eagle3_quant.runtime.spec import RuntimeSpec, resolve_spec

LINEAR_TYPES = (nn.Linear, Fp8Linear, MxLinear, Int8Linear, Int4Linear, NvFp4Linear)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, dtype: torch.dtype, device=None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype, device=device))
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """norm(x); with `residual`, vLLM's fused add+RMSNorm: (norm of the unrounded fp32 sum, the sum in
        x's dtype as the new residual)."""
        if residual is None:
            return self._normalize(x.to(torch.float32), x.dtype)
        total = x.to(torch.float32) + residual.to(torch.float32)
        return self._normalize(total, x.dtype), total.to(x.dtype)

    def _normalize(self, x32: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32.to(self.weight.dtype) * self.weight).to(dtype)


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int, bias: bool, dtype: torch.dtype, device=None) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=bias, dtype=dtype, device=device)
        self.up_proj = nn.Linear(hidden, intermediate, bias=bias, dtype=dtype, device=device)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # SiLU rounded to x's dtype, then the product rounded: vLLM's silu_and_mul kernel, and also its fused
        # silu_and_mul_quant, which quantizes that rounded product for a static FP8 down_proj (runtime/serving.py)
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, spec: RuntimeSpec, dtype: torch.dtype, device=None) -> None:
        super().__init__()
        c = spec.config
        h, q_out, kv_out = c.hidden_size, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim

        def linear(i: int, o: int) -> nn.Linear:
            return nn.Linear(i, o, bias=spec.attention_bias, dtype=dtype, device=device)

        def norm(size: int) -> RMSNorm:
            return RMSNorm(size, c.rms_norm_eps, dtype, device)

        if c.family is DraftFamily.MLA:
            self.self_attn = MlaAttention(c.mla, c.num_attention_heads, h, lambda i, o: linear(i, o), norm,
                                          spec.rope.softmax_scale_factor())
        else:
            qk_norms = (norm(c.head_dim), norm(c.head_dim)) if c.family is DraftFamily.QWEN3 else None
            self.self_attn = Attention(linear(2 * h, q_out), linear(2 * h, kv_out), linear(2 * h, kv_out),
                                       linear(q_out, h), c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                                       qk_norms)
        self.mlp = MLP(h, c.intermediate_size, spec.mlp_bias, dtype, device)
        self.input_layernorm = RMSNorm(h, c.rms_norm_eps, dtype, device)
        self.hidden_norm = RMSNorm(h, c.rms_norm_eps, dtype, device)
        self.post_attention_layernorm = RMSNorm(h, c.rms_norm_eps, dtype, device)
        self.norm_before_residual = spec.norm_before_residual

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                context) -> tuple[torch.Tensor, torch.Tensor]:
        """(MLP output, residual): the caller's final norm adds them, as vLLM's layer does."""
        normed = self.hidden_norm(hidden)
        residual = normed if self.norm_before_residual else hidden
        x = torch.cat([self.input_layernorm(embeds), normed], dim=-1)
        x, residual = self.post_attention_layernorm(self.self_attn(x, cos, sin, context), residual)
        return self.mlp(x), residual


class Eagle3Draft(nn.Module):
    def __init__(self, spec: RuntimeSpec, dtype: torch.dtype = torch.bfloat16, device=None, *,
                 embedding_name: str | None = "embed_tokens.weight", vocab_maps: bool = True) -> None:
        super().__init__()
        c = spec.config
        self.spec, self.dtype = spec, dtype
        self.rope = RopeTable(spec.rope)
        ht = c.target_hidden_size
        if spec.norm_before_fc:
            self.input_norm = RMSNorm(spec.num_aux * ht, c.rms_norm_eps, dtype, device)
        if spec.fc_norm:
            self.fc_norm = nn.ModuleList(RMSNorm(ht, c.rms_norm_eps, dtype, device) for _ in range(spec.num_aux))
        self.fc = nn.Linear(spec.num_aux * ht, c.hidden_size, bias=False, dtype=dtype, device=device)
        layer = DecoderLayer(spec, dtype, device)
        if spec.format is DraftFormat.SPECULATORS:
            self.layers = nn.ModuleList([layer])
        else:
            self.midlayer = layer
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps, dtype, device)
        self.lm_head = nn.Linear(c.hidden_size, c.draft_vocab_size, bias=False, dtype=dtype, device=device)
        self._embedding_name = embedding_name
        if embedding_name is not None:
            self._embedding_holder().embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size, dtype=dtype,
                                                                 device=device)
        else:
            self.register_buffer("external_embedding", None, persistent=False)
        if vocab_maps:
            self.register_buffer("d2t", torch.zeros(c.draft_vocab_size, dtype=torch.int64, device=device))
            t2d = torch.zeros(c.vocab_size, dtype=torch.bool, device=device)
            t2d[: c.draft_vocab_size] = True
            self.register_buffer("t2d", t2d)
        else:
            self.register_buffer("d2t", None)
            self.register_buffer("t2d", None)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_config(cls, cfg: DraftConfig, dtype: torch.dtype = torch.float32, device=None, *, seed: int = 0,
                    fmt: DraftFormat = DraftFormat.SPECFORGE, with_embedding: bool = True) -> Eagle3Draft:
        """A randomly initialised, trainable draft (Llama init: normal(0, 0.02) linears, unit norms)."""
        draft = cls(resolve_spec(cfg, fmt), dtype, device,
                    embedding_name="embed_tokens.weight" if with_embedding else None)
        gen = torch.Generator(device="cpu").manual_seed(seed)
        with torch.no_grad():
            for module in draft.modules():
                if isinstance(module, nn.Linear | nn.Embedding):
                    module.weight.copy_(torch.randn(module.weight.shape, generator=gen) * 0.02)
                    if getattr(module, "bias", None) is not None:
                        module.bias.zero_()
        return draft

    # ---- structure ----------------------------------------------------------------------------
    @property
    def config(self) -> DraftConfig:
        return self.spec.config

    @property
    def layer(self) -> DecoderLayer:
        return self.layers[0] if self.spec.format is DraftFormat.SPECULATORS else self.midlayer

    def _embedding_holder(self) -> nn.Module:
        if self._embedding_name == "model.embed_tokens.weight":
            if not hasattr(self, "model"):
                self.model = nn.Module()
            return self.model
        return self

    @property
    def embedding_weight(self) -> torch.Tensor | None:
        if self._embedding_name is None:
            return self.external_embedding
        return self._embedding_holder().embed_tokens.weight

    def set_embedding(self, weight: torch.Tensor) -> None:
        """Use a target's embedding [V, H] (not saved with the draft)."""
        c = self.config
        if tuple(weight.shape) != (c.vocab_size, c.hidden_size):
            raise DraftFormatError(f"embedding shape {list(weight.shape)} is not [vocab {c.vocab_size}, hidden "
                                   f"{c.hidden_size}]", tensor="embed_tokens.weight")
        if self._embedding_name is not None:
            with torch.no_grad():
                self._embedding_holder().embed_tokens.weight.copy_(weight)
        else:
            self.external_embedding = weight.detach().to(self.dtype).to(self.fc.weight.device)

    def linears(self) -> dict[str, nn.Module]:
        """Checkpoint module name -> linear (float, FP8, MX, INT8, INT4 or NVFP4), for every linear role."""
        return {name: m for name, m in self.named_modules() if isinstance(m, LINEAR_TYPES)}

    def set_fp8_mode(self, mode: str) -> None:
        for module in self.modules():
            if isinstance(module, Fp8Linear):
                module.mode = mode

    # ---- compute ------------------------------------------------------------------------------
    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        weight = self.embedding_weight
        if weight is None:
            raise DraftFormatError("the draft checkpoint has no embedding: pass embedding= (a [vocab, hidden] "
                                   "tensor or the target model's folder) to load_draft", tensor="embed_tokens.weight")
        return nn.functional.embedding(input_ids, weight)

    def fuse(self, aux_hidden_states: torch.Tensor) -> torch.Tensor:
        """[B, T, num_aux*H_target] aux states of the target -> [B, T, H] draft hidden."""
        n = self.spec.num_aux
        expected = n * self.config.target_hidden_size
        if aux_hidden_states.shape[-1] != expected:
            raise DraftFormatError(f"aux_hidden_states last dim is {aux_hidden_states.shape[-1]}, the draft "
                                   f"expects {n} x target hidden = {expected}", field="aux_hidden_states")
        x = aux_hidden_states.to(self.dtype)
        if self.spec.norm_before_fc:
            x = self.input_norm(x)
        if self.spec.fc_norm:
            x = torch.cat([norm(c) for norm, c in zip(self.fc_norm, x.chunk(n, dim=-1), strict=True)], dim=-1)
        return self.fc(x)

    def step(self, input_ids: torch.Tensor, hidden: torch.Tensor, position_ids: torch.Tensor | None = None,
             context=None) -> tuple[torch.Tensor, torch.Tensor]:
        """One decoder pass on an already fused hidden [B, T, H]; returns (logits, hidden to feed back)."""
        context = context or CausalContext()
        b, t = input_ids.shape
        if position_ids is None:
            start = context.cache.length if getattr(context, "cache", None) is not None else 0
            position_ids = (start + torch.arange(t, device=input_ids.device)).expand(b, t)
        cos, sin = self.rope.cos_sin(position_ids, self.dtype)
        out, residual = self.layer(self.embed(input_ids), hidden.to(self.dtype), cos, sin, context)
        normed, h = self.norm(out, residual)
        return self.lm_head(normed), normed if self.spec.norm_output else h

    def forward(self, input_ids: torch.Tensor, aux_hidden_states: torch.Tensor,
                position_ids: torch.Tensor | None = None, context=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [B, T, V_draft], hidden [B, T, H] to feed back: pre-norm, or post-norm with norm_output)."""
        return self.step(input_ids, self.fuse(aux_hidden_states), position_ids, context)

    def propose(self, input_ids: torch.Tensor, aux_hidden_states: torch.Tensor, k: int,
                position_ids: torch.Tensor | None = None):
        """Greedy k tokens after the last position (KV cache, own hidden fed back): a `Proposal`."""
        from eagle3_quant.runtime.drafting import propose

        return propose(self, input_ids, aux_hidden_states, k, position_ids)

    def propose_all(self, input_ids: torch.Tensor, aux_hidden_states: torch.Tensor, k: int,
                    position_ids: torch.Tensor | None = None, return_logits: bool = False):
        """Greedy k-token chains from every position at once: a `Proposal` with ids [B, T, k]."""
        from eagle3_quant.runtime.drafting import propose_all

        return propose_all(self, input_ids, aux_hidden_states, k, position_ids, return_logits)

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """target id = draft id + d2t[draft id] (identity when the checkpoint has no d2t)."""
        if self.d2t is None:
            return draft_ids
        return draft_ids + self.d2t[draft_ids]
