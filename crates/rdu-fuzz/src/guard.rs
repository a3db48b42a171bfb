//! The allocation guard: a global allocator that refuses any single allocation above a limit, or
//! live memory above a total, on the thread running an input. A parser that believes a size
//! it read (a count, a length, a dimension) and allocates for it before checking it against
//! the input is a failure to find: the guard writes the input being run to a file, says so on
//! stderr and aborts — an allocator may not unwind, and an abort is what such an input would
//! cause for a user too.
//!
//! Only the `rdu-fuzz` binary installs it (`#[global_allocator]`); the library only names it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Largest single allocation an input may cause (bytes).
pub static MAX_ALLOCATION: AtomicUsize = AtomicUsize::new(256 << 20);
/// Largest live total (bytes) while an input runs, the harness's own data included.
pub static MAX_LIVE: AtomicUsize = AtomicUsize::new(2 << 30);
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Whether the guard is armed (only while an input runs).
static ARMED: AtomicBool = AtomicBool::new(false);
/// The input being run, and the file it is written to if the guard fires.
pub(crate) static CURRENT: Mutex<Vec<u8>> = Mutex::new(Vec::new());
pub(crate) static DUMP: Mutex<Option<(File, String)>> = Mutex::new(None);

/// The guarded allocator: the system allocator, plus the two limits while armed.
pub struct Guard;

// SAFETY: every method hands its call, unchanged, to `System`, which upholds `GlobalAlloc`'s
// contract; the guard only counts sizes, and what it refuses it aborts on — it never unwinds.
unsafe impl GlobalAlloc for Guard {
    // SAFETY: `GlobalAlloc::alloc`'s contract, passed on to `System`.
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires it.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    // SAFETY: `GlobalAlloc::alloc_zeroed`'s contract, passed on to `System`.
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc_zeroed` requires it.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    // SAFETY: `GlobalAlloc::dealloc`'s contract, passed on to `System`.
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    // SAFETY: `GlobalAlloc::realloc`'s contract, passed on to `System`.
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        check(new_size);
        // SAFETY: `ptr` came from `System` through this allocator, with `layout`; `new_size` is
        // the caller's, as `GlobalAlloc::realloc` requires it.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

/// Arms or disarms the guard (the harness arms it around each input).
pub(crate) fn arm(on: bool) {
    ARMED.store(on, Ordering::SeqCst);
}

fn check(size: usize) {
    if !ARMED.load(Ordering::Relaxed) {
        return;
    }
    let live = LIVE.load(Ordering::Relaxed).saturating_add(size);
    let (max_one, max_live) = (MAX_ALLOCATION.load(Ordering::Relaxed), MAX_LIVE.load(Ordering::Relaxed));
    if size > max_one || live > max_live {
        // Nothing below allocates: raw writes to a file opened before the run, then abort.
        ARMED.store(false, Ordering::SeqCst);
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(b"\nrdu-fuzz: ALLOCATION FAILURE: an input asked for ");
        let _ = write_number(&mut err, size);
        let _ = err.write_all(b" bytes (live ");
        let _ = write_number(&mut err, live);
        let _ = err.write_all(b"); the input is in ");
        if let Ok(dump) = DUMP.try_lock() {
            if let Some((mut file, name)) = dump.as_ref().map(|(f, n)| (f, n.as_str())) {
                if let Ok(input) = CURRENT.try_lock() {
                    let _ = file.write_all(&input);
                    let _ = file.flush();
                }
                let _ = err.write_all(name.as_bytes());
            }
        }
        let _ = err.write_all(b"\n");
        drop(err);
        // Disarmed, the guard lets allocations through again: the backtrace may allocate.
        eprintln!("{}", std::backtrace::Backtrace::force_capture());
        std::process::abort();
    }
}

fn write_number(out: &mut impl Write, mut n: usize) -> std::io::Result<()> {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.write_all(&digits[i..])
}
