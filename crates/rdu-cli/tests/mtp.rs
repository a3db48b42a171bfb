//! `--draft mtp` (issue 48): a model's own multi-token-prediction block drafting — Qwen3-Next's
//! (`qwen3_next_mtp`), DeepSeek-V3's (`deepseek_v3_mtp`) and GLM-4.5's (`glm4_moe_mtp`, stored
//! without the block's own embedding and head, as GLM-4.6 is). Their logits are transformers'
//! (each tiny fixture's seeded block composed from transformers 5.24's decoder layer and
//! RMSNorm, `tests/data/fixtures/tools/make_mtp.py`, `make_mtp_nextn.py`), fed the target's hidden
//! rows as the target's verify bundle exports them — which are transformers' too —, and a run
//! drafted by it gives the plain run's tokens, token for token.

use crate::common::{f32_states, ok, user_error};
use rdu_compiler::deploy::{deploy, lower_verify_streamed, LowerOptions, Storage, StreamedModel};
use rdu_compiler::model::config::from_config_path;
use rdu_compiler::model::mtp::{exporting_hidden, falling_back, mtp_draft};
use rdu_compiler::model::spec::{Cut, ModelSpec};
use rdu_host::speculate::{Draft, Drafter, MtpDraft};
use rdu_host::{speculate, Generate, Host, Sampling, WeightsSource};
use rdu_spatial::chip::Chip;
use rdu_spatial::SimTensor;
use rdu_testkit::{fixtures, npy, Tolerance};
use std::path::Path;

const CTX: usize = 24;
/// Drafted tokens a verify step checks.
const K: usize = 3;

fn opts(progress: &mut dyn FnMut(rdu_compiler::deploy::Progress<'_>)) -> LowerOptions<'_> {
    LowerOptions { chip: Chip::builtin("sn50").expect("chip"), storage: Storage::Dense, seed: 0, progress }
}

fn load(model: &StreamedModel, dir: &Path) -> Host {
    load_from("qwen3_next_mtp", model, dir)
}

/// `model`'s bundle written to `dir` and loaded with the weights of `fixture`.
fn load_from(fixture: &str, model: &StreamedModel, dir: &Path) -> Host {
    model.bundle().expect("bundle").write(dir, false).expect("write");
    let weights = WeightsSource::Hf(fixtures::hf(fixture));
    Host::load(dir, &weights, &mut |_, _, _| {}).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

/// The target of `fixture` (f32 states) and its MTP block as the checkpoint holds it.
fn block_of(fixture: &str) -> (ModelSpec, ModelSpec) {
    let dir = fixtures::hf(fixture);
    let target = f32_states(from_config_path(&dir.join("config.json")).expect("config"));
    let st = rdu_checkpoint::SafeTensors::open(dir.join("model.safetensors")).expect("checkpoint");
    let block = falling_back(mtp_draft(&target).expect("MTP block"), &|name| st.names().any(|n| n == name));
    (target, block)
}

/// Row `q` of the block reads the fixture's token and hidden row `q` at position `q`: its
/// logits are transformers', and the hidden state it exports after row `n - 2` is the one the
/// fixture's chained row reads (Qwen3-Next's: its `mtp.norm` output; DeepSeek-V3's and GLM's: its
/// rows before `shared_head.norm`, as vLLM chains them) — on one chip and split over two.
fn logits_are_transformers(fixture: &str) {
    let dir = fixtures::hf(fixture);
    let (target, spec) = block_of(fixture);
    let tmp = tempfile::tempdir().expect("temp dir");
    let tokens = npy::ids(dir.join("mtp_tokens.npy"));
    let hidden = npy::f32(dir.join("mtp_hidden.npy"));
    let want = npy::f32(dir.join("mtp_logits.npy"));
    let (d, vocab, n) = (target.d_model, target.vocab, tokens.len());
    for cut in [Cut::Decode { ctx: CTX }, Cut::Tp { tp: 2, ctx: CTX }] {
        let model = deploy(&spec, &cut, opts(&mut |_| {})).expect("lower the MTP block");
        let mut host = load_from(fixture, &model, &tmp.path().join(format!("mtp{}", cut.tp())));
        for (q, &t) in tokens.iter().enumerate() {
            let out = host.step_hidden(&[t], q, &hidden[q * d..(q + 1) * d]).expect("MTP step");
            let logits = out.logits.as_f32().expect("f32 logits");
            let row = format!("{fixture} MTP row {q} over {} chip(s)", cut.tp());
            Tolerance::F32.assert(&row, logits, &want[q * vocab..(q + 1) * vocab]);
            if q + 2 == n {
                let own = out.hidden.expect("the block exports its hidden state");
                Tolerance::F32.assert(&row, own.as_f32().unwrap(), &hidden[(n - 1) * d..n * d]);
            }
        }
    }
}

mod the_mtp_blocks_logits_are_transformers {
    use super::logits_are_transformers;
    rdu_testkit::per_fixture!(logits_are_transformers: qwen3_next_mtp, deepseek_v3_mtp, glm4_moe_mtp);
}

/// The block's fusion concatenates the embedding first: with `eh_proj`'s two halves swapped
/// in the checkpoint (what reading the hidden state first amounts to) its logits are not
/// transformers'.
#[test]
fn the_fusion_reads_the_embedding_first() {
    let fixture = "deepseek_v3_mtp";
    let dir = fixtures::hf(fixture);
    let (target, spec) = block_of(fixture);
    let tmp = tempfile::tempdir().expect("temp dir");
    let swapped = tmp.path().join("swapped");
    rdu_testkit::safetensors_edit::copy_edited(&dir, &swapped, |t| {
        let w = t.get_mut("model.layers.3.eh_proj.weight").expect("eh_proj");
        let half = 4 * target.d_model;
        for row in w.bytes.chunks_mut(2 * half) {
            let (e, h) = row.split_at_mut(half);
            e.swap_with_slice(h);
        }
    });
    let model = deploy(&spec, &Cut::Decode { ctx: CTX }, opts(&mut |_| {})).expect("lower the MTP block");
    let bundle = tmp.path().join("mtp");
    model.bundle().expect("bundle").write(&bundle, false).expect("write");
    let mut host = Host::load(&bundle, &WeightsSource::Hf(swapped), &mut |_, _, _| {}).expect("load");
    let (tokens, hidden) = (npy::ids(dir.join("mtp_tokens.npy")), npy::f32(dir.join("mtp_hidden.npy")));
    let want = npy::f32(dir.join("mtp_logits.npy"));
    let (d, vocab) = (target.d_model, target.vocab);
    let out = host.step_hidden(&[tokens[0]], 0, &hidden[..d]).expect("MTP step");
    let worst = out.logits.as_f32().unwrap().iter().zip(&want[..vocab]).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    assert!(worst > 1e-2, "the swapped fusion is {worst} from transformers: the fixture cannot tell the order");
}

/// The host's MTP draft, given the target's hidden rows after the prompt (transformers'), drafts
/// what transformers' block ranks first: after the prompt's rows, then chained on its own output
/// at the next position (the fixture's last row).
fn drafts_transformers_tokens(fixture: &str) {
    let dir = fixtures::hf(fixture);
    let (target, spec) = block_of(fixture);
    let tmp = tempfile::tempdir().expect("temp dir");
    let model = deploy(&spec, &Cut::Decode { ctx: CTX }, opts(&mut |_| {})).expect("lower");
    let mut draft =
        MtpDraft::new(load_from(fixture, &model, &tmp.path().join("mtp")), Sampling::default()).expect("draft");
    let prompt = npy::ids(dir.join("tokens.npy"));
    let hidden = npy::f32(dir.join("target_hidden.npy"));
    let rows = SimTensor::f32(vec![prompt.len(), target.d_model], hidden);
    draft.observe(0, Some(&rows), prompt.len()).expect("observe");
    let (tokens, want) = (npy::ids(dir.join("mtp_tokens.npy")), npy::f32(dir.join("mtp_logits.npy")));
    let last = &want[(tokens.len() - 1) * target.vocab..];
    let second = rdu_testkit::argmax(last);
    assert_eq!(draft.draft(&prompt, 2).expect("draft").tokens, [tokens[tokens.len() - 1], second]);
}

mod the_mtp_draft_drafts_transformers_tokens {
    use super::drafts_transformers_tokens;
    rdu_testkit::per_fixture!(drafts_transformers_tokens: qwen3_next_mtp, deepseek_v3_mtp, glm4_moe_mtp);
}

/// The target's verify bundle, drafted by its MTP block, exports after every row the hidden
/// state transformers' model gives (its final norm's output, what vLLM hands the block), on
/// one chip and split over two.
fn verify_exports_hidden_rows(fixture: &str) {
    let dir = fixtures::hf(fixture);
    let (target, _) = block_of(fixture);
    let k = K;
    let tmp = tempfile::tempdir().expect("temp dir");
    let tokens = npy::ids(dir.join("tokens.npy"));
    let want = npy::f32(dir.join("target_hidden.npy"));
    let d = target.d_model;
    for tp in [1, 2] {
        let model = lower_verify_streamed(&exporting_hidden(&target), k, None, tp, CTX, opts(&mut |_| {}))
            .expect("lower the verify bundle");
        let mut host = load_from(fixture, &model, &tmp.path().join(format!("verify{tp}")));
        for (s, rows) in tokens.chunks(k + 1).enumerate() {
            let out = host.step(rows, s * (k + 1)).expect("verify step");
            let got = out.hidden.expect("the verify head exports its rows");
            let at = s * (k + 1) * d;
            let what = format!("hidden rows of step {s} over {tp} chip(s)");
            Tolerance::F32.assert(&what, got.as_f32().unwrap(), &want[at..at + rows.len() * d]);
        }
    }
}

mod the_verify_bundle_exports_the_targets_hidden_rows {
    use super::verify_exports_hidden_rows;
    rdu_testkit::per_fixture!(verify_exports_hidden_rows: qwen3_next_mtp, deepseek_v3_mtp, glm4_moe_mtp);
}

/// `rdu run --draft mtp`: the plain run's tokens (transformers' greedy run on the fixture) for
/// every K (and over two chips), drafted by the checkpoint's own MTP block, and on the seeded
/// tiny preset of its family; `--json` reports the speculation.
fn run_gives_the_plain_tokens(fixture: &str) {
    let dir = fixtures::hf(fixture);
    let path = dir.to_str().expect("utf-8 path");
    let preset = match fixture {
        "qwen3_next_mtp" => "tiny-qwen3-next",
        "deepseek_v3_mtp" => "tiny-deepseek-v3",
        _ => "tiny-glm4-moe",
    };
    let prompt = npy::ids(dir.join("tokens.npy"));
    let tokens = prompt.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let run = |model: &str, extra: &[&str]| -> (Vec<u64>, serde_json::Value) {
        let args =
            [&["run", model, "--tokens", &tokens, "-n", "16", "--json", "--storage", "dense"][..], extra].concat();
        let v: serde_json::Value = serde_json::from_str(&ok(&args)).expect("json");
        let ids = v["generated"].as_array().expect("generated").iter().map(|t| t.as_u64().unwrap()).collect();
        (ids, v["speculation"].clone())
    };
    let gen_ids: Vec<u64> = npy::ids(dir.join("gen_ids.npy")).into_iter().map(u64::from).collect();
    for model in [path, preset] {
        let (want, _) = run(model, &[]);
        if model == path {
            assert_eq!(want[..gen_ids.len()], gen_ids[..], "the plain run is transformers' greedy run");
        }
        for (k, tp) in [("1", "1"), ("2", "1"), ("4", "1"), ("2", "2")] {
            let (got, s) = run(model, &["--draft", "mtp", "--draft-tokens", k, "--tp", tp]);
            assert_eq!(got, want, "{model} --draft mtp --draft-tokens {k} --tp {tp}");
            assert_eq!(s["draft"].as_str(), Some("mtp"), "{s}");
            let (drafted, accepted) = (s["drafted"].as_u64().unwrap(), s["accepted"].as_u64().unwrap());
            assert!(drafted > 0 && accepted <= drafted, "{model} K={k}: {s}");
        }
    }
}

mod rdu_run_draft_mtp_gives_the_plain_tokens {
    use super::run_gives_the_plain_tokens;
    rdu_testkit::per_fixture!(run_gives_the_plain_tokens: qwen3_next_mtp, deepseek_v3_mtp, glm4_moe_mtp);
}

/// Wraps the MTP draft: proposes the plain continuation (wrong where `wrong` says, so that a step
/// accepts anywhere from none to all of its drafted tokens), and checks at every step that the
/// block — caught up incrementally over accepted and rejected rows — drafts what a fresh block
/// fed the whole history drafts.
struct Forced {
    mtp: Option<MtpDraft>,
    fresh: Option<MtpDraft>,
    rows: Vec<Vec<f32>>,
    plain: Vec<u32>,
    checked: usize,
}

impl Drafter for Forced {
    fn observe(&mut self, pos: usize, hidden: Option<&SimTensor>, kept: usize) -> rdu_host::Result<()> {
        let rows = hidden.and_then(SimTensor::as_f32).expect("hidden rows");
        let d = rows.len() / (K + 1);
        self.rows.truncate(pos);
        self.rows.extend(rows[..kept * d].chunks(d).map(<[f32]>::to_vec));
        self.mtp.as_mut().unwrap().observe(pos, hidden, kept)
    }

    fn draft(&mut self, seq: &[u32], k: usize) -> rdu_host::Result<Draft> {
        let got = self.mtp.as_mut().unwrap().draft(seq, k)?;
        let mut host = self.fresh.take().unwrap().into_host();
        host.reset();
        let mut fresh = MtpDraft::new(host, Sampling::default())?;
        let all: Vec<f32> = self.rows.concat();
        fresh.observe(
            0,
            Some(&SimTensor::f32(vec![self.rows.len(), all.len() / self.rows.len().max(1)], all)),
            self.rows.len(),
        )?;
        assert_eq!(
            got,
            fresh.draft(seq, k)?,
            "the incremental block drafts what a fresh one does after {} tokens",
            seq.len()
        );
        self.fresh = Some(fresh);
        self.checked += usize::from(!got.tokens.is_empty());
        let tokens = (seq.len()..seq.len() + got.tokens.len())
            .map(|p| match self.plain.get(p) {
                Some(&t) if p % 5 != 3 => t,
                Some(&t) => (t + 1) % 256,
                None => 0,
            })
            .collect();
        Ok(Draft { tokens, dists: None })
    }
}

/// The block catches up over every number of accepted rows: at every step it drafts what a
/// block fed the whole history afresh drafts, and the run gives the plain tokens.
#[test]
fn the_mtp_block_catches_up_over_accepted_and_rejected_rows() {
    let dir = fixtures::hf("qwen3_next_mtp");
    let target = f32_states(from_config_path(&dir.join("config.json")).expect("config"));
    let spec = mtp_draft(&target).expect("MTP block");
    let tmp = tempfile::tempdir().expect("temp dir");
    let n = 16;
    let prompt = npy::ids(dir.join("tokens.npy"));
    let ctx = prompt.len() + n + K;
    let verify = lower_verify_streamed(&exporting_hidden(&target), K, None, 1, ctx, opts(&mut |_| {})).expect("verify");
    let mut target_host = load(&verify, &tmp.path().join("verify"));
    let block = deploy(&spec, &Cut::Decode { ctx }, opts(&mut |_| {})).expect("MTP");
    let mtp = |name: &str| MtpDraft::new(load(&block, &tmp.path().join(name)), Sampling::default()).expect("MTP draft");
    let how = Generate { n, stop: Vec::new(), sampling: Sampling::default(), keep_all: false };
    let (plain, _) = speculate(&mut target_host, &mut mtp("a"), prompt.clone(), &how, &mut ()).expect("run");
    let full: Vec<u32> = prompt.iter().chain(&plain.generated).copied().collect();
    let mut forced = Forced { mtp: Some(mtp("b")), fresh: Some(mtp("c")), rows: Vec::new(), plain: full, checked: 0 };
    target_host.reset();
    let (out, stats) = speculate(&mut target_host, &mut forced, prompt, &how, &mut ()).expect("forced run");
    assert_eq!(out.generated, plain.generated);
    assert!(stats.accepted > 0 && stats.accepted < stats.drafted && forced.checked > 3, "{stats:?}");
}

/// `--draft mtp` where it cannot draft: one line each.
#[test]
fn draft_mtp_is_refused_in_one_line_where_it_cannot_draft() {
    let no_block = fixtures::hf("qwen3_next");
    let no_block = no_block.to_str().unwrap();
    let e = user_error(&["run", no_block, "--tokens", "1,2,3", "-n", "2", "--draft", "mtp"]);
    assert!(e.contains("has no multi-token-prediction block") && e.contains("mtp.fc.weight"), "{e}");
    let e = user_error(&["lower", no_block, "--cut", "verify", "--draft", "mtp", "--ctx", "16"]);
    assert!(e.contains("has no multi-token-prediction block"), "{e}");
    let e =
        user_error(&["lower", "tiny-qwen3-next", "--cut", "verify", "--draft", "mtp", "--batch", "2", "--ctx", "64"]);
    assert!(e.contains("one sequence") && !e.contains('\n'), "{e}");
    // Kimi K2 is DeepSeek-V3's architecture without the block (num_nextn_predict_layers 0).
    let e = user_error(&["lower", "kimi-k2", "--cut", "verify", "--draft", "mtp", "--ctx", "64"]);
    assert!(e.contains("kimi-k2 (deepseek_v3) has no multi-token-prediction block") && !e.contains('\n'), "{e}");
    let tmp = tempfile::tempdir().expect("temp dir");
    let plain = tmp.path().join("plain");
    ok(&[
        "lower",
        "tiny-qwen3-next",
        "--cut",
        "verify",
        "--draft-tokens",
        "3",
        "--ctx",
        "64",
        "-o",
        plain.to_str().unwrap(),
    ]);
    let args = ["run", "tiny-qwen3-next", "--bundle", plain.to_str().unwrap(), "--tokens", "1,2,3", "-n", "4"];
    let e = user_error(&[&args[..], &["--draft", "mtp"]].concat());
    assert!(e.contains("exports no hidden state for an MTP draft"), "{e}");
}

/// `rdu kinds` names the MTP block as a kind of its own that drafts, and only where there is one.
#[test]
fn rdu_kinds_names_the_mtp_block_as_a_draft() {
    let text = ok(&["kinds", "tiny-qwen3-next"]);
    assert!(text.contains("multi-token-prediction block, a kind of its own drafting with --draft mtp"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&ok(&["kinds", "tiny-qwen3-next", "--json"])).expect("json");
    let kinds: Vec<&str> = v["kinds"].as_array().unwrap().iter().map(|k| k["digest"].as_str().unwrap()).collect();
    let mtp = v["mtp"]["kind"]["digest"].as_str().expect("the block's kind");
    assert!(!kinds.contains(&mtp), "its own kind: {v}");
    assert!(ok(&["kinds", "tiny-llama", "--json"]).find("\"mtp\"").is_none());
}

/// `rdu lower --cut verify --draft mtp` writes a bundle of bundles: the verify bundle exporting
/// its hidden rows and the MTP block's decode bundle (over the verify step's chips), both
/// re-certified by `rdu verify` — for each family's block, its tensors under its own names.
#[test]
fn rdu_lower_draft_mtp_writes_a_bundle_of_bundles() {
    let tmp = tempfile::tempdir().expect("temp dir");
    // (The tiny experts' 32 input columns split over two chips hold no whole Q8_0 blocks.)
    for (preset, tp, storage, fc) in [
        ("tiny-qwen3-next", "1", "q8", "mtp.fc.weight"),
        ("tiny-deepseek-v3", "1", "q8", "model.layers.4.eh_proj.weight"),
        ("tiny-glm4-moe", "2", "dense", "model.layers.4.eh_proj.weight"),
    ] {
        let out = tmp.path().join(preset);
        let out_s = out.to_str().unwrap();
        let args = [
            "lower",
            preset,
            "--cut",
            "verify",
            "--draft",
            "mtp",
            "--draft-tokens",
            "3",
            "--ctx",
            "64",
            "--tp",
            tp,
            "--storage",
            storage,
        ];
        let json: serde_json::Value =
            serde_json::from_str(&ok(&[&args[..], &["--acceptance", "0.7", "--json", "-o", out_s]].concat()))
                .expect("json");
        let s = &json["speculation"];
        let name = format!("{preset}-mtp");
        assert_eq!((s["draft"].as_str(), s["draft_bundle"].as_str()), (Some(name.as_str()), Some("draft")), "{s}");
        assert!(s["expected_tokens_per_step"].as_f64().unwrap() > 1.0, "{s}");
        for part in ["verify", "draft"] {
            ok(&["verify", out.join(part).to_str().unwrap()]);
        }
        let manifest = std::fs::read_to_string(out.join("draft/manifest.json")).expect("manifest");
        assert!(manifest.contains("\"role\": \"hidden\"") && manifest.contains(fc), "{preset}: {manifest}");
    }
}

/// `rdu plan TARGET --draft mtp` estimates the target's verify step exporting its rows beside its
/// MTP block's decode step, at every width both admit.
#[test]
fn rdu_plan_draft_mtp_estimates_the_block() {
    let args = ["plan", "tiny-deepseek-v3", "--draft", "mtp", "--draft-tokens", "1,2", "--acceptance", "0.8"];
    let args = [&args[..], &["--storage", "dense", "--json"]].concat();
    let v: serde_json::Value = serde_json::from_str(&ok(&args)).expect("json");
    assert_eq!(v["draft"].as_str(), Some("tiny-deepseek-v3-mtp"), "{v}");
    let rows = v["rows"].as_array().expect("rows");
    assert!(rows.iter().any(|r| r["tp"] == 1) && rows.iter().any(|r| r["tp"] == 2), "{v}");
    for r in rows {
        let (verify, draft) = (r["verify_step_seconds"].as_f64().unwrap(), r["draft_step_seconds"].as_f64().unwrap());
        assert!(draft > 0.0 && draft < verify, "{r}");
    }
    let e = user_error(&["plan", "kimi-k2", "--draft", "mtp"]);
    assert!(e.contains("has no multi-token-prediction block"), "{e}");
}
