//! The test kit every crate's tests share (dev-only, never published): where the fixtures are
//! ([`fixtures`]), how their `.npy` files are read ([`npy`]), the tolerance that holds rdu to a
//! third-party reference and reports the worst element ([`Tolerance`]), and two GGUF writers —
//! [`gguf_writer`], bytes of any shape (for the readers' tests and bad-input files), and
//! [`hf_to_gguf`], the tiny HF fixtures converted the way llama.cpp's converter writes them;
//! [`per_fixture!`] writes one test per fixture.

pub mod fixtures;
pub mod gguf_writer;
pub mod hf_to_gguf;
pub mod npy;
pub mod safetensors_edit;
mod tolerance;

pub use tolerance::{Tolerance, Worst};

/// The index of the largest value of `row` (the first, on ties): greedy decoding's choice.
pub fn argmax(row: &[f32]) -> u32 {
    (0..row.len()).fold(0, |best, i| if row[i] > row[best] { i } else { best }) as u32
}

/// Makes a test binary keep the memory it frees for its own reuse: one glibc heap for every
/// thread, no allocation served by a private mapping, the heap never trimmed. Expand it once at
/// the top of a test binary's `main.rs`; it runs before `main` (from `.init_array`), before
/// libtest starts a thread.
///
/// The real-shape certifications draw gigabytes of seeded weights per kind and free them at the
/// kind's end. With glibc's defaults every such buffer is a fresh mapping, so the kernel faults
/// in and zeroes every page of it again: 5.7 million page faults (23 GB of fresh pages, peak
/// resident 3.2 GB) in `qwen3_5_27b_lowers_and_certifies`, a third of its time. With one heap
/// kept, 0.8 million, and the test took 8.4 s instead of 13.6 s (Zen 4, alone); the whole
/// `rdu-compiler` test binary 200 s instead of 261 s. Not for a long-lived process: its resident
/// size stays at its peak.
#[macro_export]
macro_rules! keep_freed_memory {
    () => {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        #[used]
        #[link_section = ".init_array"]
        static KEEP_FREED_MEMORY: extern "C" fn() = $crate::keep_freed_memory;
    };
}

/// What [`keep_freed_memory!`] runs at start-up (glibc on Linux; elsewhere nothing).
pub extern "C" fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets glibc allocator parameters; this runs from `.init_array`,
    // before `main` and before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_MAX, 0);
        // -1 (as glibc's size_t: the largest) turns trimming off; `c_int::MAX` would still trim
        // a free top of more than 2 GiB, and a 27B preset's kind frees more than that.
        libc::mallopt(libc::M_TRIM_THRESHOLD, -1);
    }
}

/// One `#[test]` per fixture: `per_fixture!(check: llama, qwen3)` writes `fn llama()` calling
/// `check("llama")`, and so on, each test named after its fixture.
#[macro_export]
macro_rules! per_fixture {
    ($check:ident: $($arch:ident),+ $(,)?) => {
        $(
            #[test]
            fn $arch() {
                $check(stringify!($arch));
            }
        )+
    };
}
