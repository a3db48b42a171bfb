//! Checkpoint readers: safetensors (HF) and GGUF (llama.cpp) over mmap, and the ggml block
//! formats (Q8_0 kept as blocks; Q4_0, Q5_0, Q4_K, Q5_K, Q6_K dequantised to dense).
//!
//! Never panics on input: every size and offset read from a file is checked before use.
