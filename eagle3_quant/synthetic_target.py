"""A tiny random Llama target with a byte-level BPE tokenizer and a chat template, built in code (tests, bench).

Nothing is downloaded: the tokenizer is trained on a fixed built-in corpus, the weights are seeded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|end|>"]
CORPUS = [
    "The quick brown fox jumps over the lazy dog while the cat sleeps in the warm sun.",
    "Speculative decoding lets a small draft model propose tokens that a large target model verifies.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    "Calibration data is what the draft really receives: the hidden states of three target layers.",
    "In 1969 the first people walked on the moon; millions watched on television around the world.",
    "Quantization maps weights and activations to eight bit floating point numbers with a scale.",
    "for i in range(10):\n    if i % 2 == 0:\n        print(i, 'is even')",
    "Please summarise the following paragraph in one sentence, keeping the main idea intact.",
]


@dataclass(frozen=True)
class TargetShape:
    layers: int = 4
    hidden: int = 64
    intermediate: int = 128
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 512
    max_positions: int = 1024


def build_tokenizer(vocab: int = 512):
    """A byte-level BPE tokenizer trained on CORPUS, wrapped as PreTrainedTokenizerFast with CHAT_TEMPLATE."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   additional_special_tokens=SPECIAL_TOKENS[3:], chat_template=CHAT_TEMPLATE)


def write_tiny_target(out: Path, shape: TargetShape = TargetShape(), *, seed: int = 0,
                      dtype: str = "float32") -> Path:
    """Save a random LlamaForCausalLM (safetensors) and its tokenizer into `out`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer(shape.vocab)
    config = LlamaConfig(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                         num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                         num_key_value_heads=shape.kv_heads, max_position_embeddings=shape.max_positions,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False, dtype=dtype)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(getattr(torch, dtype))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
