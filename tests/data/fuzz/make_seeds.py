"""Writes the generated seeds of the fuzz corpus (safetensors files, tokenizer.json files).
(`blocks.safetensors`: FP8 and MXFP4 weights as DeepSeek and gpt-oss store them.)

Run from the repository root with the shared venv: /work/venv/bin/python tests/data/fuzz/make_seeds.py
The other targets' seeds are fixtures used in place (each directory's seeds.list) or, for
manifest/, tiny bundles written by `rdu lower` (see README.md there).
"""
import json
import os

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, normalizers, trainers, processors

ROOT = "tests/data/fuzz"
rng = np.random.default_rng(13)

# safetensors: every dtype the reader widens, odd shapes (scalar, empty), metadata.
st = os.path.join(ROOT, "safetensors")
save_file(
    {
        "a": rng.standard_normal((2, 3)).astype(np.float32),
        "b": rng.standard_normal((4,)).astype(np.float16),
        "scalar": np.array(1.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
    },
    os.path.join(st, "mixed.safetensors"),
    metadata={"format": "pt"},
)
save_file(
    {
        "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((4, 8)).astype(np.float32),
        "model.norm.weight": np.ones((8,), dtype=np.float32),
        "ids": np.arange(5, dtype=np.int64),
    },
    os.path.join(st, "names.safetensors"),
)
# bf16 by hand (numpy has no bfloat16): the high halves of f32 values.
bf = (rng.standard_normal((3, 2)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
header = {"w": {"dtype": "BF16", "shape": [3, 2], "data_offsets": [0, bf.nbytes]}}
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * ((8 - len(text) % 8) % 8)
with open(os.path.join(st, "bf16.safetensors"), "wb") as f:
    f.write(len(text).to_bytes(8, "little") + text + bf.tobytes())

# Block-stored weights by hand (numpy has no float8): an F8_E4M3 weight [4, 6] beside its F32
# `weight_scale_inv` in 2 x 3 blocks (DeepSeek's layout), and an MXFP4 weight [2, 64] as U8
# `_blocks` [2, 2, 16] and `_scales` [2, 2] (gpt-oss's).
blocks = {
    "w.weight": ("F8_E4M3", [4, 6], bytes(range(0x30, 0x48))),
    "w.weight_scale_inv": ("F32", [2, 2], np.array([0.5, 1.0, 2.0, 0.25], dtype=np.float32).tobytes()),
    "e_blocks": ("U8", [2, 2, 16], bytes((7 * i) % 256 for i in range(64))),
    "e_scales": ("U8", [2, 2], bytes([120, 127, 130, 252])),
}
header, data = {}, b""
for name, (dtype, shape, raw) in blocks.items():
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * ((8 - len(text) % 8) % 8)
with open(os.path.join(st, "blocks.safetensors"), "wb") as f:
    f.write(len(text).to_bytes(8, "little") + text + data)

# tokenizer.json: byte-level BPE (GPT-2 style), SentencePiece-style BPE with byte fallback,
# Unigram with Metaspace, WordPiece; small vocabularies trained on a few sentences.
corpus = [
    "Hello world, hello rdu! The quick brown fox jumps over the lazy dog.",
    "Spatial programs run on the chip; 123 456 7890. Ça va? 日本語 テキスト",
    "def main():\n    return 42  # tabs\tand spaces",
] * 4
tok = os.path.join(ROOT, "tokenizer")
special = ["<s>", "</s>", "<unk>", "<|endoftext|>"]

t = Tokenizer(models.BPE())
t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
t.decoder = decoders.ByteLevel()
t.post_processor = processors.ByteLevel(trim_offsets=True)
t.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=special,
                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
t.save(os.path.join(tok, "bytelevel-bpe.json"))

t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
t.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=120, special_tokens=special + [f"<0x{b:02X}>" for b in range(16)]))
t.save(os.path.join(tok, "spm-bpe.json"))

t = Tokenizer(models.Unigram())
t.pre_tokenizer = pre_tokenizers.Metaspace()
t.decoder = decoders.Metaspace()
t.train_from_iterator(corpus, trainers.UnigramTrainer(vocab_size=80, special_tokens=special, unk_token="<unk>"))
t.save(os.path.join(tok, "unigram.json"))

t = Tokenizer(models.WordPiece(unk_token="<unk>"))
t.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase()])
t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)])
t.decoder = decoders.WordPiece()
t.train_from_iterator(corpus, trainers.WordPieceTrainer(vocab_size=90, special_tokens=special))
t.save(os.path.join(tok, "wordpiece.json"))
