//! Golden kind programs: the `programs/*.rdu` and `programs/*.spatial` files a bundle carries,
//! compared byte for byte with `tests/golden/<name>/` at the repository root.
//!
//! `UPDATE_EXPECT=1 cargo test …` rewrites them; a diff of the golden files in a commit is how
//! a deliberate change of output shows. Any other difference fails, naming the file.

use rdu_compiler::deploy::StreamedModel;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `tests/golden/<name>` at the repository root.
pub fn golden_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden").join(name)
}

/// Compare (or, with `UPDATE_EXPECT=1`, rewrite) the program files of `model`'s bundle with
/// `tests/golden/<name>/programs/`.
pub fn assert_golden(name: &str, model: &StreamedModel) {
    let bundle = model.bundle().unwrap_or_else(|e| panic!("{name}: bundle: {e}"));
    let programs: BTreeMap<&str, &str> = (bundle.files.iter())
        // Each program's own files; the sources certification ran against (`certified_against`:
        // `*.unsplit.rdu`, `*.reduced.rdu`) are authored programs of other shapes, not its output.
        .filter(|(path, _)| path.starts_with("programs/"))
        .filter(|(path, _)| !path.ends_with(".unsplit.rdu") && !path.ends_with(".reduced.rdu"))
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let dir = golden_dir(name);
    if std::env::var_os("UPDATE_EXPECT").is_some_and(|v| v == "1") {
        let _ = std::fs::remove_dir_all(dir.join("programs"));
        std::fs::create_dir_all(dir.join("programs")).expect("golden dir");
        for (path, text) in &programs {
            std::fs::write(dir.join(path), text).expect("write golden file");
        }
        return;
    }
    let on_disk: Vec<String> = match std::fs::read_dir(dir.join("programs")) {
        Ok(entries) => {
            let mut names: Vec<String> =
                entries.map(|e| format!("programs/{}", e.expect("dir entry").file_name().to_string_lossy())).collect();
            names.sort();
            names
        }
        Err(e) => panic!("{name}: no golden files at {} ({e}); run with UPDATE_EXPECT=1 to write them", dir.display()),
    };
    let produced: Vec<String> = programs.keys().map(|p| p.to_string()).collect();
    assert_eq!(on_disk, produced, "{name}: the bundle's program files differ from the golden set");
    for (path, text) in &programs {
        let golden = std::fs::read_to_string(dir.join(path)).expect("read golden file");
        if golden != *text {
            let line = golden.lines().zip(text.lines()).position(|(a, b)| a != b).map_or(0, |i| i + 1);
            panic!(
                "{name}: {path} differs from tests/golden/{name}/{path} (first at line {line}); \
                 rerun with UPDATE_EXPECT=1 if the change is deliberate"
            );
        }
    }
}
