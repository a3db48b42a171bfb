"""`rdu serve` against llama-cpp-python's OpenAI-compatible server on the same GGUF file, driven
by the same client (the `openai` package): S concurrent streams, each sending its requests one
after another (streamed, greedy, a fixed number of tokens), for S = 1, 4 and 16. Prints the
aggregate tokens/s and the p50/p99 time per output token of each server at each S, and the
ratios the goals ask for. Called by run.sh; not part of CI.

Aggregate tokens/s: every stream's completion tokens over the wall time of the whole level.
Time per output token: per request, (last token's arrival - first token's) / (tokens - 1), as
the client sees them; p50/p99 over the level's requests.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

import openai

PROMPT = (
    "The history of the city begins with a small settlement on the banks of a wide river, where "
    "fishermen and traders met to exchange goods from the hills and the sea. Over the centuries the "
    "settlement grew into"
)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, limit=900):
    start = time.time()
    while time.time() - start < limit:
        if proc.poll() is not None:
            sys.exit(f"the server exited ({proc.returncode}) before it was ready")
        try:
            openai.OpenAI(base_url=url, api_key="none").models.list()
            return
        except Exception:
            time.sleep(1)
    sys.exit(f"the server at {url} was not ready within {limit} s")


def percentile(values, p):
    """Nearest rank, as rdu's own."""
    if not values:
        return float("nan")
    v = sorted(values)
    k = max(1, min(len(v), -(-len(v) * p // 100)))
    return v[int(k) - 1]


def one_request(client, model, tokens):
    """One streamed greedy completion: (completion tokens, time per output token)."""
    times = []
    stream = client.completions.create(
        model=model, prompt=PROMPT, max_tokens=tokens, temperature=0, stream=True,
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].text is not None and chunk.choices[0].finish_reason is None:
            times.append(time.perf_counter())
    n = len(times)
    tpot = (times[-1] - times[0]) / (n - 1) if n > 1 else None
    return n, tpot


def level(url, model, streams, per_stream, tokens):
    """S streams of `per_stream` requests each: aggregate tok/s and the TPOTs."""
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=3600)
    results, errors = [], []
    lock = threading.Lock()

    def stream_worker():
        for _ in range(per_stream):
            try:
                r = one_request(client, model, tokens)
            except Exception as e:  # a failure is reported, never hidden
                with lock:
                    errors.append(repr(e))
                continue
            with lock:
                results.append(r)

    threads = [threading.Thread(target=stream_worker) for _ in range(streams)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        sys.exit(f"{len(errors)} request(s) failed at {streams} streams: {errors[0]}")
    tokens_total = sum(n for n, _ in results)
    tpots = [t for _, t in results if t is not None]
    return {
        "streams": streams,
        "requests": len(results),
        "tokens": tokens_total,
        "wall_s": wall,
        "tok_s": tokens_total / wall,
        "tpot_p50_ms": percentile(tpots, 50) * 1e3,
        "tpot_p99_ms": percentile(tpots, 99) * 1e3,
    }


def start_rdu(rdu, model, threads, batch, ctx, chunk, step_tokens=None):
    port = free_port()
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    cmd = [rdu, "serve", model, "--port", str(port), "--batch", str(batch), "--ctx", str(ctx),
           "--chunk", str(chunk), "--name", "gemma"]
    if step_tokens:
        cmd += ["--step-tokens", str(step_tokens)]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}/v1", "gemma"


def start_llama(python, model, threads, ctx):
    port = free_port()
    cmd = [python, "-m", "llama_cpp.server", "--model", model, "--port", str(port), "--host", "127.0.0.1",
           "--n_threads", str(threads), "--n_threads_batch", str(threads), "--n_ctx", str(ctx),
           "--model_alias", "gemma",
           # Its default interrupts the running request whenever another arrives; queue them instead.
           "--interrupt_requests", "False"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}/v1", "gemma"


def run_server(name, start, levels, per_stream, tokens, repeat=1):
    """Each level `repeat` times in a row: the run of median aggregate tok/s stands for the
    level, with every run's tok/s beside it (`runs_tok_s`)."""
    proc, url, model = start()
    try:
        wait_ready(url, proc)
        one_request(openai.OpenAI(base_url=url, api_key="none"), model, 4)  # warm-up
        out = []
        for s in levels:
            runs = []
            for _ in range(repeat):
                r = level(url, model, s, per_stream, tokens)
                print(f"{name:>16} {s:>3} streams: {r['tok_s']:8.1f} tok/s, TPOT p50 {r['tpot_p50_ms']:7.1f} ms, "
                      f"p99 {r['tpot_p99_ms']:7.1f} ms ({r['requests']} requests, {r['wall_s']:.1f} s)", flush=True)
                runs.append(r)
            mid = dict(sorted(runs, key=lambda r: r["tok_s"])[(len(runs) - 1) // 2])
            mid["runs_tok_s"] = [r["tok_s"] for r in runs]
            if repeat > 1:
                print(f"{name:>16} {s:>3} streams: median {mid['tok_s']:.1f} tok/s of {repeat} runs "
                      f"({min(mid['runs_tok_s']):.1f}-{max(mid['runs_tok_s']):.1f})", flush=True)
            out.append(mid)
        return out
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rdu", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--per-stream", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=512)
    # A chunk no longer than the ~38-token prompt, so prompts go through the prefill bundle, and
    # a budget of two chunks beside the 16 rows (README: "What changed").
    ap.add_argument("--chunk", type=int, default=32)
    ap.add_argument("--step-tokens", type=int, default=80, help="rdu serve --step-tokens (0: its own, --batch + --chunk)")
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each level this many times in a row and report the run of median tok/s")
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--servers", default="rdu,rdu1,llama",
                    help="which to run: rdu (--batch = the most streams), rdu1 (--batch 1, one stream: "
                         "rdu's best single-stream server), llama")
    a = ap.parse_args()
    levels = [int(s) for s in a.levels.split(",")]
    batch = max(levels)
    servers = a.servers.split(",")
    figures = {}
    if "rdu" in servers:
        figures["rdu"] = run_server("rdu serve", lambda: start_rdu(a.rdu, a.model, a.threads, batch, a.ctx, a.chunk, a.step_tokens),
                                    levels, a.per_stream, a.tokens, a.repeat)
    if "rdu1" in servers:
        figures["rdu_batch1"] = run_server("rdu serve -b 1", lambda: start_rdu(a.rdu, a.model, a.threads, 1, a.ctx, a.chunk, a.step_tokens),
                                           [1], a.per_stream, a.tokens, a.repeat)
    if "llama" in servers:
        figures["llama_cpp_python"] = run_server(
            "llama-cpp-python", lambda: start_llama(sys.executable, a.model, a.threads, a.ctx),
            levels, a.per_stream, a.tokens, a.repeat)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({**figures, "args": vars(a)}, f, indent=1)
    summarise(figures)


def summarise(figures):
    rdu, llama = figures.get("rdu"), figures.get("llama_cpp_python")
    if not (rdu and llama):
        return
    print()
    print("| streams | rdu tok/s | llama-cpp-python tok/s | ratio | rdu TPOT p50 / p99 (ms) | llama-cpp-python TPOT p50 / p99 (ms) |")
    print("|---|---|---|---|---|---|")
    for r, l in zip(rdu, llama):
        print(f"| {r['streams']} | {r['tok_s']:.1f} | {l['tok_s']:.1f} | {r['tok_s'] / l['tok_s']:.2f}x | "
              f"{r['tpot_p50_ms']:.1f} / {r['tpot_p99_ms']:.1f} | {l['tpot_p50_ms']:.1f} / {l['tpot_p99_ms']:.1f} |")
    top = rdu[-1]
    single = figures.get("rdu_batch1", rdu)[0]
    print(f"\nat {top['streams']} streams: {top['tok_s'] / llama[-1]['tok_s']:.2f}x llama-cpp-python's aggregate "
          f"tok/s (goal >= 3x), {top['tok_s'] / single['tok_s']:.2f}x rdu's own single-stream tok/s (goal >= 4x)")


if __name__ == "__main__":
    main()
