"""Speculative decoding by prompt lookup, side by side: `rdu run --draft lookup` against plain
`rdu run`, and llama.cpp's own prompt-lookup decoding (llama-cpp-python's
`LlamaPromptLookupDecoding`) against plain llama.cpp, on the real Gemma 3 270M (Q8_0), greedy,
the same threads, on a copy-heavy prompt (a text, then the request to repeat it). The four
runs are interleaved `--trials` times; medians and ratios are printed, with rdu's acceptance.

Decode rates: tokens generated after the prompt's step over the time after it. For plain runs
the prompt's step makes the first token; for `rdu run --draft` the step that finishes the
prompt also checks the first drafted tokens, and every token it makes counts as the prompt's
(`timing.decode_tokens`). llama.cpp: the tokens after the first over the time from the first
(streamed) token to the last; its speculation starts after the prompt's evaluation, which
makes the first token.

Called by run.sh, which makes the environment and the model files.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import llama_cpp
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

# A copy-heavy prompt: a paragraph, then the request to repeat it (about 190 tokens).
TEXT = (
    "The archive keeps three kinds of records. Letters are filed by the year they were sent, "
    "then by the name of the sender, and every letter carries a number written in pencil on "
    "the back of its last page. Maps are rolled, never folded, and each roll is tied with a "
    "cotton ribbon whose colour says which survey made it: red for the coast, blue for the "
    "rivers, green for the forests and yellow for the roads. Photographs are kept in paper "
    "sleeves, one photograph to a sleeve, and the sleeves stand upright in boxes of fifty. "
    "Nothing leaves the reading room, and nothing is copied without a written request."
)
PROMPT = f"{TEXT}\n\nRepeat the text above exactly, word for word:\n\nThe archive keeps"
DECODE = 128


def run_rdu(rdu, model, threads, draft_tokens=None):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    cmd = [rdu, "run", model, "--prompt", PROMPT, "-n", str(DECODE), "--json"]
    if draft_tokens:
        cmd += ["--draft", "lookup", "--draft-tokens", str(draft_tokens)]
    proc = subprocess.run(cmd, capture_output=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"rdu failed: {proc.stderr.decode()}")
    out = json.loads(proc.stdout)
    t, s = out["timing"], out.get("speculation") or {}
    return {
        "generated": out["generated"],
        "decode_tok_s": t["decode_tok_s"],
        "prompt_tokens": t["prompt_tokens"],
        "acceptance": s["accepted"] / s["drafted"] if s.get("drafted") else None,
    }


def run_llama(model, threads, draft=None):
    llm = llama_cpp.Llama(
        model_path=model,
        n_threads=threads,
        n_threads_batch=threads,
        n_ctx=1024,
        n_batch=512,
        draft_model=draft,
        verbose=False,
    )
    stamps, text = [], []
    for chunk in llm.create_completion(PROMPT, max_tokens=DECODE, temperature=0.0, top_k=1, stream=True):
        stamps.append(time.perf_counter())
        text.append(chunk["choices"][0]["text"])
    llm.close()
    n = len(stamps)
    return {"decode_tok_s": (n - 1) / (stamps[-1] - stamps[0]) if n > 1 else 0.0, "tokens": n, "text": "".join(text)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rdu", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--draft-tokens", type=int, default=4, help="rdu's drafted tokens a step")
    ap.add_argument("--llama-pred", type=int, default=10, help="llama.cpp's num_pred_tokens (its default 10)")
    a = ap.parse_args()
    engines = ("rdu", "rdu lookup", "llama.cpp", "llama.cpp lookup")
    runs = {e: [] for e in engines}
    for trial in range(a.trials):
        r = run_rdu(a.rdu, a.model, a.threads)
        s = run_rdu(a.rdu, a.model, a.threads, a.draft_tokens)
        if s["generated"] != r["generated"]:
            sys.exit("rdu with prompt lookup generated other tokens than plain rdu: not greedy-identical")
        l = run_llama(a.model, a.threads)
        draft = LlamaPromptLookupDecoding(num_pred_tokens=a.llama_pred)
        m = run_llama(a.model, a.threads, draft)
        for e, x in zip(engines, (r, s, l, m)):
            runs[e].append(x)
        print(
            f"trial {trial + 1}: rdu {r['decode_tok_s']:.1f}, rdu lookup {s['decode_tok_s']:.1f} "
            f"(acceptance {s['acceptance']:.2f}), llama.cpp {l['decode_tok_s']:.1f}, "
            f"llama.cpp lookup {m['decode_tok_s']:.1f} tok/s",
            flush=True,
        )
    med = {e: statistics.median(x["decode_tok_s"] for x in runs[e]) for e in engines}
    acc = statistics.median(x["acceptance"] for x in runs["rdu lookup"])
    print(
        f"\nmedians of {a.trials} interleaved runs, {a.threads} threads, Gemma 3 270M Q8_0, prompt "
        f"{runs['rdu'][0]['prompt_tokens']} tokens, {DECODE} generated greedily; rdu drafts "
        f"{a.draft_tokens} tokens a step, llama.cpp {a.llama_pred}"
    )
    for e in engines:
        print(f"  decode {e:18} {med[e]:8.1f} tok/s")
    print(f"  rdu lookup / rdu                {med['rdu lookup'] / med['rdu']:6.2f}x  (acceptance {acc:.2f})")
    print(f"  rdu lookup / llama.cpp lookup   {med['rdu lookup'] / med['llama.cpp lookup']:6.2f}x")
    print(f"  llama.cpp lookup / llama.cpp    {med['llama.cpp lookup'] / med['llama.cpp']:6.2f}x")
    print("  rdu lookup's tokens are plain rdu's in every trial (greedy-identical)")


if __name__ == "__main__":
    main()
