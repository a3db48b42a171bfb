//! `rdu plan` through the binary: the rows cover every width `rdu fit` admits (up to 16) × the
//! six batches, refused widths are listed once with their reason, cells equal `rdu lower
//! --json`'s step for the same cut exactly and `rdu fit --json`'s bytes, the marks, the frontier
//! picture (the page and the bare SVG parse as XML, one point per fitting cell), bad inputs
//! refused in one line; and a real preset's plan.

use serde_json::Value;
use std::process::Command;

fn rdu(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rdu")).args(args).output().expect("rdu runs")
}

fn json(args: &[&str]) -> Value {
    let out = rdu(args);
    assert!(out.status.success(), "rdu {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("rdu {args:?} prints JSON: {e}"))
}

const BATCHES: [u64; 6] = [1, 4, 8, 16, 32, 64];

/// The plan's rows as (tp, batch) → row, after checking they cover admitted × batches.
fn check_shape(plan: &Value, model: &str, storage: &str) -> Vec<u64> {
    assert_eq!(plan["model"], model);
    assert_eq!(plan["chip"], "sn50");
    let mut keys: Vec<&str> = plan.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["chip", "model", "refused", "rows"]);
    let fit = json(&["fit", model, "--storage", storage, "--json"]);
    let admitted: Vec<u64> =
        fit["tp_admitted"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).filter(|&t| t <= 16).collect();
    let rows = plan["rows"].as_array().unwrap();
    let cells: Vec<(u64, u64)> =
        rows.iter().map(|r| (r["tp"].as_u64().unwrap(), r["batch"].as_u64().unwrap())).collect();
    let want: Vec<(u64, u64)> = admitted.iter().flat_map(|&t| BATCHES.iter().map(move |&b| (t, b))).collect();
    assert_eq!(cells, want, "{model}: every admitted width × every batch, in order");
    for r in rows {
        let mut k: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        k.sort();
        assert_eq!(
            k,
            [
                "batch",
                "bytes_per_chip",
                "fits",
                "model_roofline_fraction",
                "tokens_per_second",
                "tokens_per_second_per_sequence",
                "tp"
            ]
        );
        let per_seq = r["tokens_per_second_per_sequence"].as_f64().unwrap();
        let total = r["tokens_per_second"].as_f64().unwrap();
        let batch = r["batch"].as_f64().unwrap();
        assert!(per_seq > 0.0 && ((total - per_seq * batch) / total).abs() < 1e-12, "{r}");
        let f = r["model_roofline_fraction"].as_f64().unwrap();
        assert!(f > 0.0 && f <= 1.0, "{model}: no estimate beats the model roofline: {r}");
    }
    let refused: Vec<u64> = plan["refused"].as_array().unwrap().iter().map(|r| r["tp"].as_u64().unwrap()).collect();
    let not_admitted: Vec<u64> = (1..=16).filter(|t| !admitted.contains(t)).collect();
    assert_eq!(refused, not_admitted, "{model}: every width not admitted, once");
    for r in plan["refused"].as_array().unwrap() {
        let reason = r["reason"].as_str().unwrap();
        assert!(!reason.is_empty() && !reason.contains('\n'), "{r}");
    }
    admitted
}

/// `rdu lower`'s step of the cut of (tp, batch), and `rdu fit`'s bytes, against the plan's row.
fn check_cell(plan: &Value, model: &str, storage: &str, ctx: &str, tp: u64, batch: u64) {
    let row = plan["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["tp"] == tp && r["batch"] == batch)
        .unwrap_or_else(|| panic!("{model}: no row tp {tp} batch {batch}"));
    let (t, b) = (tp.to_string(), batch.to_string());
    let mut args = vec!["lower", model, "--storage", storage, "--ctx", ctx, "--json"];
    match (tp, batch) {
        (1, 1) => args.extend(["--cut", "decode"]),
        (1, _) => args.extend(["--cut", "batched", "--batch", &b]),
        (_, 1) => args.extend(["--cut", "tp", "--tp", &t]),
        _ => args.extend(["--cut", "batched-tp", "--batch", &b, "--tp", &t]),
    }
    let lowered = json(&args);
    let step = &lowered["step"];
    let label = format!("{model} tp {tp} batch {batch}");
    assert_eq!(row["tokens_per_second"], step["tokens_per_second"], "{label}: the lowering's estimate, exactly");
    assert_eq!(row["model_roofline_fraction"], step["model_roofline_fraction"], "{label}");
    assert_eq!(row["tokens_per_second_per_sequence"].as_f64().unwrap(), 1.0 / step["seconds"].as_f64().unwrap());
    let mut fit = vec!["fit", model, "--storage", storage, "--ctx", ctx, "--batch", &b, "--json"];
    if tp > 1 {
        fit.extend(["--tp", &t]);
    }
    let fit = json(&fit);
    assert_eq!(row["bytes_per_chip"], fit["total_bytes"], "{label}: rdu fit's bytes");
    assert_eq!(row["fits"], fit["fits_hbm"], "{label}");
}

#[test]
fn tiny_plan_covers_the_sweep_and_equals_the_lowering() {
    // Dense: its Q8_0 blocks would not split.
    let plan = json(&["plan", "tiny-qwen3-next", "--storage", "dense", "--ctx", "64", "--json"]);
    let admitted = check_shape(&plan, "tiny-qwen3-next", "dense");
    assert!(admitted.len() > 1, "tiny-qwen3-next admits a split: {admitted:?}");
    let wide = admitted[1];
    for (tp, batch) in [(1, 1), (1, 8), (wide, 1), (wide, 4)] {
        check_cell(&plan, "tiny-qwen3-next", "dense", "64", tp, batch);
    }
    let llama = json(&["plan", "tiny-llama", "--ctx", "64", "--json"]);
    check_shape(&llama, "tiny-llama", "auto");
    check_cell(&llama, "tiny-llama", "auto", "64", 1, 64);
    check_cell(&llama, "tiny-llama", "auto", "64", 2, 16);
}

#[test]
fn tiny_plan_table_marks_and_frontier() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("plan.html");
    let svg = dir.path().join("plan.svg");
    let out = rdu(&["plan", "tiny-llama", "--ctx", "64", "-o", page.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("numbers not certified (planning is estimation)"), "{text}");
    assert_eq!(text.lines().filter(|l| l.trim_end().ends_with('*') || l.contains(" *+")).count(), 1, "{text}");
    let plan = json(&["plan", "tiny-llama", "--ctx", "64", "--json"]);
    let rows = plan["rows"].as_array().unwrap();
    let widths: std::collections::BTreeSet<u64> = rows.iter().map(|r| r["tp"].as_u64().unwrap()).collect();
    let plus = text.lines().filter(|l| l.trim_end().ends_with('+')).count();
    assert_eq!(plus, widths.len(), "one highest-throughput mark per chip count: {text}");
    // The fastest single sequence is the fitting batch-1 row with the most tokens/s per sequence.
    let best = rows
        .iter()
        .filter(|r| r["batch"] == 1 && r["fits"] == true)
        .max_by(|a, b| {
            let k = |r: &Value| r["tokens_per_second_per_sequence"].as_f64().unwrap();
            k(a).total_cmp(&k(b))
        })
        .unwrap();
    let starred = text.lines().find(|l| l.trim_end().ends_with('*') || l.trim_end().ends_with("*+")).unwrap();
    let fields: Vec<&str> = starred.split_whitespace().collect();
    assert_eq!(fields[0], best["tp"].to_string(), "{starred}");
    assert_eq!(fields[1], "1", "{starred}");

    let fitting = rows.iter().filter(|r| r["fits"] == true).count();
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("http://") || !html.contains("src=\"http"), "nothing fetched");
    let start = html.find("<svg").unwrap();
    let end = html.find("</svg>").unwrap() + "</svg>".len();
    let points = |doc: &str| {
        let doc = roxmltree::Document::parse(doc).unwrap_or_else(|e| panic!("the frontier is not XML: {e}"));
        let cls = |n: &roxmltree::Node, c: &str| n.attribute("class").is_some_and(|a| a.split(' ').any(|x| x == c));
        let cells = doc.descendants().filter(|n| cls(n, "cell")).count();
        let front = doc.descendants().filter(|n| cls(n, "frontier")).count();
        (cells, front)
    };
    let (cells, front) = points(&html[start..end]);
    assert_eq!(cells, fitting, "one point per deployment that fits");
    assert!(front >= 1 && front <= cells);
    let out = rdu(&["plan", "tiny-llama", "--ctx", "64", "-o", svg.to_str().unwrap(), "--json"]);
    assert!(out.status.success());
    let bare = std::fs::read_to_string(&svg).unwrap();
    assert!(bare.starts_with("<svg"));
    assert_eq!(points(&bare), (cells, front));
}

#[test]
fn plan_refuses_bad_inputs_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["plan", "no-such-model"], "no-such-model"),
        (vec!["plan", "tiny-llama", "--ctx", "0"], "--ctx"),
        (vec!["plan", "tiny-llama", "--ctx", "-3"], "--ctx"),
        (vec!["plan", "tiny-llama", "--ctx", "18446744073709551615"], "too large"),
        (vec!["plan", "tiny-llama", "--json", "extra"], "extra"),
        (vec!["plan", "tiny-llama", "--chip", "sn99"], "sn99"),
        (vec!["plan", "tiny-llama", "--storage", "int4"], "int4"),
        (vec!["plan", "tiny-llama", "-o", dir.path().to_str().unwrap()], "directory"),
        (vec!["plan", "tiny-llama", "-o", "/nonexistent-dir/plan.html"], "plan.html"),
    ];
    for (args, names) in cases {
        let out = rdu(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(names), "{args:?}: names {names}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    assert!(!std::path::Path::new("/nonexistent-dir/plan.html").exists());
}

/// Real presets: llama-3.1-8b admits 1, 2, 4, 8 and 16 chips up to 16 (its plan, the issue's
/// example, also covers the sweep); gemma-3-270m's cells are `rdu lower`'s estimates exactly
/// (a real preset small enough to lower and certify in a test).
#[test]
fn real_preset_plans() {
    let plan = json(&["plan", "llama-3.1-8b", "--json"]);
    let admitted = check_shape(&plan, "llama-3.1-8b", "auto");
    assert_eq!(admitted, [1, 2, 4, 8, 16]);
    let plan = json(&["plan", "gemma-3-270m", "--json"]);
    check_shape(&plan, "gemma-3-270m", "auto");
    check_cell(&plan, "gemma-3-270m", "auto", "4096", 1, 1);
    check_cell(&plan, "gemma-3-270m", "auto", "4096", 2, 4);
}

/// The plan's serving rows of `args` (`rdu plan tiny-llama ... --json`), by (tp, batch).
fn serving(extra: &[&str]) -> Vec<(u64, u64, Value)> {
    let mut args = vec!["plan", "tiny-llama", "--ctx", "256", "--chunk", "16", "--json"];
    args.extend_from_slice(extra);
    let plan = json(&args);
    assert!(plan["workload"]["described"].is_string(), "{plan}");
    plan["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["fits"] == true)
        .map(|r| (r["tp"].as_u64().unwrap(), r["batch"].as_u64().unwrap(), r["serving"].clone()))
        .collect()
}

#[test]
fn plan_workload_below_capacity_holds_and_above_it_the_queue_grows() {
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"));
    // A trickle: far below every deployment's capacity.
    let low = serving(&[
        "--rate",
        "2",
        "--prompt-tokens",
        "32",
        "--output-tokens",
        "16",
        "--requests",
        "200",
        "--p99-tpot",
        "1000",
    ]);
    assert!(!low.is_empty());
    for (tp, batch, s) in &low {
        let (decode, chunk) = (f(s, "decode_step_s"), f(s, "chunk_step_s"));
        assert!(decode > 0.0 && chunk > 0.0, "tp {tp} batch {batch}: {s}");
        assert_eq!((s["completed"].as_u64(), s["refused"].as_u64()), (Some(200), Some(0)));
        assert_eq!(s["keeps_up"], true, "tp {tp} batch {batch}: {s}");
        assert_eq!(s["holds_target"], true, "tp {tp} batch {batch}: {s}");
        let (offered, got) = (f(s, "offered_tokens_per_second"), f(s, "throughput_tokens_per_second"));
        assert!((got - offered).abs() < 0.1 * offered, "tp {tp} batch {batch}: {got} tok/s of {offered} offered");
        // A token takes at least a decode step; the first one (off the last of the prompt's two
        // whole chunks) at least two chunks.
        assert!(f(s, "tpot_p50_s") >= decode * 0.999, "{s}");
        assert!(f(s, "ttft_p50_s") >= 2.0 * chunk * 0.999, "{s}");
        assert_eq!(s["curve"].as_array().unwrap().len(), 5);
    }
    // A flood: twenty times what one sequence a step (tp 1, batch 1) can generate.
    let decode11 = f(&low.iter().find(|(t, b, _)| (*t, *b) == (1, 1)).unwrap().2, "decode_step_s");
    let capacity = 1.0 / decode11 / 16.0;
    let rate = format!("{}", 20.0 * capacity);
    let high = serving(&[
        "--rate",
        &rate,
        "--prompt-tokens",
        "32",
        "--output-tokens",
        "16",
        "--requests",
        "200",
        "--p99-tpot",
        "1000",
    ]);
    for ((tp, batch, lo), (_, _, hi)) in low.iter().zip(&high) {
        // Above its capacity (its batch over a decode step), a deployment cannot keep up: the
        // queue grows, and so does the time to first token.
        let cap = *batch as f64 / f(lo, "decode_step_s");
        if f(hi, "offered_tokens_per_second") > 1.5 * cap {
            assert_eq!(hi["keeps_up"], false, "tp {tp} batch {batch}: {hi}");
            assert!(hi["max_waiting"].as_u64().unwrap() > 10, "tp {tp} batch {batch}: {hi}");
            assert!(f(hi, "ttft_p99_s") > 10.0 * f(lo, "ttft_p99_s"), "tp {tp} batch {batch}: {lo} vs {hi}");
            assert!(f(hi, "throughput_tokens_per_second") <= cap * 1.001, "tp {tp} batch {batch}: {hi}");
        }
        // Along the curve (¼ to 4 × the rate) the time to first token never falls.
        let curve = hi["curve"].as_array().unwrap();
        for pair in curve.windows(2) {
            assert!(f(&pair[1], "ttft_p99_s") >= f(&pair[0], "ttft_p99_s") * 0.999, "tp {tp} batch {batch}: {hi}");
        }
    }
    assert!(high.iter().any(|(_, _, s)| s["keeps_up"] == false), "the flood overloads some deployment");
}

#[test]
fn plan_workload_file_curves_and_bad_workloads() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("w.jsonl");
    std::fs::write(&file, "{\"at\": 0, \"prompt_tokens\": 40, \"output_tokens\": 8}\n\n{\"at\": 0.5, \"prompt_tokens\": 3, \"output_tokens\": 20}\n{\"at\": 0.25, \"prompt_tokens\": 17, \"output_tokens\": 1}\n").unwrap();
    let rows = serving(&["--workload", file.to_str().unwrap()]);
    for (_, _, s) in &rows {
        assert_eq!(s["completed"], 3, "{s}");
        assert_eq!(s["holds_target"], Value::Null, "no target given");
    }
    let page = dir.path().join("plan.html");
    let out = rdu(&[
        "plan",
        "tiny-llama",
        "--ctx",
        "256",
        "--chunk",
        "16",
        "--workload",
        file.to_str().unwrap(),
        "--p99-tpot",
        "5",
        "-o",
        page.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("TPOT p99") && text.contains("holds"), "{text}");
    let html = std::fs::read_to_string(&page).unwrap();
    let svg = &html[html.find("<svg class=\"curves\"").unwrap()..];
    let svg = &svg[..svg.find("</svg>").unwrap() + 6];
    roxmltree::Document::parse(svg).expect("the curves are SVG");
    // Two panels, a point per deployment and rate in each.
    assert_eq!(svg.matches("class=\"served\"").count(), 2 * 5 * rows.len());
    assert!(svg.contains("class=\"target\""));
    for (bad, says) in [
        ("{\"at\": 0, \"prompt_tokens\": 4}\n", "w.jsonl:1: `output_tokens` must be a number"),
        ("{\"at\": -1, \"prompt_tokens\": 4, \"output_tokens\": 2}\n", "w.jsonl:1: `at` -1 must be"),
        ("not json\n", "w.jsonl:1: not JSON"),
        ("\n", "holds no requests"),
    ] {
        std::fs::write(&file, bad).unwrap();
        let out = rdu(&["plan", "tiny-llama", "--workload", file.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(says), "{bad:?}: {err}");
    }
    let out = rdu(&["plan", "tiny-llama", "--rate", "0"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rate 0 must be a positive number"));
}
