//! The bytes of one checkpoint file: a read-only memory map, or an owned buffer for in-memory input.

use crate::error::{CheckpointError, Result};
use memmap2::Mmap;
use std::fs::File;
use std::ops::Deref;
use std::path::Path;

pub(crate) enum Bytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

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
}

impl Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(map) => map,
            Bytes::Owned(vec) => vec,
        }
    }
}
