//! The verify cut (speculative decoding's check, issue 48): every layer of every preset declares
//! the decode cut's states and, beside them, only what a step needs to continue after any of
//! its rows (a ring's pending rows, a recurrent layer's states after each row); its kinds are
//! the decode kinds; the head computes every row; every tiny preset lowers and certifies on one
//! chip, batched and over two chips; every real preset certifies at its real shapes.

use rdu_compiler::deploy::{layer_kinds_for, LowerOptions, Storage, StreamedReject};
use rdu_compiler::front::lift;
use rdu_compiler::lang::ast::DeclKind;
use rdu_compiler::lang::parse;
use rdu_compiler::model::author::{embed_source, head_source, source_of};
use rdu_compiler::model::presets;
use rdu_compiler::model::spec::{Cut, Mixer};
use rdu_spatial::chip::Chip;
use std::collections::BTreeMap;

/// `name : shape` of every declaration of `kind` in `text`.
fn decls(text: &str, kind: DeclKind) -> BTreeMap<String, Vec<usize>> {
    let program = parse(text).expect("parses");
    program.decls().filter(|d| d.kind == kind).map(|d| (d.name.text.clone(), d.ty.shape.clone())).collect()
}

type Progress<'a> = &'a mut dyn FnMut(rdu_compiler::deploy::Progress<'_>);

fn opts(storage: Storage, seed: u64, progress: Progress<'_>) -> LowerOptions<'_> {
    crate::share_references();
    LowerOptions { chip: Chip::builtin("sn50").expect("builtin chip"), storage, seed, progress }
}

#[test]
fn verify_layers_declare_the_decode_states_and_what_resuming_needs_on_every_preset() {
    let draft = 3;
    for name in presets::names() {
        let spec = presets::resolve(name).expect("preset");
        let ctx = 4096.min(spec.max_ctx.max(1));
        let (verify, decode) = (Cut::Verify { draft, batch: None, tp: 1, ctx }, Cut::Decode { ctx });
        for (l, layer) in spec.layers.iter().enumerate() {
            let v = source_of(&spec, l, verify, &Storage::AllQ8);
            let d = source_of(&spec, l, decode, &Storage::AllQ8);
            let mut states = decls(v.text(), DeclKind::State);
            for (state, shape) in decls(d.text(), DeclKind::State) {
                assert_eq!(states.remove(&state), Some(shape), "{name} layer {l}: the decode state {state}");
            }
            // What is left: a ring's pending rows, or the states after each row but the last.
            let ring = layer.window.is_some_and(|w| w < ctx);
            for (state, shape) in &states {
                let base = state.trim_end_matches(|c: char| c.is_ascii_digit());
                let ok = match (&layer.mixer, base) {
                    (Mixer::Attention { .. }, "Kp" | "Vp") | (Mixer::Mla { .. }, "Lp") => ring && shape[0] == draft,
                    (Mixer::GatedDeltaNet { .. }, "Ch") => shape[0] == draft,
                    (Mixer::GatedDeltaNet { .. }, b) => {
                        (0..draft).any(|i| b == format!("Sh{i}r")) && states.len() == draft + 1
                    }
                    _ => false,
                };
                assert!(ok, "{name} layer {l}: unexpected state {state} {shape:?}");
            }
            let inputs = decls(v.text(), DeclKind::Input);
            if layer.rotation.is_some() {
                assert_eq!(inputs.get("pos"), Some(&vec![draft + 1]), "{name} layer {l}: {inputs:?}");
            }
            let recurrent = matches!(layer.mixer, Mixer::GatedDeltaNet { .. });
            assert_eq!(inputs.get("resume"), recurrent.then_some(&vec![1]), "{name} layer {l}");
            assert_eq!(inputs.get("pend"), (ring && !recurrent).then_some(&vec![draft]), "{name} layer {l}");
            assert_eq!(v.stored, d.stored, "{name} layer {l}: the stored weights differ");
        }
        let kinds = |cut| -> Vec<Vec<usize>> {
            layer_kinds_for(&spec, cut, &Storage::AllQ8).into_iter().map(|k| k.layers).collect()
        };
        assert_eq!(kinds(verify), kinds(decode), "{name}: verify kinds differ from decode kinds");
    }
}

#[test]
fn a_verify_step_embeds_every_row_and_the_head_computes_every_row() {
    for name in presets::names().into_iter().filter(|n| n.starts_with("tiny-")) {
        let spec = presets::resolve(name).expect("preset");
        for batch in [None, Some(2)] {
            let cut = Cut::Verify { draft: 4, batch, tp: 1, ctx: 32 };
            let rows = 5 * batch.unwrap_or(1);
            let embed = embed_source(&spec, cut, &Storage::AllQ8);
            let tok = if batch.is_some() { "toks" } else { "tok" };
            assert_eq!(decls(embed.text(), DeclKind::Input).get(tok), Some(&vec![rows]), "{name}");
            let head = lift(&parse(head_source(&spec, cut, &Storage::AllQ8).text()).expect("parses")).expect("lifts");
            let logits = head.outputs.iter().find(|o| o.name == "logits").expect("logits");
            assert_eq!(head.value(logits.value).ty.shape, [rows, spec.vocab], "{name}");
        }
    }
}

#[test]
fn a_verify_cut_that_cannot_make_a_step_is_refused_in_one_line() {
    let spec = presets::resolve("tiny-llama").expect("preset");
    let refusal = |cut: Cut| match rdu_compiler::deploy::deploy(&spec, &cut, opts(Storage::AllQ8, 0, &mut |_| {})) {
        Err(StreamedReject::Invalid(m)) => m,
        other => panic!("{cut:?}: {:?}", other.map(|_| ())),
    };
    assert_eq!(
        refusal(Cut::Verify { draft: 0, batch: None, tp: 1, ctx: 8 }),
        "a verify step checks at least 1 drafted token"
    );
    assert_eq!(
        refusal(Cut::Verify { draft: 8, batch: None, tp: 1, ctx: 8 }),
        "a verify step of 9 rows does not fit a context of 8 positions; use --draft-tokens 7 or less"
    );
    assert_eq!(refusal(Cut::Verify { draft: 2, batch: Some(0), tp: 1, ctx: 8 }), "a batch holds at least 1 sequence");
}

/// Every tiny preset: one sequence (contexts longer than the sliding windows, so rings are
/// rings), a batch of three sequences, and over two chips (dense: two chips would split the
/// tiny presets' 32-column Q8_0 blocks), each kind certified.
#[test]
fn tiny_presets_lower_the_verify_cut() {
    for name in presets::names().into_iter().filter(|n| n.starts_with("tiny-")) {
        let spec = presets::resolve(name).expect("preset");
        for (cut, storage) in [
            (Cut::Verify { draft: 3, batch: None, tp: 1, ctx: 64 }, Storage::AllQ8),
            (Cut::Verify { draft: 2, batch: Some(3), tp: 1, ctx: 64 }, Storage::AllQ8),
            (Cut::Verify { draft: 3, batch: None, tp: 2, ctx: 64 }, Storage::Dense),
            (Cut::Verify { draft: 1, batch: Some(2), tp: 2, ctx: 64 }, Storage::Dense),
        ] {
            let model = rdu_compiler::deploy::deploy(&spec, &cut, opts(storage, 7, &mut |_| {}))
                .unwrap_or_else(|e| panic!("{name} {cut:?}: {e}"));
            for k in &model.kinds {
                let c = &k.program.certificate;
                assert!(c.checks.iter().any(|c| c.starts_with("numbers")), "{name} {cut:?} {}", k.program.name);
            }
        }
    }
}

/// K = 4 over ctx 4096 (Q8_0, bf16 states, SN50): every kind certified at its real shapes —
/// every row, the cache read whole, the rings wrapped, a recurrent state resumed from a kept row.
fn verify_real(name: &str, cut: Cut) {
    let spec = presets::resolve(name).expect("preset");
    let started = std::time::Instant::now();
    let model = rdu_compiler::deploy::deploy(&spec, &cut, opts(Storage::AllQ8, 7, &mut |_| {}))
        .unwrap_or_else(|e| panic!("{name} {cut:?}: {e}"));
    let decode: Vec<Vec<usize>> =
        layer_kinds_for(&spec, Cut::Decode { ctx: 4096 }, &Storage::AllQ8).into_iter().map(|k| k.layers).collect();
    assert_eq!(model.kinds.iter().map(|k| k.layers.clone()).collect::<Vec<_>>(), decode, "{name}");
    for k in &model.kinds {
        let c = &k.program.certificate;
        let real = |c: &String| c.starts_with("numbers (") && c.contains("at real shapes");
        let over_chips = |c: &String| c.starts_with(&format!("numbers over {} chips", cut.tp()));
        assert!(c.checks.iter().any(|c| if cut.tp() > 1 { over_chips(c) } else { real(c) }), "{name}: {c:?}");
        assert!(c.max_abs_err.is_finite(), "{name} {}", k.program.name);
    }
    eprintln!("{name}: {} lowered and certified in {:.1}s", cut.describe(), started.elapsed().as_secs_f64());
}

fn verify_4(name: &str) {
    verify_real(name, Cut::Verify { draft: 4, batch: None, tp: 1, ctx: 4096 });
}

#[test]
fn llama_3_1_8b_verify_4_certifies() {
    verify_4("llama-3.1-8b");
}

#[test]
fn qwen3_8b_verify_4_certifies() {
    verify_4("qwen3-8b");
}

#[test]
fn gemma_3_270m_verify_4_certifies() {
    verify_4("gemma-3-270m");
}

#[test]
fn gemma_3_27b_it_verify_4_certifies() {
    verify_4("gemma-3-27b-it");
}

#[test]
fn deepseek_v2_verify_4_certifies() {
    verify_4("deepseek-v2");
}

#[test]
fn deepseek_v2_lite_verify_4_certifies() {
    verify_4("deepseek-v2-lite");
}

#[test]
fn qwen3_next_80b_a3b_verify_4_certifies() {
    verify_4("qwen3-next-80b-a3b");
}

#[test]
fn qwen3_5_27b_verify_4_certifies() {
    verify_4("qwen3.5-27b");
}

#[test]
fn qwen3_6_27b_verify_4_certifies() {
    verify_4("qwen3.6-27b");
}

#[test]
fn qwen3_6_35b_a3b_verify_4_certifies() {
    verify_4("qwen3.6-35b-a3b");
}

#[test]
fn llama_3_2_1b_verify_4_certifies() {
    verify_4("llama-3.2-1b");
}

#[test]
fn qwen3_0_6b_verify_4_certifies() {
    verify_4("qwen3-0.6b");
}

/// 80 layers of one kind, 0.86 B parameters a layer (Q8_0): one kind certified at its real shapes.
#[test]
fn llama_3_1_70b_verify_4_certifies() {
    let _heavy = crate::one_heavy_at_a_time();
    verify_4("llama-3.1-70b");
}

/// 126 layers of one kind, 3.2 B parameters a layer (Q8_0; about 3.7 GB resident to certify).
#[test]
fn llama_3_1_405b_verify_4_certifies() {
    let _heavy = crate::one_heavy_at_a_time();
    verify_4("llama-3.1-405b");
}

/// Over 8 chips (every chip against the unsplit verify program) and for a batch of 4 sequences,
/// each with its own draft: an attention model and a hybrid.
#[test]
fn llama_3_1_8b_verify_4_over_8_chips_certifies() {
    verify_real("llama-3.1-8b", Cut::Verify { draft: 4, batch: None, tp: 8, ctx: 4096 });
}

#[test]
fn qwen3_next_80b_a3b_verify_4_of_4_sequences_certifies() {
    verify_real("qwen3-next-80b-a3b", Cut::Verify { draft: 4, batch: Some(4), tp: 1, ctx: 4096 });
}
