#!/usr/bin/env bash
# The issue-11 goals table: each deployment's share of the MODEL's roofline
# (`model_roofline_fraction`: the model's floor bytes over chips × HBM bandwidth, divided by the
# estimated step) and tokens/s, from `rdu plan --json` — whose cells are exactly `rdu lower`'s
# estimates for the same cut (crates/rdu-cli/tests/plan.rs holds them equal) — plus the Q8_0 /
# bf16 decode ratio on one chip, and the model FLOP utilisation of two prefill deployments
# (lowered and certified). Not part of CI. A few seconds a model, a minute for the prefills.
# Usage: bash bench/roofline.sh     RDU=path/to/rdu to use a given binary (default: the release
# build, built first).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "${RDU:-}" ]; then
  cargo build --release -q -p rdu-cli --manifest-path "$repo/Cargo.toml"
  RDU="$repo/target/release/rdu"
fi
plans=$(mktemp -d)
trap 'rm -rf "$plans"' EXIT
"$RDU" plan llama-3.1-8b --json >"$plans/llama.json"
"$RDU" plan llama-3.1-8b --storage dense --json >"$plans/llama-dense.json"
"$RDU" plan llama-3.1-8b --chip sn40l --storage dense --json >"$plans/llama-sn40l.json"
"$RDU" plan qwen3-next-80b-a3b --json >"$plans/qwen3-next.json"
"$RDU" plan gemma-3-27b-it --json >"$plans/gemma.json"
"$RDU" plan deepseek-v2 --json >"$plans/deepseek.json"
# gpt-oss as its checkpoints store it (MXFP4 experts, `--storage auto`; over 4 and 8 chips
# gpt-oss-120b's experts zero-padded to whole blocks a chip), and gpt-oss-120b's experts
# widened to bf16 (`--storage dense`).
"$RDU" plan gpt-oss-20b --storage auto --json >"$plans/gpt-oss-20b.json"
"$RDU" plan gpt-oss-120b --storage auto --json >"$plans/gpt-oss-120b.json"
"$RDU" plan gpt-oss-120b --chip sn40l --storage auto --json >"$plans/gpt-oss-120b-sn40l.json"
"$RDU" plan gpt-oss-120b --storage dense --json >"$plans/gpt-oss-120b-dense.json"
# Prefill is lowered and certified (plan does not cover it): chunk 512, ctx 4096, and
# deepseek-v2-lite also at chunk 2048 (an MoE chunk streams every expert it selects once, so
# its FLOP utilisation grows with the chunk).
"$RDU" lower llama-3.1-8b --cut prefill --json -o "$plans/llama-prefill" >"$plans/llama-prefill.json"
"$RDU" lower deepseek-v2-lite --cut prefill --json -o "$plans/dsl-prefill" >"$plans/dsl-prefill.json"
"$RDU" lower deepseek-v2-lite --cut prefill --chunk 2048 --json -o "$plans/dsl-prefill-2048" >"$plans/dsl-prefill-2048.json"
python3 - "$plans" <<'EOF'
import json, os, sys
d = sys.argv[1]
def cell(name, tp, batch):
    rows = json.load(open(os.path.join(d, name + ".json")))["rows"]
    return next(r for r in rows if r["tp"] == tp and r["batch"] == batch)
goals = [
    ("llama-3.1-8b, decode, 1 chip", "llama", 1, 1, 0.85, None),
    ("llama-3.1-8b, tp 8", "llama", 8, 1, 0.80, None),
    ("llama-3.1-8b, batched, batch 8", "llama", 1, 8, 0.75, None),
    ("llama-3.1-8b, SN40L, bf16, tp 16", "llama-sn40l", 16, 1, 0.75, 1042),
    ("qwen3-next-80b-a3b, tp 8", "qwen3-next", 8, 1, 0.70, None),
    ("gemma-3-27b-it, tp 8", "gemma", 8, 1, 0.80, None),
    ("deepseek-v2, tp 8", "deepseek", 8, 1, 0.75, None),
    ("gpt-oss-20b, decode, 1 chip, MXFP4 experts", "gpt-oss-20b", 1, 1, 0.85, None),
]
print("| deployment (SN50, Q8_0, ctx 4096 unless said) | model roofline fraction | tokens/s a sequence | goal | met |")
print("|---|---|---|---|---|")
for label, name, tp, batch, goal, toks in goals:
    c = cell(name, tp, batch)
    f, t = c["model_roofline_fraction"], c["tokens_per_second_per_sequence"]
    met = f >= goal and (toks is None or t > toks)
    want = f"≥ {goal:.2f}" + (f" and > {toks:,} tok/s" if toks else "")
    print(f"| {label} | {f:.2f} | {t:,.0f} | {want} | {'yes' if met else 'no'} |")
# gpt-oss-120b as stored over 8 and 4 chips (SN50, and SN40L in parentheses), bf16 experts
# against their own roofline and against the MXFP4 model's over the same 8 chips, and 2 chips.
for tp, width, goal in [(8, 3072, 0.50), (4, 2944, None)]:
    mx, sn40l = cell("gpt-oss-120b", tp, 1), cell("gpt-oss-120b-sn40l", tp, 1)
    f, t = mx["model_roofline_fraction"], mx["tokens_per_second_per_sequence"]
    f40, t40 = sn40l["model_roofline_fraction"], sn40l["tokens_per_second_per_sequence"]
    met = "-" if goal is None else ("yes" if f >= goal else "no")
    print(f"| gpt-oss-120b, tp {tp}, MXFP4 experts (zero-padded to {width} columns) | {f:.2f} (SN40L: {f40:.2f}) "
          f"| {t:,.0f} (SN40L: {t40:,.0f}) | {'-' if goal is None else f'≥ {goal:.2f}'} | {met} |")
dense, mx8 = cell("gpt-oss-120b-dense", 8, 1), cell("gpt-oss-120b", 8, 1)
f, t = dense["model_roofline_fraction"], dense["tokens_per_second_per_sequence"]
of_mx = mx8["model_roofline_fraction"] / mx8["tokens_per_second_per_sequence"] * t
print(f"| gpt-oss-120b, tp 8, bf16 experts | {f:.2f} (of the MXFP4 model's: {of_mx:.2f}) | {t:,.0f} | - | - |")
mx2 = cell("gpt-oss-120b", 2, 1)
f, t = mx2["model_roofline_fraction"], mx2["tokens_per_second_per_sequence"]
print(f"| gpt-oss-120b, tp 2, MXFP4 experts | {f:.2f} | {t:,.0f} | - | - |")
q8 = cell("llama", 1, 1)["tokens_per_second_per_sequence"]
bf16 = cell("llama-dense", 1, 1)["tokens_per_second_per_sequence"]
print(f"\nQ8_0 over bf16 decode speed, llama-3.1-8b on one chip: {q8 / bf16:.2f}× (goal ≥ 1.8×).")
print("\n| prefill (SN50, Q8_0, ctx 4096) | chunk | model FLOP utilisation | tokens/s | goal | met |")
print("|---|---|---|---|---|---|")
for label, name, chunk, goal in [
    ("llama-3.1-8b", "llama-prefill", 512, 0.70),
    ("deepseek-v2-lite", "dsl-prefill", 512, 0.50),
    ("deepseek-v2-lite", "dsl-prefill-2048", 2048, 0.50),
]:
    step = json.load(open(os.path.join(d, name + ".json")))["step"]
    u = step["model_flop_utilisation"]
    print(f"| {label} | {chunk} | {u:.2f} | {step['tokens_per_second']:,.0f} | ≥ {goal:.2f} | {'yes' if u >= goal else 'no'} |")
EOF
