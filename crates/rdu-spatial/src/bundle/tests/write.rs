//! Writing and reading bundles: round trip, byte-identical rewrites, atomic failure, refusal without --force.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use super::sample::sample;
use crate::bundle::{is_bundle, Bundle, BundleError, FailPoint, FAIL_AT};

/// Every file under `dir` with its bytes, by relative path.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().to_string_lossy().replace('\\', "/");
                out.insert(rel, fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// The names in `dir`, sorted: no temporary or set-aside copies may be left behind.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

/// Inject a failure at `point` for the rest of the scope.
struct Fail;
impl Fail {
    fn at(point: FailPoint) -> Fail {
        FAIL_AT.with(|f| f.set(Some(point)));
        Fail
    }
}
impl Drop for Fail {
    fn drop(&mut self) {
        FAIL_AT.with(|f| f.set(None));
    }
}

#[test]
fn write_then_read_gives_the_same_bundle() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out").join("bundle");
    let bundle = sample();
    bundle.write(&dir, false).unwrap();
    assert!(is_bundle(&dir));
    assert_eq!(Bundle::read(&dir).unwrap(), bundle);
    assert_eq!(Bundle::open(&dir).unwrap(), bundle);
}

#[test]
fn writing_twice_gives_byte_identical_files() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    sample().write(&a, false).unwrap();
    sample().write(&b, false).unwrap();
    let first = snapshot(&a);
    assert_eq!(first.len(), 9, "manifest and eight program files");
    assert_eq!(first, snapshot(&b));
    sample().write(&a, false).unwrap();
    assert_eq!(first, snapshot(&a), "replacing a bundle with itself changes no byte");
    let manifest = String::from_utf8(first["manifest.json"].clone()).unwrap();
    assert!(manifest.starts_with("{\n  \"format\": \"rdu-bundle\",\n  \"version\": 4,") && manifest.ends_with("}\n"));
    assert_eq!(entries(tmp.path()), ["a", "b"]);
}

#[test]
fn a_failed_write_of_a_new_bundle_leaves_no_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bundle");
    let _fail = Fail::at(FailPoint::BeforeManifest);
    let err = sample().write(&dir, false).unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert!(entries(tmp.path()).is_empty(), "left behind: {:?}", entries(tmp.path()));
}

#[test]
fn a_failed_replacement_keeps_the_old_bundle_intact() {
    for point in [FailPoint::BeforeManifest, FailPoint::AfterAside] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("bundle");
        sample().write(&dir, false).unwrap();
        let old = snapshot(&dir);
        let mut changed = sample();
        changed.manifest.model = "another-model".into();
        let fail = Fail::at(point);
        assert!(changed.write(&dir, false).is_err(), "{point:?} must fail");
        drop(fail);
        assert_eq!(snapshot(&dir), old, "{point:?}: the old bundle changed");
        assert_eq!(entries(tmp.path()), ["bundle"], "{point:?}: litter left behind");
        changed.write(&dir, false).unwrap();
        assert_eq!(Bundle::read(&dir).unwrap().manifest.model, "another-model");
        assert_eq!(entries(tmp.path()), ["bundle"]);
    }
}

#[test]
fn a_directory_that_is_not_a_bundle_is_replaced_only_with_force() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("results");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("notes.txt"), "keep me").unwrap();
    let err = sample().write(&dir, false).unwrap_err();
    assert!(matches!(err, BundleError::NotABundle { .. }));
    assert!(err.to_string().contains("pass --force"), "{err}");
    assert_eq!(fs::read_to_string(dir.join("notes.txt")).unwrap(), "keep me");

    fs::write(dir.join("manifest.json"), "{\"format\": \"something-else\"}").unwrap();
    assert!(matches!(sample().write(&dir, false), Err(BundleError::NotABundle { .. })));

    sample().write(&dir, true).unwrap();
    assert!(!dir.join("notes.txt").exists());
    assert_eq!(Bundle::read(&dir).unwrap(), sample());
    assert_eq!(entries(tmp.path()), ["results"]);
}

#[test]
fn a_file_in_the_way_is_replaced_only_with_force() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bundle");
    fs::write(&path, "not a directory").unwrap();
    assert!(matches!(sample().write(&path, false), Err(BundleError::NotABundle { .. })));
    assert_eq!(fs::read_to_string(&path).unwrap(), "not a directory");
    sample().write(&path, true).unwrap();
    assert!(is_bundle(&path));
}

#[test]
fn an_invalid_bundle_is_never_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bundle");
    let mut bundle = sample();
    bundle.files.remove("programs/attn.spatial");
    assert!(matches!(bundle.write(&dir, false), Err(BundleError::MissingFile { .. })));
    assert!(entries(tmp.path()).is_empty());
}

#[test]
fn read_rejects_other_formats_and_versions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bundle");
    sample().write(&dir, false).unwrap();
    let manifest = fs::read_to_string(dir.join("manifest.json")).unwrap();
    fs::write(dir.join("manifest.json"), manifest.replace("\"version\": 4", "\"version\": 2")).unwrap();
    let err = Bundle::read(&dir).unwrap_err();
    assert!(matches!(err, BundleError::Version { found: 2, .. }), "{err}");
    // An old bundle is refused in one line that names both versions and what to do.
    let message = err.to_string();
    assert!(message.contains("version 2 is not supported") && message.contains("reads version 4"), "{message}");
    assert!(message.contains("lower the model again") && !message.contains('\n'), "{message}");
    fs::write(dir.join("manifest.json"), manifest.replace("rdu-bundle", "other")).unwrap();
    assert!(matches!(Bundle::read(&dir), Err(BundleError::Format { .. })));
    assert!(!is_bundle(&dir));
    fs::write(dir.join("manifest.json"), manifest.replace("\"model\"", "\"modle\"")).unwrap();
    let err = Bundle::read(&dir).unwrap_err();
    assert!(matches!(err, BundleError::Json { .. }) && err.to_string().contains("modle"), "{err}");
}

#[test]
fn read_rejects_a_binding_that_names_a_tensor_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bundle");
    sample().write(&dir, false).unwrap();
    let manifest = fs::read_to_string(dir.join("manifest.json")).unwrap();
    let twice = manifest.replacen("\"Kc0\": \"Kc0\",", "\"Kc0\": \"Kc0\",\n\"Kc0\": \"Kc1\",", 1);
    assert_ne!(twice, manifest);
    fs::write(dir.join("manifest.json"), twice).unwrap();
    let err = Bundle::read(&dir).unwrap_err();
    assert!(err.to_string().contains("`Kc0` appears twice"), "{err}");
}

#[test]
fn read_collects_files_the_manifest_does_not_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bundle");
    let mut bundle = sample();
    bundle.files.insert("docs/README.md".into(), "a bundle\n".into());
    bundle.write(&dir, false).unwrap();
    assert_eq!(Bundle::open(&dir).unwrap(), bundle);
}

#[test]
fn reading_refuses_a_file_edited_after_writing_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    sample().write(&dir, false).unwrap();
    let path = dir.join("programs/attn.spatial");
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, text.replace("section 0", "section 1")).unwrap();
    let err = Bundle::read(&dir).unwrap_err();
    assert!(
        matches!(&err, BundleError::Tampered { path, field }
        if path == "programs/attn.spatial" && field == "programs.kinds[attn].spatial_blake3"),
        "{err:?}"
    );
    let line = err.to_string();
    assert!(!line.contains('\n') && line.contains("programs/attn.spatial"), "{line}");
    assert!(Bundle::open(&dir).is_err());
}

#[test]
fn reading_refuses_a_program_file_without_a_hash() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    sample().write(&dir, false).unwrap();
    let manifest = fs::read_to_string(dir.join("manifest.json")).unwrap();
    let head = sample().manifest.programs.head.source_blake3;
    let cut = manifest.replace(&format!("      \"source_blake3\": \"{head}\",\n"), "");
    assert_ne!(cut, manifest, "the head's source hash line is in the manifest");
    fs::write(dir.join("manifest.json"), cut).unwrap();
    let err = Bundle::read(&dir).unwrap_err();
    assert!(matches!(&err, BundleError::Unhashed { path, .. } if path == "programs/head.rdu"), "{err:?}");
}

#[test]
fn a_bundle_whose_hashes_are_stale_is_not_written() {
    let mut b = sample();
    b.files.insert("programs/embed.rdu".into(), "# edited\n".into());
    assert!(matches!(b.validate(), Err(BundleError::Tampered { path, .. }) if path == "programs/embed.rdu"));
    b.rehash();
    assert!(b.validate().is_ok());
}
