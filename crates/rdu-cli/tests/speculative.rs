//! Speculative decoding (issue 48) gives a plain run's tokens, token for token, at greedy
//! decoding: every fixture model (transformers' tiny models of every family) through its
//! verify bundle, drafted by prompt lookup, by another model (the llama fixture), by the target
//! itself (rings and recurrent states put back after a rejection), and by a draft that proposes the plain
//! continuation with mistakes placed so that every number of accepted tokens happens; the
//! plain run's first tokens are transformers' own. With sampling, the first token is
//! distributed as the target's sampler draws it (a chi-square bound over seeds).

use crate::common::{f32_states, ok, user_error};
use rdu_compiler::deploy::{lower_decode_streamed, lower_verify_streamed, LowerOptions, Storage};
use rdu_compiler::model::config::from_config_path;
use rdu_compiler::model::spec::ModelSpec;
use rdu_host::speculate::{Draft, Drafter, Lookup, ModelDraft};
use rdu_host::{generate, speculate, Generate, Host, Sampling, Speculation, WeightsSource};
use rdu_spatial::chip::Chip;
use rdu_testkit::{fixtures, npy};
use std::path::{Path, PathBuf};

/// Drafted tokens a verify step checks in these tests.
const K: usize = 3;
/// Tokens generated after the prompt.
const N: usize = 20;

fn opts(progress: &mut dyn FnMut(rdu_compiler::deploy::Progress<'_>)) -> LowerOptions<'_> {
    LowerOptions { chip: Chip::builtin("sn50").expect("chip"), storage: Storage::Dense, seed: 0, progress }
}

/// A fixture's spec (f32 states: transformers' own cache) and weights.
fn fixture(arch: &str) -> (ModelSpec, WeightsSource) {
    let dir = fixtures::hf(arch);
    (f32_states(from_config_path(&dir.join("config.json")).expect("config")), WeightsSource::Hf(dir))
}

/// The decode bundle (`verify: None`) or verify bundle of `spec` over `ctx`, written under `tmp`.
fn bundle(spec: &ModelSpec, ctx: usize, verify: Option<usize>, tmp: &Path, name: &str) -> PathBuf {
    let model = match verify {
        None => lower_decode_streamed(spec, ctx, opts(&mut |_| {})),
        Some(k) => lower_verify_streamed(spec, k, None, 1, ctx, opts(&mut |_| {})),
    }
    .unwrap_or_else(|e| panic!("{}: {e}", spec.name));
    let dir = tmp.join(name);
    model.bundle().expect("bundle").write(&dir, false).expect("write");
    dir
}

fn load(dir: &Path, weights: &WeightsSource) -> Host {
    Host::load(dir, weights, &mut |_, _, _| {}).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

fn greedy(n: usize) -> Generate {
    Generate { n, stop: Vec::new(), sampling: Sampling::default(), keep_all: false }
}

/// Proposes the plain run's continuation, wrong at the drafted positions `wrong` picks, so that
/// a step accepts anywhere from none to all of its drafted tokens.
struct Oracle {
    plain: Vec<u32>,
    wrong: fn(usize) -> bool,
}

impl Drafter for Oracle {
    fn draft(&mut self, seq: &[u32], k: usize) -> rdu_host::Result<Draft> {
        let tokens = (seq.len()..seq.len() + k)
            .map(|p| match self.plain.get(p) {
                Some(&t) if !(self.wrong)(p) => t,
                Some(&t) => (t + 1) % 256,
                None => 0,
            })
            .collect();
        Ok(Draft { tokens, dists: None })
    }
}

/// Every drafted position `p` with `p mod 7` in {2, 5, 6} is wrong.
fn sometimes(p: usize) -> bool {
    matches!(p % 7, 2 | 5 | 6)
}

/// The plain run, then the speculative runs of every draft: each must give its tokens.
fn check(arch: &str) {
    let (spec, weights) = fixture(arch);
    let dir = fixtures::hf(arch);
    let prompt = npy::ids(dir.join("tokens.npy"));
    let ctx = prompt.len() + N + K;
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut plain = load(&bundle(&spec, ctx, None, tmp.path(), "decode"), &weights);
    let want = generate(&mut plain, vec![prompt.clone()], &greedy(N), &mut ()).expect("plain run").remove(0);
    let gen_ids = npy::ids(dir.join("gen_ids.npy"));
    assert_eq!(want.generated[..gen_ids.len()], gen_ids[..], "{arch}: the plain run is transformers' greedy run");
    let mut target = load(&bundle(&spec, ctx, Some(K), tmp.path(), "verify"), &weights);
    let full: Vec<u32> = prompt.iter().chain(&want.generated).copied().collect();
    let mut run = |label: &str, drafter: &mut dyn Drafter| -> Speculation {
        target.reset();
        let (out, stats) = speculate(&mut target, drafter, prompt.clone(), &greedy(N), &mut ())
            .unwrap_or_else(|e| panic!("{arch} {label}: {e}"));
        assert_eq!(out.generated, want.generated, "{arch} drafted by {label}: not the plain run's tokens");
        assert!(stats.accepted <= stats.drafted, "{arch} {label}: {stats:?}");
        stats
    };
    run("lookup", &mut Lookup::default());
    let all = run("the plain tokens", &mut Oracle { plain: full.clone(), wrong: |_| false });
    assert_eq!(all.accepted, all.drafted, "{arch}: a draft of the plain tokens is accepted whole: {all:?}");
    let some = run("the plain tokens, some wrong", &mut Oracle { plain: full.clone(), wrong: sometimes });
    assert!(some.accepted > 0 && some.accepted < some.drafted, "{arch}: {some:?}");
    let none = run("wrong tokens", &mut Oracle { plain: full, wrong: |_| true });
    assert_eq!(none.accepted, 0, "{arch}: {none:?}");
    // Another model drafting: the llama fixture (full caches), on its own weights.
    let (llama, llama_weights) = fixture("llama");
    let host = load(&bundle(&llama, ctx, None, tmp.path(), "draft-llama"), &llama_weights);
    run("the llama fixture", &mut ModelDraft::new(host, Sampling::default()).expect("draft"));
    // The target drafting for itself: rings and recurrent states put back after a rejection.
    let own = load(&bundle(&spec, ctx, None, tmp.path(), "draft-own"), &weights);
    let stats = run("itself", &mut ModelDraft::new(own, Sampling::default()).expect("draft"));
    assert_eq!(stats.accepted, stats.drafted, "{arch}: a model drafting for itself: {stats:?}");
}

/// A draft whose states are a sliding-window ring (Gemma 3's window of 4, so the drafted rows
/// overwrite rows the window still needs) or recurrent (Qwen3-Next's Gated DeltaNet and conv
/// states) proposes, after any number of its drafted tokens was rejected, exactly what a fresh
/// draft fed the same sequence from the start proposes.
fn rewinds(arch: &str) {
    let (spec, weights) = fixture(arch);
    let prompt = npy::ids(fixtures::hf(arch).join("tokens.npy"));
    let rounds = 12;
    let ctx = prompt.len() + rounds * (K + 1) + K;
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = bundle(&spec, ctx, None, tmp.path(), "draft");
    let mut draft = ModelDraft::new(load(&dir, &weights), Sampling::default()).expect("draft");
    let mut fresh_host = Some(load(&dir, &weights));
    let mut seq = prompt;
    for round in 0..rounds {
        let got = draft.draft(&seq, K).expect("draft").tokens;
        let mut host = fresh_host.take().expect("host");
        host.reset();
        let mut fresh = ModelDraft::new(host, Sampling::default()).expect("fresh draft");
        let want = fresh.draft(&seq, K).expect("fresh draft").tokens;
        fresh_host = Some(fresh.into_host());
        assert_eq!(got, want, "{arch} round {round}: the rewound draft proposes what a fresh one does");
        // Accept none, one, … all of the drafted tokens in turn; a rejected one is replaced.
        let j = round % (K + 1);
        seq.extend(&got[..j]);
        seq.push(got.get(j).map_or(7, |&t| (t + 1) % 256));
    }
}

#[test]
fn a_ring_draft_rewinds_after_a_rejection() {
    rewinds("gemma3_text");
}

#[test]
fn a_recurrent_draft_rewinds_after_a_rejection() {
    rewinds("qwen3_next");
}

#[test]
fn greedy_speculation_is_the_plain_run_llama() {
    check("llama");
}

#[test]
fn greedy_speculation_is_the_plain_run_qwen3() {
    check("qwen3");
}

#[test]
fn greedy_speculation_is_the_plain_run_qwen3_next() {
    check("qwen3_next");
}

#[test]
fn greedy_speculation_is_the_plain_run_gemma3_text() {
    check("gemma3_text");
}

#[test]
fn greedy_speculation_is_the_plain_run_deepseek_v2() {
    check("deepseek_v2");
}

#[test]
fn greedy_speculation_is_the_plain_run_deepseek_v2_noqlora() {
    check("deepseek_v2_noqlora");
}

/// `rdu run --draft`: the same tokens as a plain `rdu run` on tiny presets of every family
/// (rings and recurrent states included), drafted by lookup, by tiny-llama and by the model
/// itself (its rings and recurrent states put back after a rejection); `--json` reports
/// the speculation.
#[test]
fn rdu_run_with_a_draft_gives_the_plain_tokens() {
    let tokens = "1,2,3,4,5,6,7,8,1,2,3,4,5,6";
    let generated = |out: &str| -> (Vec<u64>, serde_json::Value) {
        let v: serde_json::Value = serde_json::from_str(out).expect("json");
        let ids = v["generated"].as_array().expect("generated").iter().map(|t| t.as_u64().unwrap()).collect();
        (ids, v["speculation"].clone())
    };
    for model in ["tiny-llama", "tiny-gemma3", "tiny-qwen3-next", "tiny-qwen3.5-moe", "tiny-deepseek-v2"] {
        let (want, none) = generated(&ok(&["run", model, "--tokens", tokens, "-n", "24", "--json"]));
        assert!(none.is_null(), "{model}: a plain run reports no speculation");
        for draft in ["lookup", "tiny-llama", model] {
            let args =
                ["run", model, "--tokens", tokens, "-n", "24", "--json", "--draft", draft, "--draft-tokens", "3"];
            let (got, s) = generated(&ok(&args));
            assert_eq!(got, want, "{model} --draft {draft}");
            assert_eq!((s["draft"].as_str(), s["draft_tokens"].as_u64()), (Some(draft), Some(3)), "{s}");
            let (drafted, accepted) = (s["drafted"].as_u64().unwrap(), s["accepted"].as_u64().unwrap());
            assert!(s["steps"].as_u64().unwrap() > 0 && accepted <= drafted, "{model} {draft}: {s}");
        }
    }
}

#[test]
fn a_draft_that_cannot_serve_is_refused_in_one_line() {
    let base = ["run", "tiny-llama", "--tokens", "1,2,3", "-n", "4"];
    let with = |extra: &[&str]| -> String { user_error(&[&base[..], extra].concat()) };
    let vocab = with(&["--draft", "llama-3.1-8b"]);
    assert!(
        vocab.contains("vocabulary of 128256 tokens") && vocab.contains("share the target's vocabulary"),
        "{vocab}"
    );
    assert!(with(&["--draft", "lookup", "--draft-tokens", "0"]).contains("--draft-tokens must be at least 1"));
    assert!(with(&["--draft", "lookup", "--engine", "reference"]).contains("spatial engine"));
    assert!(with(&["--draft", "mtp"]).contains("multi-token-prediction"));
}

/// Speculative sampling keeps the target's distribution: the first token of a sampled run
/// (temperature 1.5 among the top 6), drafted by another model sampling its own distribution,
/// over 3000 seeds, against the target's own probabilities (from a plain step), within the
/// chi-square bound of 5 degrees of freedom at p = 0.001 (20.52).
#[test]
fn speculative_sampling_draws_the_targets_distribution() {
    let (spec, weights) = fixture("qwen3");
    // 11 tokens: the verify step that makes the first token holds the prompt's last 3 rows and
    // one drafted token.
    let prompt = npy::ids(fixtures::hf("qwen3").join("tokens.npy"))[..11].to_vec();
    let ctx = prompt.len() + 1 + K;
    let tmp = tempfile::tempdir().expect("temp dir");
    let sampling = |seed| Sampling { temperature: 1.5, top_k: 6, top_p: 1.0, seed };
    let mut plain = load(&bundle(&spec, ctx, None, tmp.path(), "decode"), &weights);
    let logits = generate(&mut plain, vec![prompt.clone()], &greedy(0), &mut ()).expect("plain").remove(0).logits;
    let p = rdu_host::Sampler::new(sampling(0)).unwrap().distribution(&logits[0]).unwrap();
    let mut target = load(&bundle(&spec, ctx, Some(K), tmp.path(), "verify"), &weights);
    let (llama, llama_weights) = fixture("llama");
    let mut draft_host = Some(load(&bundle(&llama, ctx, None, tmp.path(), "draft"), &llama_weights));
    let runs = 3000;
    let mut counts = vec![0usize; p.tokens.len()];
    let (mut drafted, mut accepted) = (0, 0);
    for seed in 0..runs {
        target.reset();
        let mut host = draft_host.take().expect("the draft's host");
        host.reset();
        let mut draft = ModelDraft::new(host, sampling(seed)).expect("draft");
        let how = Generate { n: 1, stop: Vec::new(), sampling: sampling(seed), keep_all: false };
        let (out, stats) = speculate(&mut target, &mut draft, prompt.clone(), &how, &mut ()).expect("run");
        (drafted, accepted) = (drafted + stats.drafted.min(1), accepted + stats.accepted.min(1));
        let i = p.tokens.iter().position(|&t| t == out.generated[0]).expect("a token of the target's top 6");
        counts[i] += 1;
        draft_host = Some(draft.into_host());
    }
    let chi2: f64 = (0..p.tokens.len())
        .map(|i| {
            let expected = p.prob(p.tokens[i]) * runs as f64;
            (counts[i] as f64 - expected).powi(2) / expected
        })
        .sum();
    eprintln!(
        "first tokens {counts:?} against {:?}: chi-square {chi2:.2}; {accepted} of {drafted} first drafts accepted",
        p.probs
    );
    assert!(accepted > 0 && accepted < drafted, "both outcomes happen: {accepted} of {drafted}");
    assert!(chi2 < 20.52, "chi-square {chi2:.2} over the bound 20.52 (5 degrees of freedom, p = 0.001)");
}

/// `rdu lower --cut verify --draft MODEL --acceptance A -o DIR`: the verify and the draft's
/// decode bundles, certified, beside `speculative.json`; the estimate charges the verify step
/// and `K + A^K` draft steps for `(1 − A^(K+1)) / (1 − A)` tokens; `rdu verify` re-certifies both.
#[test]
fn a_speculative_deployment_is_a_bundle_of_bundles_with_its_estimate() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("spec");
    let d = dir.to_str().unwrap();
    let args = ["lower", "tiny-qwen3", "--cut", "verify", "--draft-tokens", "4", "--ctx", "64", "--json"];
    let out = ok(&[&args[..], &["--draft", "tiny-llama", "--acceptance", "0.8", "-o", d]].concat());
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let s = &v["speculation"];
    assert_eq!((s["draft"].as_str(), s["draft_tokens"].as_u64()), (Some("tiny-llama"), Some(4)), "{s}");
    let expected = s["expected_tokens_per_step"].as_f64().unwrap();
    assert!((expected - (1.0 - 0.8f64.powi(5)) / 0.2).abs() < 1e-12, "{s}");
    let (verify, draft) = (s["verify_step_seconds"].as_f64().unwrap(), s["draft_step_seconds"].as_f64().unwrap());
    assert!(verify > 0.0 && draft > 0.0, "{s}");
    let step = verify + (4.0 + 0.8f64.powi(4)) * draft;
    assert!((s["seconds_per_step"].as_f64().unwrap() - step).abs() < 1e-15, "{s}");
    assert!((v["step"]["tokens_per_second"].as_f64().unwrap() - expected / step).abs() < 1e-6, "{v}");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("speculative.json")).unwrap()).unwrap();
    assert_eq!(manifest["format"], "rdu-speculative");
    assert_eq!(manifest["speculation"], *s, "the manifest carries the estimate");
    let verified = ok(&["verify", d, "--model", "tiny-qwen3"]);
    assert!(verified.contains("/verify: ") && verified.contains("/draft: "), "{verified}");
    assert!(verified.contains("a speculative deployment, every bundle re-certified"), "{verified}");
    // Lowered again into the same directory, with lookup: no draft bundle left behind.
    ok(&[&args[..], &["--draft", "lookup", "--acceptance", "0.5", "-o", d]].concat());
    assert!(!dir.join("draft").exists() && dir.join("verify").join("manifest.json").exists());
    // The verify bundle runs with --draft; without one it is refused.
    let bundle = dir.join("verify");
    let run = ["run", "tiny-qwen3", "--tokens", "1,2,3,1,2", "-n", "6", "--bundle", bundle.to_str().unwrap()];
    ok(&[&run[..], &["--draft", "lookup"]].concat());
    assert!(user_error(&run).contains("is a verify bundle: run it with --draft"));
    // What cannot make a speculative deployment is refused in one line.
    let refused = |extra: &[&str]| user_error(&[&["lower", "tiny-qwen3", "--ctx", "64"][..], extra].concat());
    assert!(refused(&["--draft", "tiny-llama"]).contains("add --cut verify"));
    assert!(refused(&["--cut", "verify", "--draft", "llama-3.1-8b"]).contains("share the target's vocabulary"));
    assert!(refused(&["--cut", "verify", "--draft", "tiny-llama", "--acceptance", "1.5"]).contains("not a probability"));
}

/// `rdu plan --draft`: every width both models admit × K, each acceptance rate's tokens/s the
/// speculative estimate of that verify step and draft step.
#[test]
fn a_speculative_plan_sweeps_widths_draft_tokens_and_acceptance() {
    let out = ok(&[
        "plan",
        "tiny-llama",
        "--draft",
        "tiny-qwen3",
        "--ctx",
        "64",
        "--draft-tokens",
        "2,4",
        "--acceptance",
        "0.5,0.9",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let rows = v["rows"].as_array().expect("rows");
    assert!(rows.len() >= 2 && rows.len().is_multiple_of(2), "{v}");
    for r in rows {
        let k = r["draft_tokens"].as_u64().unwrap() as i32;
        let (verify, draft) = (r["verify_step_seconds"].as_f64().unwrap(), r["draft_step_seconds"].as_f64().unwrap());
        for cell in r["by_acceptance"].as_array().unwrap() {
            let a = cell["acceptance"].as_f64().unwrap();
            let want = (1.0 - a.powi(k + 1)) / (1.0 - a) / (verify + (k as f64 + a.powi(k)) * draft);
            assert!((cell["tokens_per_second"].as_f64().unwrap() - want).abs() < 1e-6 * want, "{r}");
        }
    }
}
