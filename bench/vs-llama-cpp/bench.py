"""Runs `rdu run` and llama.cpp side by side, interleaved, and prints medians and ratios.

Called by run.sh (which makes the environment and the Q4_K_M file); makes the Q8_0 file with
llama.cpp's quantizer when it is missing. Every figure is a rate over the engine's own timing
of the work: prompt tokens over prompt time, decode steps over decode time (loading and, for
rdu, lowering excluded; rdu reports them separately).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import llama_cpp

# About 180 tokens of plain prose: the prompt of the prompt-speed figure.
PROMPT = (
    "The history of the city begins with a small settlement on the banks of a wide river, where "
    "fishermen and traders met to exchange goods from the hills and the sea. Over the centuries the "
    "settlement grew into a market town, then into a walled city with a cathedral, a university and "
    "a harbour that sent ships to every port of the known world. Its people built bridges and canals, "
    "printed books and newspapers, and argued in cafes about science, politics and art. Wars and "
    "plagues came and went, and each time the city was rebuilt a little differently, keeping some old "
    "streets and losing others. Today visitors walk along the river at sunset, past the old warehouses "
    "that have become museums and the new towers of glass that stand where the shipyards used to be. "
    "When people ask what makes the city special, the answer is usually the same:"
)
DECODE = 64


def make_q8(q4, q8, threads):
    if os.path.exists(q8) and os.path.getsize(q8) > 0:
        return
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
    params.allow_requantize = True
    params.nthread = threads
    tmp = q8 + ".part"
    rc = llama_cpp.llama_model_quantize(q4.encode(), tmp.encode(), params)
    if rc != 0:
        sys.exit(f"llama_model_quantize failed ({rc})")
    os.replace(tmp, q8)


def run_rdu(rdu, model, threads):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    cmd = [rdu, "run", model, "--prompt", PROMPT, "-n", str(DECODE), "--json"]
    proc = subprocess.run(cmd, capture_output=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"rdu failed: {proc.stderr.decode()}")
    t = json.loads(proc.stdout)["timing"]
    return {
        "prompt_tokens": t["prompt_tokens"],
        "prompt_tok_s": t["prompt_tok_s"],
        "decode_tokens": t["decode_tokens"],
        "decode_tok_s": t["decode_tok_s"],
        "load_s": t["load_s"],
        "lower_s": t["lower_s"],
    }


def run_rdu_rss(rdu, model, threads):
    """Peak RSS (MiB) of one `rdu run`, as the run reports it (`timing.peak_rss_bytes`, its
    own VmHWM). Not `wait4`'s ru_maxrss: a child spawned from this process counts this
    process's pages (llama.cpp's model among them) until its exec, so it read ~416 MiB for
    every file."""
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    cmd = [rdu, "run", model, "--prompt", PROMPT, "-n", str(DECODE), "--json"]
    proc = subprocess.run(cmd, capture_output=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"rdu failed: {proc.stderr.decode()}")
    return json.loads(proc.stdout)["timing"]["peak_rss_bytes"] / 2**20


def run_llama(model, threads, mmap=True):
    """One llama.cpp run; `mmap=False` reads the weights into its own buffers instead of mapping
    the file (rdu reads the file into huge pages: this shows how much of a ratio is that)."""
    llm = llama_cpp.Llama(
        model_path=model,
        n_threads=threads,
        n_threads_batch=threads,
        n_ctx=512,
        n_batch=512,
        use_mmap=mmap,
        verbose=False,
    )
    ctx = llm._ctx.ctx
    llama_cpp.llama_perf_context_reset(ctx)
    llm.create_completion(PROMPT, max_tokens=DECODE, temperature=0.0, top_k=1)
    p = llama_cpp.llama_perf_context(ctx)
    n_prompt = len(llm.tokenize(PROMPT.encode()))
    result = {
        "prompt_tokens": p.n_p_eval,
        "prompt_tok_s": p.n_p_eval / (p.t_p_eval_ms / 1000),
        "decode_tokens": p.n_eval,
        "decode_tok_s": p.n_eval / (p.t_eval_ms / 1000),
        "tokenized": n_prompt,
    }
    llm.close()
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rdu", required=True)
    ap.add_argument("--q4", required=True)
    ap.add_argument("--q8", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--trials", type=int, default=3)
    a = ap.parse_args()
    make_q8(a.q4, a.q8, a.threads)
    files = {"Q8_0": a.q8, "Q4_K_M": a.q4}
    engines = ("rdu", "llama.cpp", "no-mmap")
    runs = {(f, e): [] for f in files for e in engines}
    for trial in range(a.trials):
        for name, path in files.items():
            r = run_rdu(a.rdu, path, a.threads)
            runs[(name, "rdu")].append(r)
            l = run_llama(path, a.threads)
            runs[(name, "llama.cpp")].append(l)
            m = run_llama(path, a.threads, mmap=False)
            runs[(name, "no-mmap")].append(m)
            print(
                f"trial {trial + 1} {name}: rdu prompt {r['prompt_tok_s']:.1f} decode {r['decode_tok_s']:.1f} "
                f"(load {r['load_s']:.2f}s, lowering {r['lower_s']:.2f}s) | llama.cpp prompt "
                f"{l['prompt_tok_s']:.1f} decode {l['decode_tok_s']:.1f} tok/s | llama.cpp use_mmap=False "
                f"prompt {m['prompt_tok_s']:.1f} decode {m['decode_tok_s']:.1f} tok/s",
                flush=True,
            )
    med = lambda f, e, k: statistics.median(r[k] for r in runs[(f, e)])
    print(f"\nmedians of {a.trials} interleaved runs, {a.threads} threads, prompt {runs[('Q8_0', 'rdu')][0]['prompt_tokens']} tokens, {DECODE} generated")
    print("(ratio: rdu over llama.cpp's defaults; the last two columns: llama.cpp with use_mmap=False)")
    print(f"{'':28} {'rdu':>10} {'llama.cpp':>10} {'ratio':>7} {'no-mmap':>10} {'ratio':>7}")
    for name in files:
        for key, label in (("decode_tok_s", "decode"), ("prompt_tok_s", "prompt")):
            x, y, z = (med(name, e, key) for e in engines)
            print(f"{label + ' ' + name + ' (tok/s)':28} {x:10.1f} {y:10.1f} {x / y:6.2f}x {z:10.1f} {x / z:6.2f}x")
    for name, path in files.items():
        rss = run_rdu_rss(a.rdu, path, a.threads)
        size = os.path.getsize(path) / 2**20
        print(f"peak RSS of rdu run on {name}: {rss:.0f} MiB, the file {size:.0f} MiB ({rss / size:.2f}x)")


if __name__ == "__main__":
    main()
