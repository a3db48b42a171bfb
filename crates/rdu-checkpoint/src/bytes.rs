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
        Bytes::map_file(&File::open(path).map_err(io_error(path))?, path)
    }

    /// [`Bytes::map`] of `file`, open already (`path` names it in errors).
    fn map_file(file: &File, path: &Path) -> Result<Bytes> {
        let io = io_error(path);
        if file.metadata().map_err(io)?.len() == 0 {
            return Ok(Bytes::Owned(Vec::new()));
        }
        // SAFETY: the map is read-only and private to this value; see the note above.
        let map = unsafe { Mmap::map(file) }.map_err(io)?;
        Ok(Bytes::Mapped(map))
    }

    /// Reads `path` whole into anonymous memory starting on a huge-page boundary and advised
    /// for transparent huge pages (`MADV_HUGEPAGE`; a kernel that has them off keeps small
    /// pages), then makes it read-only. The same resident size as a map whose every page is
    /// read, but streamed through far fewer TLB entries: on the 2-core Zen 4 VM of stop 36,
    /// two threads running a loop of 512-bit loads read the 285 MB Gemma 3 270M Q8_0 file at
    /// 23–39 GB/s through its page-cache map, 31–45 GB/s from small anonymous pages and
    /// 58–63 GB/s from huge ones. The price is the read: 0.10–0.7 s there, most of it the
    /// kernel zeroing fresh pages (slow on that VM's first touch of memory), against
    /// 0.04–0.17 s to map the file.
    ///
    /// Memory read in is the process's own and cannot be given back to the page cache under
    /// pressure, so a file larger than the memory the system reports available
    /// (`MemAvailable`, and the room under the process's cgroup memory limit when it has one),
    /// or one on a system that reports neither, is mapped instead.
    ///
    /// `on_read(read, len)` is called after every `READ_STEP` bytes read, and at the end.
    pub(crate) fn read_resident(path: &Path, on_read: &mut dyn FnMut(u64, u64)) -> Result<Bytes> {
        let io = io_error(path);
        let mut file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let room = match (available_memory(), cgroup_room()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if room.is_none_or(|free| len > free) {
            return Bytes::map_file(&file, path);
        }
        let too_big =
            || io(std::io::Error::new(std::io::ErrorKind::OutOfMemory, format!("{len} bytes do not fit memory")));
        let len = usize::try_from(len).map_err(|_| too_big())?;
        if len == 0 {
            return Ok(Bytes::Owned(Vec::new()));
        }
        // Room to start the file on a huge-page boundary inside the map.
        let span = len.checked_add(HUGE_PAGE).ok_or_else(too_big)?;
        let mut map = MmapOptions::new().len(span).map_anon().map_err(io)?;
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

/// The error of an I/O failure on the file at `path`.
fn io_error(path: &Path) -> impl Fn(std::io::Error) -> CheckpointError + Copy + '_ {
    move |source| CheckpointError::Io { file: path.display().to_string(), source }
}

/// `MemAvailable` of `/proc/meminfo` in bytes: the memory the kernel estimates can be given
/// to a new workload without swapping. `None` where there is no such file or line.
fn available_memory() -> Option<u64> {
    mem_available(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// The `MemAvailable` line of a `/proc/meminfo` text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}

/// The room left under this process's cgroup memory limit: `memory.max − memory.current`
/// (cgroup v2) or `memory.limit_in_bytes − memory.usage_in_bytes` (v1; no limit reads as a
/// huge one), from the first of [`cgroup_memory_files`] that can be read. `None` where none
/// can, or v2 says `max`. The usage counts page cache, so the room is, if anything,
/// underestimated.
fn cgroup_room() -> Option<u64> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let number = |p: &Path| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    cgroup_memory_files(&groups)
        .into_iter()
        .find_map(|(limit, usage)| Some(number(&limit)?.saturating_sub(number(&usage)?)))
}

/// The (limit, usage) files of each line of a `/proc/self/cgroup` text that can carry a memory
/// limit, in its order: the v1 `memory` controller's, and the v2 unified hierarchy's (`0::`).
fn cgroup_memory_files(groups: &str) -> Vec<(std::path::PathBuf, std::path::PathBuf)> {
    groups
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            let rel = path.trim_start_matches('/');
            let (dir, limit, usage) = if controllers.is_empty() {
                (Path::new("/sys/fs/cgroup").join(rel), "memory.max", "memory.current")
            } else if controllers.split(',').any(|c| c == "memory") {
                (Path::new("/sys/fs/cgroup/memory").join(rel), "memory.limit_in_bytes", "memory.usage_in_bytes")
            } else {
                return None;
            };
            Some((dir.join(limit), dir.join(usage)))
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn mem_available_reads_its_line_in_bytes() {
        let info = "MemTotal:       24570592 kB\nMemFree:         1000 kB\nMemAvailable:   24170240 kB\n";
        assert_eq!(mem_available(info), Some(24_170_240 * 1024));
        assert_eq!(mem_available("MemTotal:       24570592 kB\n"), None);
        assert_eq!(mem_available("MemAvailable:   lots\n"), None);
    }

    #[test]
    fn cgroup_memory_files_of_v1_v2_and_hybrid_hierarchies() {
        let files = |limit: &str, usage: &str| (PathBuf::from(limit), PathBuf::from(usage));
        assert_eq!(
            cgroup_memory_files("0::/user.slice/run.scope\n"),
            [files(
                "/sys/fs/cgroup/user.slice/run.scope/memory.max",
                "/sys/fs/cgroup/user.slice/run.scope/memory.current"
            )]
        );
        assert_eq!(
            cgroup_memory_files("0::/\n"),
            [files("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current")]
        );
        // Hybrid: the v1 memory controller first, then the unified hierarchy; other controllers skipped.
        let hybrid = "5:devices:/\n4:memory:/jobs/a1\n3:cpu,cpuacct:/\n0::/\n";
        assert_eq!(
            cgroup_memory_files(hybrid),
            [
                files(
                    "/sys/fs/cgroup/memory/jobs/a1/memory.limit_in_bytes",
                    "/sys/fs/cgroup/memory/jobs/a1/memory.usage_in_bytes"
                ),
                files("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
            ]
        );
        assert!(cgroup_memory_files("garbage\n").is_empty());
    }
}
