//! A bundle directory (DESIGN §9): `manifest.json` plus program files, written atomically and deterministically, read and validated.
//!
//! Writing goes to a temporary sibling directory (every file fsynced, `manifest.json`
//! last), which is then renamed into place; an existing bundle is moved aside first and
//! removed only once the new one is in place, and put back if that fails. A directory
//! that is not a bundle is replaced only when forced.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::manifest::{file_blake3, Manifest, FORMAT, VERSION};

mod validate;

#[cfg(test)]
mod tests;

/// A bundle in memory: its manifest and every other file, by path relative to the bundle (`programs/attn.rdu`).
#[derive(Clone, Debug, PartialEq)]
pub struct Bundle {
    pub manifest: Manifest,
    pub files: BTreeMap<String, String>,
}

/// Why a bundle could not be written, read or trusted; every message names the file or field.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The I/O error is part of the message (not a `source`), so a cause chain prints it once.
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{path}: {message}")]
    Json { path: String, message: String },
    #[error("{path} exists and is not an rdu bundle; pass --force to replace it")]
    NotABundle { path: String },
    #[error("{path}: not an rdu bundle manifest (`format` is {found:?}, expected \"{FORMAT}\")")]
    Format { path: String, found: String },
    #[error("{path}: bundle format version {found} is not supported; this build reads version {VERSION} (lower the model again to write it)")]
    Version { path: String, found: u64 },
    #[error("bundle file `{path}`: {problem}")]
    BadPath { path: String, problem: String },
    #[error("manifest.json: {field} names `{path}`, which the bundle does not contain")]
    MissingFile { field: String, path: String },
    #[error("manifest.json: layers[{idx}] runs kind `{kind}`, which programs.kinds does not define")]
    UnknownKind { idx: usize, kind: String },
    #[error("manifest.json: layers[{idx}].bind omits `{tensor}`, which kind `{kind}` declares")]
    BindMissing { idx: usize, kind: String, tensor: String },
    #[error("manifest.json: layers[{idx}].bind binds `{tensor}`, which kind `{kind}` does not declare")]
    BindExtra { idx: usize, kind: String, tensor: String },
    #[error(
        "manifest.json: layers[{idx}].bind binds both `{first}` and `{second}` to `{target}`; a binding is one-to-one"
    )]
    BindDuplicate { idx: usize, first: String, second: String, target: String },
    #[error("manifest.json: {field} refers to `{tensor}`, which no tensors, inputs, states, shared or activations entry defines")]
    Unresolved { field: String, tensor: String },
    #[error("manifest.json: layer {layer} is missing; layers must list 0..{n_layers} each exactly once")]
    LayerMissing { layer: usize, n_layers: usize },
    #[error("manifest.json: layers[{idx}] is layer {layer}; layers must list 0..{n_layers} once each, in order")]
    LayerOrder { idx: usize, layer: usize, n_layers: usize },
    #[error("manifest.json: {field}: {problem}")]
    Invalid { field: String, problem: String },
    #[error("bundle file `{path}` does not match its hash ({field} in manifest.json): it changed after certification")]
    Tampered { path: String, field: String },
    #[error("bundle file `{path}` is not bound to its bytes: manifest.json has no {field}")]
    Unhashed { path: String, field: String },
}

impl Bundle {
    /// Write the bundle to `dir` atomically. An existing `dir` must be a bundle unless `force`.
    pub fn write(&self, dir: &Path, force: bool) -> Result<(), BundleError> {
        self.validate()?;
        let name = dir.file_name().ok_or_else(|| BundleError::BadPath {
            path: dir.display().to_string(),
            problem: "a bundle directory needs a final name component".into(),
        })?;
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        fs::create_dir_all(&parent).map_err(io(&parent))?;
        let exists = dir.symlink_metadata().is_ok();
        if exists && !force && !is_bundle(dir) {
            return Err(BundleError::NotABundle { path: dir.display().to_string() });
        }
        let prefix = format!(".{}.new-", name.to_string_lossy());
        let staging = tempfile::Builder::new().prefix(&prefix).tempdir_in(&parent).map_err(io(&parent))?;
        write_files(self, staging.path())?;
        let staged = staging.keep();
        let placed = if exists { swap_in(&staged, dir, &parent) } else { rename_in(&staged, dir) };
        if placed.is_err() {
            let _ = fs::remove_dir_all(&staged);
        }
        placed?;
        sync_dir(&parent)
    }

    /// Read the bundle in `dir`: its manifest (format and version checked) and every other file.
    /// Call [`Bundle::validate`] before trusting it, or use [`Bundle::open`].
    pub fn read(dir: &Path) -> Result<Bundle, BundleError> {
        let path = dir.join("manifest.json");
        let shown = path.display().to_string();
        let text = fs::read_to_string(&path).map_err(io(&path))?;
        Bundle::check_header(&text, &shown)?;
        let mut files = BTreeMap::new();
        collect_files(dir, "", &mut files)?;
        Bundle::from_checked_text(&text, &shown, files)
    }

    /// A bundle from a manifest's text (`shown` names it in errors) and the bundle's other files,
    /// checked as [`Bundle::read`] checks them: format, version, every field, every hash.
    pub fn from_manifest_text(text: &str, shown: &str, files: BTreeMap<String, String>) -> Result<Bundle, BundleError> {
        Bundle::check_header(text, shown)?;
        Bundle::from_checked_text(text, shown, files)
    }

    /// [`Bundle::from_manifest_text`] once the header is checked.
    fn from_checked_text(text: &str, shown: &str, files: BTreeMap<String, String>) -> Result<Bundle, BundleError> {
        let manifest = serde_json::from_str(text).map_err(|e| json(shown, e))?;
        let bundle = Bundle { manifest, files };
        bundle.hash_problems().into_iter().next().map_or(Ok(bundle), Err)
    }

    /// The manifest's `format` and `version`, before its fields are read.
    fn check_header(text: &str, shown: &str) -> Result<(), BundleError> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| json(shown, e))?;
        let found = value.get("format").and_then(|f| f.as_str()).unwrap_or("");
        if found != FORMAT {
            return Err(BundleError::Format { path: shown.into(), found: found.into() });
        }
        match value.get("version").and_then(|v| v.as_u64()) {
            Some(v) if v == u64::from(VERSION) => Ok(()),
            found => Err(BundleError::Version { path: shown.into(), found: found.unwrap_or(0) }),
        }
    }

    /// Every program file the manifest binds to its bytes: (manifest field of the hash, file, recorded hash).
    pub fn hashed_files(&self) -> Vec<(String, String, String)> {
        let p = &self.manifest.programs;
        let mut out = Vec::new();
        let mut add = |field: String, source: &(String, String), spatial: &(String, String), attached: &[_]| {
            out.push((format!("{field}.source_blake3"), source.0.clone(), source.1.clone()));
            out.push((format!("{field}.spatial_blake3"), spatial.0.clone(), spatial.1.clone()));
            for (i, a) in attached.iter().enumerate() {
                let a: &crate::manifest::Attached = a;
                out.push((format!("{field}.certified_against[{i}].blake3"), a.file.clone(), a.blake3.clone()));
            }
        };
        for (field, e) in [("programs.embed", &p.embed), ("programs.head", &p.head)] {
            let source = (e.file_source.clone(), e.source_blake3.clone());
            let spatial = (e.file_spatial.clone(), e.spatial_blake3.clone());
            add(field.to_string(), &source, &spatial, &e.certified_against);
        }
        for k in &p.kinds {
            let source = (k.file_source.clone(), k.source_blake3.clone());
            let spatial = (k.file_spatial.clone(), k.spatial_blake3.clone());
            add(format!("programs.kinds[{}]", k.name), &source, &spatial, &k.certified_against);
        }
        out
    }

    /// A missing hash, or a present file whose bytes differ from its recorded hash, one per file.
    pub fn hash_problems(&self) -> Vec<BundleError> {
        let mut out = Vec::new();
        for (field, path, hash) in self.hashed_files() {
            if hash.is_empty() {
                out.push(BundleError::Unhashed { path, field });
            } else if let Some(text) = self.files.get(&path) {
                if file_blake3(text.as_bytes()) != hash {
                    out.push(BundleError::Tampered { path, field });
                }
            }
        }
        out
    }

    /// Records every program file's hash from the files in memory (after writing or editing them).
    pub fn rehash(&mut self) {
        let files = &self.files;
        let hash = |path: &str| files.get(path).map(|t| file_blake3(t.as_bytes())).unwrap_or_default();
        let p = &mut self.manifest.programs;
        for e in [&mut p.embed, &mut p.head] {
            e.source_blake3 = hash(&e.file_source);
            e.spatial_blake3 = hash(&e.file_spatial);
            e.certified_against.iter_mut().for_each(|a| a.blake3 = hash(&a.file));
        }
        for k in &mut p.kinds {
            k.source_blake3 = hash(&k.file_source);
            k.spatial_blake3 = hash(&k.file_spatial);
            k.certified_against.iter_mut().for_each(|a| a.blake3 = hash(&a.file));
        }
    }

    /// [`Bundle::read`] then [`Bundle::validate`].
    pub fn open(dir: &Path) -> Result<Bundle, BundleError> {
        let bundle = Bundle::read(dir)?;
        bundle.validate()?;
        Ok(bundle)
    }

    /// The first problem [`Bundle::problems`] finds.
    pub fn validate(&self) -> Result<(), BundleError> {
        self.problems().into_iter().next().map_or(Ok(()), Err)
    }

    /// Every problem of the bundle: version, file paths, referenced files, cut, programs, layers and their bindings, tensors.
    pub fn problems(&self) -> Vec<BundleError> {
        validate::problems(self)
    }
}

/// Whether `dir` holds a manifest carrying our format marker.
pub fn is_bundle(dir: &Path) -> bool {
    let Ok(text) = fs::read_to_string(dir.join("manifest.json")) else { return false };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else { return false };
    value.get("format").and_then(|f| f.as_str()) == Some(FORMAT)
}

/// Write every file and then `manifest.json` into `root`, fsyncing files and directories.
fn write_files(bundle: &Bundle, root: &Path) -> Result<(), BundleError> {
    let mut dirs = BTreeSet::from([root.to_path_buf()]);
    for (rel, text) in &bundle.files {
        let path = root.join(rel);
        let parent = path.parent().expect("a joined path has a parent");
        fs::create_dir_all(parent).map_err(io(parent))?;
        write_synced(&path, text.as_bytes())?;
        dirs.extend(parent.ancestors().take_while(|d| d.starts_with(root)).map(Path::to_path_buf));
    }
    fail_point(FailPoint::BeforeManifest)?;
    write_synced(&root.join("manifest.json"), bundle.manifest.to_json().as_bytes())?;
    // Children sort after their parents: syncing in reverse makes every entry durable before its directory.
    dirs.iter().rev().try_for_each(|d| sync_dir(d))
}

/// Places where tests inject a failure into a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FailPoint {
    /// After the program files, before `manifest.json`.
    BeforeManifest,
    /// After the old bundle was moved aside, before the new one is renamed in.
    AfterAside,
}

#[cfg(test)]
thread_local! {
    static FAIL_AT: std::cell::Cell<Option<FailPoint>> = const { std::cell::Cell::new(None) };
}

fn fail_point(point: FailPoint) -> Result<(), BundleError> {
    #[cfg(test)]
    if FAIL_AT.with(|f| f.get()) == Some(point) {
        let source = std::io::Error::other(format!("injected failure at {point:?}"));
        return Err(BundleError::Io { path: "<test>".into(), error: source });
    }
    let _ = point;
    Ok(())
}

fn rename_in(staged: &Path, dir: &Path) -> Result<(), BundleError> {
    fs::rename(staged, dir).map_err(io(dir))
}

/// Move the existing `dir` aside, rename `staged` in, then remove the old one; put it back on failure.
fn swap_in(staged: &Path, dir: &Path, parent: &Path) -> Result<(), BundleError> {
    let name = dir.file_name().expect("checked by write").to_string_lossy();
    let aside = (0..).map(|n| parent.join(format!(".{name}.old-{}-{n}", std::process::id()))).find(|p| !p.exists());
    let aside = aside.expect("some suffix is free");
    fs::rename(dir, &aside).map_err(io(dir))?;
    let placed = fail_point(FailPoint::AfterAside).and_then(|()| rename_in(staged, dir));
    if let Err(e) = placed {
        let _ = fs::rename(&aside, dir);
        return Err(e);
    }
    // The new bundle is in place; a leftover old copy is only litter.
    let _ = if aside.is_dir() { fs::remove_dir_all(&aside) } else { fs::remove_file(&aside) };
    Ok(())
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), BundleError> {
    let mut file = fs::File::create(path).map_err(io(path))?;
    file.write_all(bytes).map_err(io(path))?;
    file.sync_all().map_err(io(path))
}

fn sync_dir(dir: &Path) -> Result<(), BundleError> {
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// Every regular file under `dir` but the top-level `manifest.json`, keyed by `/`-separated relative path.
fn collect_files(dir: &Path, prefix: &str, files: &mut BTreeMap<String, String>) -> Result<(), BundleError> {
    let mut entries = fs::read_dir(dir).map_err(io(dir))?.collect::<Result<Vec<_>, _>>().map_err(io(dir))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let name = entry.file_name().into_string().map_err(|n| BundleError::BadPath {
            path: format!("{prefix}{}", n.to_string_lossy()),
            problem: "is not valid UTF-8".into(),
        })?;
        let rel = format!("{prefix}{name}");
        let kind = entry.file_type().map_err(io(&path))?;
        if kind.is_dir() {
            collect_files(&path, &format!("{rel}/"), files)?;
        } else if kind.is_file() {
            if rel != "manifest.json" {
                let text = fs::read_to_string(&path).map_err(io(&path))?;
                files.insert(rel, text);
            }
        } else {
            return Err(BundleError::BadPath { path: rel, problem: "is neither a file nor a directory".into() });
        }
    }
    Ok(())
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> BundleError + '_ {
    move |error| BundleError::Io { path: path.display().to_string(), error }
}

fn json(path: &str, e: serde_json::Error) -> BundleError {
    BundleError::Json { path: path.into(), message: e.to_string() }
}
