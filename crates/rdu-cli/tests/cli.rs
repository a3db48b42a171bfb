//! The `rdu` binary as a user runs it: every command's output and exit code, bad input as a
//! one-line error, bundles written deterministically and read back, the README's commands.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common;

use common::{ok, rdu, stderr, stdout, user_error};

/// The repository root (tests run in the crate's directory).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}

/// Every file of a directory tree by relative path.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(dir: &Path, prefix: &str, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).expect("readable directory") {
            let entry = entry.expect("a directory entry");
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if entry.file_type().expect("a file type").is_dir() {
                walk(&entry.path(), &format!("{name}/"), out);
            } else {
                out.insert(name, std::fs::read(entry.path()).expect("readable file"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, "", &mut out);
    out
}

#[test]
fn presets_lists_real_and_tiny_models() {
    let out = ok(&["presets"]);
    let names: Vec<&str> = out.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(names.contains(&"qwen3-next-80b-a3b"), "{out}");
    assert!(names.contains(&"tiny-llama"), "{out}");
}

#[test]
fn kinds_json_groups_qwen3_next_into_two_kinds() {
    let v: Value = serde_json::from_str(&ok(&["kinds", "qwen3-next-80b-a3b", "--json"])).expect("JSON");
    assert_eq!(v["n_layers"], 48);
    let kinds = v["kinds"].as_array().expect("kinds");
    assert_eq!(kinds.len(), 2);
    let attention = kinds.iter().find(|k| k["mixer"] == "gated_attention").expect("an attention kind");
    let expected: Vec<u64> = (3..48).step_by(4).collect();
    let layers: Vec<u64> = attention["layers"].as_array().expect("layers").iter().filter_map(Value::as_u64).collect();
    assert_eq!(layers, expected);
    let deltanet = kinds.iter().find(|k| k["mixer"] == "deltanet").expect("a DeltaNet kind");
    assert_eq!(deltanet["layers"].as_array().expect("layers").len(), 36);
}

#[test]
fn check_accepts_an_authored_layer_and_says_what_it_checked() {
    let dir = temp();
    let file = dir.path().join("layer1.rdu");
    std::fs::write(&file, ok(&["source", "tiny-llama", "--layer", "1"])).expect("write the source");
    let out = rdu(&["check", path(&file)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    let said = stdout(&out);
    assert!(
        said.starts_with(&format!("{}: parses and lifts: ", path(&file))) && said.ends_with("no errors\n"),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "{said}");
}

/// The caret line under the snippet of the diagnostic whose header names `code`.
fn caret_after(err: &str, code: &str) -> String {
    let lines: Vec<&str> = err.lines().collect();
    let at =
        lines.iter().position(|l| l.starts_with(&format!("error[{code}]"))).unwrap_or_else(|| panic!("{code}:\n{err}"));
    let rest = &lines[at + 1..];
    let end = rest.iter().position(|l| l.starts_with("error")).unwrap_or(rest.len());
    rest[..end].iter().find(|l| l.contains('^')).unwrap_or_else(|| panic!("no caret for {code}:\n{err}")).to_string()
}

#[test]
fn check_reports_every_lift_fault_with_a_caret() {
    let dir = temp();
    let file = dir.path().join("broken.rdu");
    let text = "input x : f32[1, 64]\n\
                weight W0 : f32[64, 64]\n\
                weight U0 : f32[32, 64]\n\
                h0 = frobnicate(x, W0)\n\
                q0 = linear(x, W0)\n\
                r0 = add(q0, zz0)\n\
                q0 = silu(r0)\n\
                output y0\n";
    std::fs::write(&file, text).expect("write the program");
    let out = rdu(&["check", path(&file)]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(stdout(&out).is_empty());
    // code, the text the caret must sit under, and its line.
    let faults =
        [("E0201", "frobnicate", 4), ("E0205", "zz0", 6), ("E0206", "q0", 7), ("E0210", "y0", 8), ("E0212", "U0", 3)];
    for (code, under, line) in faults {
        let src = text.lines().nth(line - 1).expect("the line");
        let col = src.find(under).expect("in the line") + 1;
        assert!(err.contains(&format!("broken.rdu:{line}:{col}")), "{code} at {line}:{col}:\n{err}");
        assert!(err.contains(src), "{code}: the source line is shown:\n{err}");
        let caret = caret_after(&err, code);
        let bar = caret.find('│').expect("a gutter") + '│'.len_utf8();
        assert_eq!(caret[bar..].trim_end(), format!(" {}{}", " ".repeat(col - 1), "^".repeat(under.len())));
    }
    assert!(err.contains("in statement 0 (binding `h0`)"), "{err}");
    assert!(err.contains("in statement 3 (binding `q0`)"), "{err}");
    assert!(err.lines().last().expect("a summary").starts_with("error: "), "{err}");
    assert!(err.contains("5 errors found"), "{err}");
}

#[test]
fn check_reports_every_syntax_error() {
    let dir = temp();
    let file = dir.path().join("syntax.rdu");
    std::fs::write(&file, "input x : f32[1, 64\nweight W : q9[4]\ny = add(x, k=1, x)\noutput y\n").expect("write");
    let out = rdu(&["check", path(&file)]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for code in ["E0102", "E0103", "E0106"] {
        caret_after(&err, code);
    }
    assert!(err.contains("syntax.rdu:2:12"), "{err}");
    assert!(err.contains("3 errors found; the program does not parse"), "{err}");
}

#[test]
fn lower_then_show_a_bundle() {
    let dir = temp();
    let bundle = dir.path().join("gemma");
    ok(&["lower", "tiny-gemma3", "--ctx", "64", "-o", path(&bundle)]);

    let summary = ok(&["show", path(&bundle)]);
    for want in ["tiny-gemma3", "decode (ctx 64)", "sn50", "storage  q8", "embed", "head", "max err", "seed 0"] {
        assert!(summary.contains(want), "`{want}` missing:\n{summary}");
    }
    // The kind table: the sliding kind at 0-1 and 3-4, the global kind at 2 and 5.
    let kind_line = |kind: &str| summary.lines().find(|l| l.trim_start().starts_with(kind)).expect(kind).to_string();
    assert!(kind_line("attention_sliding_dense").contains("0-1, 3-4"), "{summary}");
    assert!(kind_line("attention_dense").contains("2, 5"), "{summary}");
    let layer_rows: Vec<&str> =
        summary.lines().skip_while(|l| !l.trim_start().starts_with("layers ")).skip(1).collect();
    assert_eq!(layer_rows.len(), 4, "{summary}");
    assert!(layer_rows[0].split_whitespace().eq(["0-1", "attention_sliding_dense"]), "{summary}");

    let head = ok(&["show", path(&bundle), "--program", "head"]);
    let file = std::fs::read_to_string(bundle.join("programs/head.spatial")).expect("head.spatial");
    assert_eq!(head, file);
    assert!(head.starts_with("program head"), "{head}");

    let err = user_error(&["show", path(&bundle), "--program", "nosuch"]);
    for name in ["embed", "attention_sliding_dense", "attention_dense", "head"] {
        assert!(err.contains(name), "{err}");
    }

    let dot = dir.path().join("bundle.dot");
    ok(&["show", path(&bundle), "--program", "attention_dense", "--dot", path(&dot)]);
    let dot = std::fs::read_to_string(dot).expect("the dot file");
    assert!(dot.starts_with("digraph bundle {") && dot.ends_with("}\n"), "{dot}");
    assert!(dot.contains("label=\"section 0\"") && dot.contains("\"attention_dense/s0\""), "{dot}");
    assert!(dot.contains("-> \"attention_dense/out:xo0\""), "{dot}");

    let err = user_error(&["show", path(dir.path())]);
    assert!(err.contains("manifest.json"), "{err}");
}

#[test]
fn writing_a_bundle_twice_gives_identical_files() {
    let dir = temp();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    ok(&["lower", "tiny-gemma3", "--ctx", "64", "-o", path(&a)]);
    ok(&["lower", "tiny-gemma3", "--ctx", "64", "-o", path(&b)]);
    let first = tree(&a);
    assert!(first.contains_key("manifest.json") && first.contains_key("programs/head.spatial"));
    assert_eq!(first, tree(&b));
    // Replacing an existing bundle in place gives the same bytes again.
    ok(&["lower", "tiny-gemma3", "--ctx", "64", "-o", path(&a)]);
    assert_eq!(first, tree(&a));
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("readable")
        .map(|e| e.expect("an entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "no staging or aside directory is left behind: {names:?}");
}

#[test]
fn lower_refuses_to_replace_a_non_bundle_without_force() {
    let dir = temp();
    let target = dir.path().join("notes");
    std::fs::create_dir(&target).expect("mkdir");
    std::fs::write(target.join("keep.txt"), "mine").expect("write");
    let err = user_error(&["lower", "tiny-llama", "--ctx", "64", "-o", path(&target)]);
    assert!(err.contains("--force"), "{err}");
    assert_eq!(std::fs::read_to_string(target.join("keep.txt")).expect("untouched"), "mine");

    ok(&["lower", "tiny-llama", "--ctx", "64", "-o", path(&target), "--force"]);
    assert!(!target.join("keep.txt").exists());
    assert!(ok(&["show", path(&target)]).contains("tiny-llama"));
}

#[test]
fn bad_input_is_one_line_and_exit_code_1() {
    let cases: [(&[&str], &str); 9] = [
        (&["lower", "tiny-llama", "--ctx", "0"], "--ctx"),
        (&["fit", "tiny-llama", "--ctx", "0"], "--ctx"),
        (&["lower", "tiny-llama", "--chip", "sn99"], "sn99"),
        (&["fit", "tiny-llama", "--chip", "sn99"], "sn99"),
        (&["kinds", "no-such-model"], "no-such-model"),
        (&["lower", "tiny-llama", "--dump-after", "nosuchpass"], "nosuchpass"),
        (&["source", "tiny-llama", "--layer", "99"], "99"),
        (&["run", "tiny-llama", "--tokens", "999999"], "999999"),
        (&["check", "/no/such/file"], "/no/such/file"),
    ];
    for (args, named) in cases {
        let err = user_error(args);
        assert!(err.contains(named), "rdu {args:?}: the error should name `{named}`: {err}");
    }
}

/// `--profile` prints where the spatial engine's time went on stderr — a header, a row per op
/// and output shape (the decode step's linears among them), a total over every call — and
/// changes no token; the reference engine runs no simulator op, so it is refused there.
#[test]
fn profile_prints_where_the_time_went() {
    let args = ["run", "tiny-llama", "--tokens", "1,2,3", "-n", "3", "--json"];
    let generated = |out: &str| serde_json::from_str::<Value>(out).expect("JSON")["generated"].clone();
    let plain = ok(&args);
    let out = rdu(&[&args[..], &["--profile"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(generated(&stdout(&out)), generated(&plain), "--profile changes no token");
    let err = stderr(&out);
    let table: Vec<&str> = err.lines().skip_while(|l| !l.contains("(--profile)")).skip(1).collect();
    assert!(table.first().is_some_and(|h| h.starts_with("op") && h.contains("ms/call")), "{err}");
    let rows = &table[1..table.len() - 1];
    let calls = |l: &str| l.split_whitespace().rev().nth(3).and_then(|c| c.parse::<u64>().ok()).expect("calls");
    assert!(rows.iter().any(|l| l.starts_with("linear ") && calls(l) > 0), "{err}");
    let total = table.last().expect("a total");
    let counted: u64 = rows.iter().map(|l| calls(l)).sum();
    assert!(total.starts_with("total") && total.split_whitespace().nth(1) == Some(&counted.to_string()), "{err}");
    let refused = user_error(&["run", "tiny-llama", "--tokens", "1", "--engine", "reference", "--profile"]);
    assert!(refused.contains("--profile"), "{refused}");
}

#[test]
fn an_unwritable_bundle_path_names_its_cause_once() {
    let dir = temp();
    let file = dir.path().join("plain");
    std::fs::write(&file, "a file, not a directory").expect("write");
    let err = user_error(&["lower", "tiny-llama", "--ctx", "64", "-o", path(&file.join("bundle"))]);
    assert!(err.contains("plain"), "{err}");
    let cause = err.rsplit(": ").next().expect("a cause");
    assert_eq!(err.matches(cause).count(), 1, "the cause is repeated: {err}");
}

#[test]
fn dump_after_tile_prints_tiled_spatial_text() {
    let out = ok(&["lower", "tiny-llama", "--ctx", "64", "--dump-after", "tile"]);
    assert!(out.contains("# attention_dense after tile"), "{out}");
    assert!(out.contains("program attention_dense chip=sn50"), "{out}");
    assert!(out.contains("tile("), "{out}");
}

#[test]
fn run_a_hf_checkpoint_as_json() {
    let model = repo().join("tests/data/fixtures/hf/llama");
    let out = ok(&["run", path(&model), "--tokens", "1,17,42", "-n", "2", "--json", "--state", "f32"]);
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["prompt"], serde_json::json!([1, 17, 42]));
    assert_eq!(v["positions"], serde_json::json!([0, 1, 2, 3]));
    let generated = v["generated"].as_array().expect("generated");
    assert_eq!(generated.len(), 2);
    // transformers' greedy next token after the same prefix.
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("meta.json")).expect("meta.json")).expect("meta JSON");
    assert_eq!(meta["tokens"].as_array().expect("tokens")[..3], v["prompt"].as_array().expect("prompt")[..]);
    assert_eq!(generated[0], meta["greedy_next"][2]);
}

/// `rdu run` on the tiny gpt-oss checkpoint (sinks, biases, sliding and full layers, YaRN with
/// `truncate: false`, the clamped SwiGLU clamping): both engines give transformers' logits at
/// every prompt position within 1e-4 and its 8 greedy tokens.
#[test]
fn run_a_gpt_oss_checkpoint_matches_transformers() {
    let model = repo().join("tests/data/fixtures/hf/gpt_oss");
    let tokens: Vec<String> = rdu_testkit::npy::ids(model.join("tokens.npy")).iter().map(u32::to_string).collect();
    let gen_ids = rdu_testkit::npy::ids(model.join("gen_ids.npy"));
    let want = rdu_testkit::npy::f32(model.join("logits_full.npy"));
    let tmp = tempfile::tempdir().expect("temp dir");
    for engine in ["spatial", "reference"] {
        let logits = tmp.path().join(format!("{engine}.npy"));
        let args = ["run", path(&model), "--tokens", &tokens.join(","), "-n", "8", "--engine", engine, "--json"];
        let out = ok(&[&args[..], &["--state", "f32", "--logits", path(&logits)]].concat());
        let v: Value = serde_json::from_str(&out).expect("JSON");
        let generated: Vec<u32> =
            v["generated"].as_array().expect("generated").iter().map(|t| t.as_u64().expect("id") as u32).collect();
        assert_eq!(generated, gen_ids, "{engine}: transformers' greedy tokens");
        let got = rdu_testkit::npy::f32(&logits);
        rdu_testkit::Tolerance::F32.assert(&format!("{engine} prompt logits"), &got[..want.len()], &want);
    }
}

fn fit(model: &str) -> Value {
    serde_json::from_str(&ok(&["fit", model, "--json"])).expect("JSON")
}

#[test]
fn fit_qwen3_next_spills_to_ddr_on_one_sn50() {
    let v = fit("qwen3-next-80b-a3b");
    let params = v["params"].as_u64().expect("params");
    assert!((78_000_000_000..82_000_000_000).contains(&params), "≈80 B parameters: {params}");
    let weights = v["weight_bytes"].as_u64().expect("weights");
    // Q8_0: 34 bytes per 32 values.
    assert!((82_000_000_000..88_000_000_000).contains(&weights), "≈85 GB of Q8_0: {weights}");
    assert_eq!(v["hbm_capacity"], 64_000_000_000u64);
    assert_eq!(v["hbm_bytes"], 64_000_000_000u64);
    assert_eq!(v["total_bytes"].as_u64(), Some(weights + v["state_bytes"].as_u64().expect("state")));
    assert_eq!(
        (v["fits_hbm"].as_bool(), v["spills_to_ddr"].as_bool(), v["fits"].as_bool()),
        (Some(false), Some(true), Some(true))
    );
    assert_eq!(v["ddr_bytes"].as_u64(), Some(v["total_bytes"].as_u64().expect("total") - 64_000_000_000));

    let text = ok(&["fit", "qwen3-next-80b-a3b"]);
    assert!(text.contains("on one sn50") && text.contains("DDR") && text.contains("spill"), "{text}");
}

#[test]
fn fit_llama_8b_fits_in_hbm() {
    let v = fit("llama-3.1-8b");
    let weights = v["weight_bytes"].as_u64().expect("weights");
    assert!((8_000_000_000..9_000_000_000).contains(&weights), "≈8.5 GB of Q8_0: {weights}");
    // 32 layers of K and V, 4096 positions, 8 kv heads of 128, bf16 as `rdu lower` stores them
    // by default; 4 bytes an element with --state f32.
    assert_eq!(v["state_bytes"], 32 * 2 * 4096 * 8 * 128 * 2u64);
    let f32_states: Value =
        serde_json::from_str(&ok(&["fit", "llama-3.1-8b", "--state", "f32", "--json"])).expect("JSON");
    assert_eq!(f32_states["state_bytes"], 32 * 2 * 4096 * 8 * 128 * 4u64);
    // A batch of 8 holds 8 caches and the same weights.
    let batched: Value = serde_json::from_str(&ok(&["fit", "llama-3.1-8b", "--batch", "8", "--json"])).expect("JSON");
    assert_eq!(batched["state_bytes"], 8 * 32 * 2 * 4096 * 8 * 128 * 2u64);
    assert_eq!(batched["weight_bytes"], v["weight_bytes"]);
    assert_eq!((v["fits_hbm"].as_bool(), v["spills_to_ddr"].as_bool()), (Some(true), Some(false)));
    let dense: Value =
        serde_json::from_str(&ok(&["fit", "llama-3.1-8b", "--storage", "dense", "--json"])).expect("JSON");
    let dense_weights = dense["weight_bytes"].as_u64().expect("weights");
    assert!((16_000_000_000..16_200_000_000).contains(&dense_weights), "bf16: {dense_weights}");
    assert!(ok(&["fit", "llama-3.1-8b", "--chip", "sn40l"]).contains("fits in HBM"));
}

#[test]
fn fit_counts_a_tied_embedding_once() {
    let part = |v: &Value, name: &str| {
        v["parts"].as_array().expect("parts").iter().find(|p| p["name"] == name).cloned().expect(name)
    };
    let tied = fit("tiny-gemma3");
    assert_eq!(tied["tied_head"], true);
    // The head holds only its final norm (d_model 64); `E` is counted under embed.
    assert_eq!(part(&tied, "head")["params"], 64);
    assert_eq!(part(&tied, "embed")["params"], 256 * 64);
    let sum: u64 = tied["parts"].as_array().expect("parts").iter().filter_map(|p| p["params"].as_u64()).sum();
    assert_eq!(tied["params"].as_u64(), Some(sum));
}

#[test]
fn readme_commands_exist_and_run() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let first = "cargo run --release -p rdu-cli -- lower qwen3-next-80b-a3b -o qwen3-next.bundle";
    assert!(readme.lines().any(|l| l.trim() == first), "README lost `{first}`");
    assert!(readme.lines().any(|l| l.trim() == "cargo test --workspace"), "README lost `cargo test --workspace`");
    let dir = tempfile::tempdir().expect("temp dir");
    let bundle = dir.path().join("qwen3-next.bundle");
    let args: Vec<&str> = first
        .split(" -- ")
        .nth(1)
        .expect("arguments after --")
        .split_whitespace()
        .map(|a| if a == "qwen3-next.bundle" { bundle.to_str().expect("utf-8 path") } else { a })
        .collect();
    let out = ok(&args);
    assert!(out.starts_with("qwen3-next-80b-a3b → sn50 (48 layers, 2 kinds"), "{out}");
    assert!(bundle.join("manifest.json").exists() && bundle.join("programs/deltanet_moe.spatial").exists());
    for command in ["rdu check FILE.rdu", "rdu show BUNDLE", "rdu fit MODEL"] {
        assert!(readme.contains(command), "the README's command table lacks `{command}`");
    }
}

#[test]
fn run_with_a_prompt_tokenizes_samples_deterministically_and_streams() {
    let gguf = repo().join("tests/data/fixtures/gguf/gemma3/tiny-gemma3-q8_0.gguf");
    let gguf = gguf.to_str().expect("utf-8 path");
    let args =
        ["run", gguf, "--prompt", "hello", "-n", "3", "--temp", "0.7", "--top-p", "0.9", "--seed", "1", "--json"];
    let mut first: Value = serde_json::from_str(ok(&args).trim()).expect("json");
    // The fixture's vocabulary is byte tokens: "▁hello" is 3 + 5 bytes.
    assert_eq!(first["prompt"].as_array().expect("prompt").len(), 8);
    assert_eq!(first["generated"].as_array().expect("generated").len(), 3);
    // The prompt is prefilled in one chunk by default: one logits row, its last position.
    assert_eq!(first["positions"], serde_json::json!([7, 8, 9]));
    let timing = first.as_object_mut().expect("an object").remove("timing").expect("timing");
    for key in ["load_s", "lower_s", "prompt_tok_s", "decode_tok_s"] {
        assert!(timing[key].as_f64().is_some_and(|v| v >= 0.0), "{key}: {timing}");
    }
    assert_eq!((timing["prompt_tokens"].as_u64(), timing["decode_tokens"].as_u64()), (Some(8), Some(2)));
    // The run's own peak resident set, where /proc tells it: at least the binary's own pages.
    if std::path::Path::new("/proc/self/status").exists() {
        let rss = timing["peak_rss_bytes"].as_u64().unwrap_or_else(|| panic!("peak_rss_bytes: {timing}"));
        assert!(rss > 1 << 20, "{rss}");
    }
    let mut second: Value = serde_json::from_str(ok(&args).trim()).expect("json");
    second.as_object_mut().expect("an object").remove("timing");
    assert_eq!(first, second, "a seeded sampler repeats itself");
    let out = rdu(&["run", gguf, "--prompt", "hello", "-n", "2"]);
    assert!(out.status.success());
    assert!(stderr(&out).contains("decode: 2 tokens"), "{}", stderr(&out));
    let err = user_error(&["run", "tiny-llama", "--prompt", "hi"]);
    assert!(err.contains("--prompt needs a tokenizer"), "{err}");
}
