//! Bad input as a new user types it, through the binary: every case exits 1 with exactly one
//! `error: ...` line on stderr and no panic (`common::user_error`); closed pipes end quietly;
//! the positive cases the refusals used to hide (batch 1, forward and prefill bundles run
//! with `--bundle`) run.

use rdu_testkit::fixtures;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common;

use common::{ok, user_error};

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

fn s(p: &Path) -> String {
    p.to_str().expect("UTF-8 path").to_string()
}

/// Runs each case and checks the refusal names `needle`.
fn refuses(cases: &[(&[&str], &str)]) {
    for (args, needle) in cases {
        let line = user_error(args);
        assert!(line.contains(needle), "rdu {args:?}: `{line}` should mention `{needle}`");
    }
}

#[test]
fn usage_errors_are_one_line_naming_the_flag() {
    refuses(&[
        (&["run", "tiny-llama", "--tokens", "1", "--ctx", "-3"], "--ctx takes a whole number"),
        (&["run", "tiny-llama", "--tokens", "1", "-n", "-64"], "-n takes a whole number"),
        (&["run", "tiny-llama", "--tokens", "x"], "--tokens takes token ids"),
        (&["run", "tiny-llama", "--tokens", "1,-2"], "--tokens takes token ids"),
        (&["run", "tiny-llama", "--tokens", "1", "--temp", "hot"], "--temp takes a number"),
        (&["run", "tiny-llama", "--tokens", "1", "--top-p", "-"], "--top-p"),
        (&["run", "tiny-llama", "--tokens", "1", "--seed", "-1"], "--seed takes a whole number"),
        (&["run", "tiny-llama", "--tokens", "1", "--cut", "sideways"], "--cut takes forward or decode"),
        (&["run", "tiny-llama", "--tokens", "1", "--engine", "gpu"], "--engine takes spatial or reference"),
        (&["run", "tiny-llama", "--tokenz", "1"], "did you mean `--tokens`"),
        (&["run"], "missing"),
        (&["run", "tiny-llama", "--tokens", "1", "--prompt", "hi"], "cannot be used together"),
        (&["lower", "tiny-llama", "--ctx"], "--ctx needs a value"),
        (&["lower", "tiny-llama", "--cut", "diagonal"], "--cut takes forward, decode, batched"),
        (&["lower", "tiny-llama", "--storage", "q4"], "--storage takes auto, q8 or dense"),
        (&["lower", "tiny-llama", "--batch", "-8"], "--batch takes a whole number"),
        (&["lower", "tiny-llama", "--tp", "two"], "--tp takes a whole number"),
        (&["lower", "tiny-llama", "--ctx", "99999999999999999999999"], "--ctx takes a whole number"),
        (&["lower", "tiny-llama", "extra"], "unexpected argument `extra`"),
        (&["kinds", "tiny-llama", "--storage", "fp4"], "--storage takes"),
        (&["kinds"], "missing MODEL"),
        (&["source", "tiny-llama"], "missing --layer"),
        (&["source", "tiny-llama", "--layer", "-1"], "--layer takes a whole number"),
        (&["source", "tiny-llama", "--part", "body"], "--part takes embed or head"),
        (&["fit", "tiny-llama", "--ctx", "-4096"], "--ctx takes a whole number"),
        (&["fit", "tiny-llama", "--batch", "1.5"], "--batch takes a whole number"),
        (&["show"], "missing BUNDLE"),
        (&["check"], "missing FILE"),
        (&["frobnicate"], "unknown command `frobnicate`"),
        (&[], "give a command"),
        (&["--colour"], "unknown flag"),
    ]);
}

#[test]
fn sizes_are_checked_before_anything_is_allocated() {
    let dir = temp();
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures::hf("llama").join("config.json")).expect("config"))
            .expect("JSON");
    let mut huge_vocab = config.clone();
    huge_vocab["vocab_size"] = serde_json::json!(1u64 << 40);
    let vocab_file = dir.path().join("vocab.json");
    std::fs::write(&vocab_file, huge_vocab.to_string()).expect("write");
    let mut huge_hidden = config.clone();
    huge_hidden["hidden_size"] = serde_json::json!(1u64 << 40);
    huge_hidden.as_object_mut().expect("object").remove("head_dim");
    let hidden_file = dir.path().join("hidden.json");
    std::fs::write(&hidden_file, huge_hidden.to_string()).expect("write");
    let (vocab, hidden) = (s(&vocab_file), s(&hidden_file));
    refuses(&[
        (&["run", "tiny-llama", "--tokens", "1,2", "--engine", "reference", "--ctx", "1000000000000"], "too large"),
        (&["run", "tiny-llama", "--tokens", "1,2", "--engine", "reference", "--ctx", "200000000000"], "too large"),
        (&["run", "tiny-llama", "--tokens", "1", "--engine", "reference", "-n", "1000000000000"], "-n 1000000000000"),
        (&["run", "tiny-llama", "--tokens", "1", "-n", "18446744073709551615"], "too large"),
        (&["fit", "tiny-llama", "--ctx", "18446744073709551615"], "--ctx 18446744073709551615 is too large"),
        (&["fit", "tiny-llama", "--batch", "18446744073709551615"], "--batch 18446744073709551615 is too large"),
        (&["lower", "tiny-llama", "--ctx", "18446744073709551615"], "is too large"),
        (&["source", "tiny-llama", "--layer", "0", "--ctx", "18446744073709551615"], "is too large"),
        (&["run", &vocab, "--tokens", "1", "--engine", "reference"], "GB"),
        (&["run", &hidden, "--tokens", "1", "--engine", "reference"], "64 bits"),
        (&["fit", &hidden], "64 bits"),
    ]);
}

#[test]
fn bad_numbers_and_files_are_refused() {
    let dir = temp();
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "").expect("write");
    let garbage = dir.path().join("garbage.txt");
    std::fs::write(&garbage, "1,2\nfoo\n").expect("write");
    let not_json = dir.path().join("config.json");
    std::fs::write(&not_json, "this is not json").expect("write");
    let (empty, garbage, not_json) = (s(&empty), s(&garbage), s(&not_json));
    refuses(&[
        (&["run", "tiny-llama", "--tokens", "999999"], "out of range"),
        (&["run", "tiny-llama", "--tokens", "1", "--ctx", "0"], "--ctx must be at least 1"),
        (&["run", "tiny-llama", "--tokens", "1,2,3", "-n", "5", "--ctx", "4"], "needs 8 positions"),
        (&["run", "tiny-llama", "--tokens", "1", "--chunk", "0"], "--chunk must be at least 1"),
        (&["run", "tiny-llama", "--tokens", "1", "--tp", "3"], "3"),
        (&["run", "tiny-llama", "--tokens", "1", "--tp", "2", "--engine", "reference"], "--tp"),
        (&["run", "tiny-llama", "--prompt", "hello"], "tokenizer"),
        (&["run", "tiny-llama", "--batch-prompts", &empty], "holds no prompts"),
        (&["run", "tiny-llama", "--batch-prompts", &garbage], "is not a token id"),
        (&["run", "tiny-llama", "--batch-prompts", "/no/such/file"], "/no/such/file"),
        (&["run", "tiny-llama", "--tokens", "1", "--chip", "sn99"], "sn99"),
        (&["run", "no-such-model", "--tokens", "1"], "no-such-model"),
        (&["kinds", &not_json], "config.json: not valid JSON"),
        (&["lower", "tiny-llama", "--ctx", "0"], "--ctx must be at least 1"),
        (&["lower", "tiny-llama", "--tp", "3", "--cut", "tp"], "3"),
        (&["lower", "tiny-llama", "--dump-after", "nothing"], "unknown pass"),
        (&["lower", "tiny-llama", "--chip", "/no/such/chip.toml"], "chip"),
        (&["source", "tiny-llama", "--layer", "99"], "out of range"),
        (&["fit", "tiny-llama", "--ctx", "0"], "--ctx must be at least 1"),
        (&["fit", "tiny-llama", "--batch", "0"], "--batch must be at least 1"),
        (&["fit", "tiny-llama", "--tp", "3"], "3"),
        (&["show", "/no/such/bundle"], "/no/such/bundle"),
        (&["check", "/no/such/file.rdu"], "/no/such/file.rdu"),
    ]);
}

#[test]
fn output_paths_are_checked_before_the_work() {
    let dir = temp();
    let missing = s(&dir.path().join("missing/logits.npy"));
    let a_dir = s(dir.path());
    let prompts = dir.path().join("prompts.txt");
    std::fs::write(&prompts, "1,2\n3\n").expect("write");
    let prompts = s(&prompts);
    let missing_b = s(&dir.path().join("missing/l{b}.npy"));
    refuses(&[
        (&["run", "tiny-llama", "--tokens", "1", "--logits", &missing], "does not exist"),
        (&["run", "tiny-llama", "--tokens", "1", "--logits", &a_dir], "is a directory"),
        (&["run", "tiny-llama", "--batch-prompts", &prompts, "--logits", &missing_b], "does not exist"),
    ]);
    assert!(!dir.path().join("missing").exists());
}

/// Lowers `args` into `dir` and returns its path.
fn lowered(dir: &Path, name: &str, args: &[&str]) -> String {
    let out = s(&dir.join(name));
    let mut all = vec!["lower"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", &out]);
    ok(&all);
    out
}

#[test]
fn bundles_run_whatever_their_cut_and_refuse_contradictions() {
    let dir = temp();
    let decode = lowered(dir.path(), "decode", &["tiny-llama", "--ctx", "16"]);
    let forward = lowered(dir.path(), "forward", &["tiny-llama", "--cut", "forward", "--seq", "8"]);
    let prefill = lowered(dir.path(), "prefill", &["tiny-llama", "--cut", "prefill", "--chunk", "2", "--ctx", "16"]);
    let batched = lowered(dir.path(), "batched", &["tiny-llama", "--cut", "batched", "--batch", "2", "--ctx", "16"]);
    let other = lowered(dir.path(), "other", &["tiny-qwen3", "--ctx", "16"]);
    // The generated tokens are the same whichever bundle runs them (a prefill bundle gives one
    // logits row per chunk, so positions differ).
    let generated = |args: &[&str]| -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(&ok(args)).expect("JSON");
        v["generated"].clone()
    };
    let alone = generated(&["run", "tiny-llama", "--tokens", "1,2,3", "-n", "4", "--json"]);
    for bundle in [&decode, &forward, &prefill] {
        let got = generated(&["run", "tiny-llama", "--tokens", "1,2,3", "-n", "4", "--json", "--bundle", bundle]);
        assert_eq!(got, alone, "--bundle {bundle}");
    }
    let got = generated(&[
        "run",
        "tiny-llama",
        "--tokens",
        "1,2,3",
        "-n",
        "4",
        "--json",
        "--bundle",
        &prefill,
        "--decode-bundle",
        &decode,
    ]);
    assert_eq!(got, alone, "a prefill bundle continued by a given decode bundle");
    let run = |extra: &[&str]| {
        let mut v = vec!["run", "tiny-llama", "--tokens", "1,2,3"];
        v.extend_from_slice(extra);
        v.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (run(&["--bundle", &other]), "`tiny-qwen3`, but MODEL is `tiny-llama`"),
        (run(&["--bundle", &decode, "--ctx", "32"]), "--ctx 32 contradicts"),
        (run(&["--bundle", &decode, "--tp", "2"]), "--tp 2 contradicts"),
        (run(&["--bundle", &decode, "--chip", "sn40l"]), "--chip sn40l contradicts"),
        (run(&["--bundle", &decode, "--storage", "dense"]), "--storage dense contradicts"),
        (run(&["--bundle", &decode, "--engine", "reference"]), "--engine reference"),
        (run(&["--bundle", &decode, "--cut", "forward"]), "--cut forward contradicts"),
        (run(&["--bundle", &forward, "--cut", "decode"]), "--cut decode contradicts"),
        (run(&["--bundle", &decode, "--chunk", "2"]), "needs a prefill bundle"),
        (run(&["--bundle", &prefill, "--chunk", "3"]), "--chunk 3 contradicts"),
        (run(&["--bundle", &prefill, "--decode-bundle", &forward]), "must be a decode bundle"),
        (run(&["--bundle", &decode, "--decode-bundle", &decode]), "continues a prefill bundle"),
        (run(&["--bundle", &forward, "-n", "6"]), "steps 8 tokens"),
        (run(&["--bundle", &decode, "-n", "20"]), "the bundle's ctx is 16"),
        (run(&["--bundle", &batched]), "--batch-prompts"),
        (run(&["--bundle", "/no/such/bundle"]), "/no/such/bundle"),
        (run(&["--decode-bundle", &decode]), "--bundle"),
    ];
    for (args, needle) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refuses(&[(&args, needle)]);
    }
}

#[test]
fn a_batch_of_one_sequence_runs() {
    let dir = temp();
    let out = ok(&["lower", "tiny-llama", "--cut", "batched", "--batch", "1", "--ctx", "16"]);
    assert!(out.contains("1 kind"), "{out}");
    let prompts = dir.path().join("one.txt");
    std::fs::write(&prompts, "1,2,3\n").expect("write");
    let batch = ok(&["run", "tiny-llama", "--batch-prompts", &s(&prompts), "-n", "4", "--json"]);
    let alone = ok(&["run", "tiny-llama", "--tokens", "1,2,3", "-n", "4", "--json"]);
    let batch: serde_json::Value = serde_json::from_str(&batch).expect("JSON");
    let alone: serde_json::Value = serde_json::from_str(&alone).expect("JSON");
    assert_eq!(batch["sequences"][0]["generated"], alone["generated"]);
}

#[test]
fn a_closed_pipe_ends_quietly() {
    for args in [
        &["presets"][..],
        &["source", "tiny-llama", "--layer", "0"],
        &["fit", "tiny-llama"],
        &["kinds", "qwen3-next-80b-a3b"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rdu"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rdu runs");
        // Read one byte, then close the pipe as `head -c 1` does.
        let mut stdout = child.stdout.take().expect("stdout");
        let mut byte = [0u8; 1];
        let _ = stdout.read(&mut byte);
        drop(stdout);
        let mut err = String::new();
        child.stderr.take().expect("stderr").read_to_string(&mut err).expect("stderr");
        let status = child.wait().expect("rdu exits");
        assert!(err.is_empty(), "rdu {args:?} wrote on stderr: {err}");
        assert_ne!(status.code(), Some(101), "rdu {args:?} panicked");
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            assert!(status.success() || status.signal() == Some(13), "rdu {args:?}: {status:?}");
        }
    }
}

#[test]
fn kinds_fit_and_lower_agree_on_storage_for_every_fixture() {
    let mut models: Vec<PathBuf> = fixtures::HF.iter().map(|f| fixtures::hf(f)).collect();
    for gguf in ["gemma3/tiny-gemma3-q8_0.gguf", "llama/tiny-llama-q8_0.gguf", "gemma3/tiny-gemma3-f32.gguf"] {
        models.push(fixtures::repo().join("tests/data/fixtures/gguf").join(gguf));
    }
    for m in models {
        let m = s(&m);
        let kinds: serde_json::Value = serde_json::from_str(&ok(&["kinds", &m, "--json"])).expect("JSON");
        let fit: serde_json::Value = serde_json::from_str(&ok(&["fit", &m, "--json"])).expect("JSON");
        let lower: serde_json::Value =
            serde_json::from_str(&ok(&["lower", &m, "--ctx", "16", "--json"])).expect("JSON");
        let names = |v: &serde_json::Value, key: &str| -> Vec<String> {
            v[key].as_array().expect("array").iter().map(|k| k["name"].as_str().expect("name").to_string()).collect()
        };
        let fit_kinds: Vec<String> = names(&fit, "parts").into_iter().filter(|n| n != "embed" && n != "head").collect();
        assert_eq!(names(&kinds, "kinds"), fit_kinds, "{m}: kinds vs fit");
        assert_eq!(names(&kinds, "kinds"), names(&lower, "kinds"), "{m}: kinds vs lower");
        assert_eq!(kinds["storage"], fit["storage"], "{m}");
        assert_eq!(kinds["storage"], lower["storage"], "{m}");
    }
}

#[test]
fn check_refuses_empty_files_and_caps_its_diagnostics() {
    let dir = temp();
    let empty = dir.path().join("empty.rdu");
    std::fs::write(&empty, "").expect("write");
    let comment = dir.path().join("comment.rdu");
    std::fs::write(&comment, "# nothing here\n").expect("write");
    refuses(&[(&["check", &s(&empty)], "is empty"), (&["check", &s(&comment)], "not a program")]);
    // A program with many faults: at most 20 diagnostics, and how many more there were.
    let mut program = ok(&["source", "tiny-llama", "--layer", "1"]);
    for i in 0..25 {
        program.push_str(&format!("z{i} = add(\n"));
    }
    let typos = dir.path().join("typos.rdu");
    std::fs::write(&typos, program).expect("write");
    let out = common::rdu(&["check", &s(&typos)]);
    assert_eq!(out.status.code(), Some(1));
    let err = common::stderr(&out);
    let last = err.lines().last().expect("a last line");
    assert!(last.contains("25 errors found (20 shown, 5 more not)"), "{last}");
    assert_eq!(err.matches("error[E").count(), 20, "{err}");
}

/// A file that is not a program (a bundle's manifest, a README) is said to be so in one line,
/// not in a screenful of diagnostics; a short file of a few faults keeps its diagnostics.
#[test]
fn check_says_in_one_line_that_a_file_is_not_a_program() {
    let dir = temp();
    let bundle = lowered(dir.path(), "bundle", &["tiny-llama", "--ctx", "16"]);
    let manifest = s(&Path::new(&bundle).join("manifest.json"));
    let line = user_error(&["check", &manifest]);
    assert!(line.contains("does not look like a program (it is JSON"), "{line}");
    assert!(line.contains("lines do not parse, from line 1 (`{`)"), "{line}");
    let readme = s(&fixtures::repo().join("README.md"));
    let line = user_error(&["check", &readme]);
    assert!(line.contains(&format!("{readme} does not look like a program: ")), "{line}");
    let short = dir.path().join("short.rdu");
    std::fs::write(&short, "input x : f32[1, 64\nweight W : q9[4]\n").expect("write");
    let err = common::stderr(&common::rdu(&["check", &s(&short)]));
    assert!(err.contains("error[E0102]") && err.contains("2 errors found"), "{err}");
}

#[test]
fn file_errors_name_the_file_once_without_jargon() {
    let dir = temp();
    let gguf = dir.path().join("cut.gguf");
    let whole =
        std::fs::read(fixtures::repo().join("tests/data/fixtures/gguf/llama/tiny-llama-f32.gguf")).expect("read");
    std::fs::write(&gguf, &whole[..100]).expect("write");
    let not_json = dir.path().join("x.json");
    std::fs::write(&not_json, "nope").expect("write");
    for args in [&["kinds", &s(&gguf)][..], &["run", &s(&gguf), "--tokens", "1"], &["kinds", &s(&not_json)]] {
        let line = user_error(args);
        let file = args[1];
        assert_eq!(line.matches(file).count(), 1, "{line}");
        assert!(!line.contains("field `$`"), "{line}");
    }
}

#[test]
fn a_context_too_large_for_the_chip_names_the_ctx_and_the_largest_that_fits() {
    // The caches live in HBM and stream through the chip, so memory bounds the context: the
    // ctx, the chip, and the largest ctx whose weights and states fit its HBM and DDR,
    // refused before anything is lowered or allocated. tiny-llama with bf16 states (`rdu
    // lower`'s default) fits 3583332998 positions; `rdu run` lowers f32 states, twice the bytes.
    let limit = |line: &str| -> usize {
        line.rsplit("--ctx ")
            .next()
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no limit in {line}"))
    };
    for (args, most) in [
        (&["lower", "tiny-llama", "--ctx", "4000000000"][..], 3583332998),
        (&["lower", "tiny-llama", "--ctx", "4000000000", "--state", "f32"], 1897058646),
        (&["run", "tiny-llama", "--tokens", "1", "--ctx", "4000000000"], 1897058646),
    ] {
        let line = user_error(args);
        assert!(line.contains("ctx 4000000000 is too large for the sn50"), "{line}");
        assert!(line.contains("more than its HBM and DDR hold (2064.0 GB)"), "{line}");
        assert_eq!(limit(&line), most, "{line}");
    }
    // Two sequences each carry their own caches: a smaller limit.
    let line = user_error(&["lower", "tiny-llama", "--ctx", "4000000000", "--cut", "batched", "--batch", "2"]);
    assert!(line.contains("ctx 4000000000 is too large for the sn50"), "{line}");
    assert!(limit(&line) < 3583332998, "{line}");
    // Over two chips each holds half the caches' heads and fits the chip; certifying a layer at
    // real shapes would hold terabytes on this machine, refused with the ctx that can be.
    let line = user_error(&["lower", "tiny-llama", "--ctx", "4000000000", "--cut", "tp", "--tp", "2"]);
    assert!(line.contains("ctx 4000000000 is too large to certify here"), "{line}");
    assert!(limit(&line) < 4000000000, "{line}");
}

#[test]
fn check_refuses_an_element_count_that_overflows() {
    let dir = temp();
    let declared = dir.path().join("declared.rdu");
    std::fs::write(&declared, "input x : f32[4294967296, 4294967296, 4294967296]\ny = add(x, x)\noutput y\n")
        .expect("write");
    let derived = dir.path().join("derived.rdu");
    std::fs::write(
        &derived,
        "input a : f32[4294967296, 32]\nweight w : f32[4294967296, 32]\ny = linear(a, w)\noutput y\n",
    )
    .expect("write");
    for (file, name) in [(&declared, "`x` declares"), (&derived, "`y` would hold")] {
        let out = common::rdu(&["check", &s(file)]);
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(err.contains("error[E0203]") && err.contains(name), "{err}");
        assert!(err.contains("more than a 64-bit count holds"), "{err}");
        let last = err.lines().last().expect("a last line");
        assert!(last.contains("1 error found"), "only the overflow is reported: {err}");
    }
}

#[test]
fn a_config_that_disagrees_with_its_weights_says_so_without_a_bundle() {
    // No --bundle: rdu lowered from MODEL's own config, so the advice is about the config and
    // the weights, not about "the checkpoint the bundle was lowered for".
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures::hf("llama").join("config.json")).expect("config"))
            .expect("JSON");
    let model = |edit: &dyn Fn(&mut serde_json::Value)| -> (tempfile::TempDir, String) {
        let dir = temp();
        let mut c = config.clone();
        edit(&mut c);
        std::fs::write(dir.path().join("config.json"), c.to_string()).expect("write");
        std::fs::copy(fixtures::hf("llama").join("model.safetensors"), dir.path().join("model.safetensors"))
            .expect("copy");
        let path = s(dir.path());
        (dir, path)
    };
    let (_wider, wider) = model(&|c| c["intermediate_size"] = serde_json::json!(256));
    let (_deeper, deeper) =
        model(&|c| c["num_hidden_layers"] = serde_json::json!(c["num_hidden_layers"].as_u64().unwrap() + 1));
    let prompts = temp();
    let file = prompts.path().join("p.txt");
    std::fs::write(&file, "1,2\n3\n").expect("write");
    let cases: [(&[&str], &str); 4] = [
        (&["run", &wider, "--tokens", "1,2", "-n", "1"], "has the shape [64, 128] but the model's config makes"),
        (&["run", &deeper, "--tokens", "1,2", "-n", "1"], "which the model's config needs"),
        (&["run", &deeper, "--tokens", "1,2", "-n", "1", "--chunk", "2"], "which the model's config needs"),
        (&["run", &deeper, "--batch-prompts", &s(&file), "-n", "1"], "which the model's config needs"),
    ];
    for (args, needle) in cases {
        let line = user_error(args);
        assert!(line.contains(needle), "{line}");
        assert!(line.contains("its config and its weights disagree"), "{line}");
        assert!(!line.contains("bundle"), "no bundle was given: {line}");
    }
}

/// A bundle whose manifest or program files were edited after lowering: `rdu show`, `rdu
/// report` and `rdu verify` refuse it in the same line as `rdu run --bundle`, naming what is
/// wrong — a tensor whose manifest shape is not the one its program declares (a 2-D weight's
/// first dimension grown by one passes every check of the manifest alone), a last dimension no
/// longer a whole number of Q8_0 blocks, a program file that changed after certification.
#[test]
fn show_report_verify_and_run_refuse_the_same_damaged_bundles() {
    let dir = temp();
    let good = lowered(dir.path(), "good", &["tiny-llama", "--ctx", "16"]);
    let copy = |name: &str| -> PathBuf {
        let to = dir.path().join(name);
        std::fs::create_dir_all(to.join("programs")).expect("mkdir");
        for entry in std::fs::read_dir(Path::new(&good).join("programs")).expect("programs") {
            let entry = entry.expect("entry");
            std::fs::copy(entry.path(), to.join("programs").join(entry.file_name())).expect("copy");
        }
        std::fs::copy(Path::new(&good).join("manifest.json"), to.join("manifest.json")).expect("copy");
        to
    };
    let edit_manifest = |name: &str, from: &str, to: &str| -> PathBuf {
        let bundle = copy(name);
        let manifest = std::fs::read_to_string(bundle.join("manifest.json")).expect("manifest");
        assert!(manifest.contains(from), "{from}");
        std::fs::write(bundle.join("manifest.json"), manifest.replacen(from, to, 1)).expect("write");
        bundle
    };
    let taller = edit_manifest("taller", "\"shape\": [64, 128]", "\"shape\": [65, 128]");
    let wider = edit_manifest("wider", "\"shape\": [64, 128]", "\"shape\": [64, 129]");
    let garbage = copy("garbage");
    let spatial = garbage.join("programs/head.spatial");
    let mut text = std::fs::read_to_string(&spatial).expect("spatial");
    text.push_str("garbage line\n");
    std::fs::write(&spatial, text).expect("write");
    let cases = [
        (&taller, "is bound to `Wd0` of shape [65, 128] but the program declares [64, 128]"),
        (&wider, "[64, 129]"),
        (&garbage, "does not match its hash"),
    ];
    let page = s(&dir.path().join("report.html"));
    for (bundle, needle) in cases {
        let b = s(bundle);
        let ran = user_error(&["run", "tiny-llama", "--tokens", "1", "--bundle", &b]);
        assert!(ran.contains(needle), "run: {ran}");
        for args in [&["show", &b][..], &["verify", &b], &["report", &b, "-o", &page]] {
            assert_eq!(user_error(args), ran, "rdu {args:?} and rdu run --bundle");
        }
    }
    assert!(!Path::new(&page).exists(), "no report of a damaged bundle");
    ok(&["show", &good]);
}

#[test]
fn one_layer_is_one_layer() {
    let dir = temp();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures::hf("llama").join("config.json")).expect("config"))
            .expect("JSON");
    config["num_hidden_layers"] = serde_json::json!(1);
    let file = dir.path().join("one.json");
    std::fs::write(&file, config.to_string()).expect("write");
    let file = s(&file);
    for args in [&["lower", &file, "--ctx", "16"][..], &["kinds", &file]] {
        let out = ok(args);
        assert!(out.contains("1 layer,") && !out.contains("1 layers"), "rdu {args:?}: {out}");
    }
}

#[test]
fn a_run_from_a_bundle_reports_no_lowering_time() {
    let gguf = s(&fixtures::repo().join("tests/data/fixtures/gguf/llama/tiny-llama-q8_0.gguf"));
    let dir = temp();
    let bundle = lowered(dir.path(), "bundle", &[&gguf, "--ctx", "64"]);
    let out = common::rdu(&["run", &gguf, "--prompt", "hi", "-n", "2", "--bundle", &bundle]);
    let err = common::stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("prompt:") && !err.contains("lowering"), "{err}");
    let out = common::rdu(&["run", &gguf, "--prompt", "hi", "-n", "2", "--ctx", "64"]);
    let err = common::stderr(&out);
    assert!(out.status.success() && err.contains("lowering:"), "{err}");
}

/// A gpt-oss checkpoint whose layer-0 attention sinks hold 8 logits for its 4 heads (the same
/// bytes re-declared bf16[8]): every engine and cut refuses it in one line naming the tensor.
#[test]
fn sinks_of_the_wrong_length_are_refused_naming_the_tensor() {
    let src = fixtures::hf("gpt_oss");
    let dir = temp();
    for file in ["config.json", "tokens.npy"] {
        std::fs::copy(src.join(file), dir.path().join(file)).expect("copy");
    }
    let bytes = std::fs::read(src.join("model.safetensors")).expect("read");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let sinks = &mut header["model.layers.0.self_attn.sinks"];
    assert_eq!(sinks["shape"], serde_json::json!([4]));
    sinks["dtype"] = serde_json::json!("BF16");
    sinks["shape"] = serde_json::json!([8]);
    let text = header.to_string();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(dir.path().join("model.safetensors"), out).expect("write");
    let model = s(dir.path());
    for engine in ["spatial", "reference"] {
        for cut in ["decode", "forward"] {
            let line = user_error(&["run", &model, "--tokens", "1,2", "-n", "1", "--engine", engine, "--cut", cut]);
            assert!(line.contains("model.layers.0.self_attn.sinks") && line.contains("[8]"), "{engine} {cut}: {line}");
        }
    }
}
