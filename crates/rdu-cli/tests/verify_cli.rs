//! `rdu verify` on bundles written by `rdu lower`; `rdu show` and `rdu run --bundle` refuse an edited file.

use std::path::Path;
use std::process::Command;

fn rdu(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdu")).args(args).output().expect("rdu runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn lower(dir: &Path, args: &[&str]) {
    lower_model("tiny-qwen3", dir, args);
}

fn lower_model(model: &str, dir: &Path, args: &[&str]) {
    let mut all = vec!["lower", model, "-o", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let (ok, _, err) = rdu(&all);
    assert!(ok, "{err}");
}

#[test]
fn pristine_bundles_of_every_cut_verify_one_line_per_program() {
    let tmp = tempfile::tempdir().unwrap();
    let cuts: [&[&str]; 9] = [
        &["--cut", "forward", "--seq", "3"],
        &["--cut", "decode", "--ctx", "16"],
        &["--cut", "batched", "--batch", "2", "--ctx", "16"],
        &["--cut", "tp", "--tp", "2", "--ctx", "16"],
        &["--cut", "batched-tp", "--batch", "2", "--tp", "2", "--ctx", "16"],
        &["--cut", "prefill", "--chunk", "3", "--ctx", "16"],
        &["--cut", "prefill-tp", "--chunk", "3", "--tp", "2", "--ctx", "16"],
        &["--cut", "verify", "--draft-tokens", "3", "--ctx", "16"],
        &["--cut", "verify", "--draft-tokens", "2", "--batch", "2", "--tp", "2", "--ctx", "16"],
    ];
    for (i, cut) in cuts.iter().enumerate() {
        let dir = tmp.path().join(format!("b{i}"));
        lower(&dir, cut);
        verified(&dir, "tiny-qwen3", cut);
    }
}

/// The verify cut of a hybrid (a recurrent state resumed from a kept row) and of a model with
/// sliding-window rings (the context longer than the window: drafted rows pending).
#[test]
fn verify_bundles_of_a_hybrid_and_of_rings_verify() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, model) in ["tiny-qwen3-next", "tiny-gemma3"].into_iter().enumerate() {
        let dir = tmp.path().join(format!("v{i}"));
        let cut: &[&str] = &["--cut", "verify", "--draft-tokens", "3", "--ctx", "40"];
        lower_model(model, &dir, cut);
        verified(&dir, model, cut);
    }
}

/// `rdu verify --model MODEL` of the bundle in `dir`: one `ok` line per program.
fn verified(dir: &Path, model: &str, cut: &[&str]) {
    {
        let (ok, out, err) = rdu(&["verify", dir.to_str().unwrap(), "--model", model]);
        assert!(ok, "{cut:?}: {err}");
        let lines: Vec<&str> = out.lines().filter(|l| l.contains("  ok  ") && l.contains("max |err|")).collect();
        let programs = std::fs::read_dir(dir.join("programs"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "spatial"))
            .count();
        assert_eq!(lines.len(), programs, "{cut:?}: one line per program:\n{out}");
        assert!(lines[0].starts_with("embed ") && lines[programs - 1].starts_with("head "), "{out}");
        assert!(lines.iter().all(|l| l.contains("structure, resources") && l.contains("numbers")), "{out}");
    }
}

#[test]
fn an_edited_program_is_refused_by_show_run_and_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    lower(&dir, &["--cut", "decode", "--ctx", "16"]);
    let spatial = std::fs::read_dir(dir.join("programs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.extension().is_some_and(|e| e == "spatial")
                && !p.ends_with("embed.spatial")
                && !p.ends_with("head.spatial")
        })
        .unwrap();
    let text = std::fs::read_to_string(&spatial).unwrap();
    let edited = text.replacen("scale=", "scale=2.0, unused_scale=", 1);
    assert_ne!(edited, text);
    std::fs::write(&spatial, &edited).unwrap();
    let file = format!("programs/{}", spatial.file_name().unwrap().to_string_lossy());
    let d = dir.to_str().unwrap();
    for args in
        [vec!["show", d], vec!["run", "tiny-qwen3", "--tokens", "1,2", "-n", "1", "--bundle", d], vec!["verify", d]]
    {
        let (ok, _, err) = rdu(&args);
        assert!(!ok, "{args:?} accepted an edited program");
        assert!(
            err.contains(&file) && err.contains("does not match its hash") && err.lines().count() == 1,
            "{args:?}: {err}"
        );
    }
}
