//! The bytes of one checkpoint file: a read-only memory map, the file read whole into
//! huge-page memory (for an engine that streams every weight on every step), or an owned
//! buffer for in-memory input.

use crate::error::{CheckpointError, Result};
use memmap2::{Mmap, MmapOptions};
use std::fs::File;
use std::io::Read;
use std::ops::Deref;
use std::path::Path;

pub(crate) enum Bytes {
    Mapped(Mmap),
    /// The file's `len` bytes at `offset` of an anonymous map (read-only once filled).
    Resident {
        map: Mmap,
        offset: usize,
        len: usize,
    },
    Owned(Vec<u8>),
}

/// The size of a transparent huge page on x86-64 and aarch64 with 4 KiB base pages.
const HUGE_PAGE: usize = 2 << 20;
/// Bytes [`Bytes::read_resident`] reads between two reports of its progress.
const READ_STEP: usize = 64 << 20;

impl Bytes {
    /// Maps `path` read-only. The map assumes nobody truncates or rewrites the file while it
    /// is open, as every mmap-based checkpoint reader does.
    pub(crate) fn map(path: &Path) -> Result<Bytes> {
        let io = |source| CheckpointError::Io { file: path.display().to_string(), source };
        let file = File::open(path).map_err(io)?;
        if file.metadata().map_err(io)?.len() == 0 {
            return Ok(Bytes::Owned(Vec::new()));
        }
        // SAFETY: the map is read-only and private to this value; see the note above.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Ok(Bytes::Mapped(map))
    }

    /// Reads `path` whole into anonymous memory starting on a huge-page boundary and advised
    /// for transparent huge pages (`MADV_HUGEPAGE`; a kernel that has them off keeps small
    /// pages), then makes it read-only. The same resident size as a map whose every page is
    /// read, but streamed through far fewer TLB entries: on the 2-core Zen 4 VM of stop 36,
    /// two threads read the 285 MB Gemma 3 270M Q8_0 file at 23–39 GB/s through its
    /// page-cache map, 44–45 GB/s from small anonymous pages and 58–63 GB/s from huge ones
    /// (`bench/vs-llama-cpp/bandwidth.c`'s loop); reading the file in took 0.08 s.
    ///
    /// Memory read in is the process's own and cannot be given back to the page cache under
    /// pressure, so a file larger than the memory the system reports available
    /// (`MemAvailable`), or one on a system that does not report it, is mapped instead.
    ///
    /// `on_read(read, len)` is called after every `READ_STEP` bytes read, and at the end.
    pub(crate) fn read_resident(path: &Path, on_read: &mut dyn FnMut(u64, u64)) -> Result<Bytes> {
        let io = |source| CheckpointError::Io { file: path.display().to_string(), source };
        let mut file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if available_memory().is_none_or(|free| len > free) {
            return Bytes::map(path);
        }
        let len = usize::try_from(len).map_err(|_| {
            io(std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!("{len} bytes do not fit this address space"),
            ))
        })?;
        if len == 0 {
            return Ok(Bytes::Owned(Vec::new()));
        }
        let room = len.checked_add(HUGE_PAGE).ok_or_else(|| {
            io(std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!("{len} bytes do not fit this address space"),
            ))
        })?;
        let mut map = MmapOptions::new().len(room).map_anon().map_err(io)?;
        #[cfg(target_os = "linux")]
        {
            // Advice only: without transparent huge pages the memory is still correct.
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        let offset = map.as_ptr().align_offset(HUGE_PAGE).min(HUGE_PAGE);
        for (i, step) in map[offset..offset + len].chunks_mut(READ_STEP).enumerate() {
            file.read_exact(step).map_err(io)?;
            on_read((i * READ_STEP + step.len()) as u64, len as u64);
        }
        let map = map.make_read_only().map_err(io)?;
        Ok(Bytes::Resident { map, offset, len })
    }
}

/// `MemAvailable` of `/proc/meminfo` in bytes: the memory the kernel estimates can be given
/// to a new workload without swapping. `None` where there is no such file or line.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}

impl Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(map) => map,
            Bytes::Resident { map, offset, len } => &map[*offset..*offset + *len],
            Bytes::Owned(vec) => vec,
        }
    }
}
