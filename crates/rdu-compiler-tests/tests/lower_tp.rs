//! Tensor-parallel decode (issue 6): which widths a model admits and why not; the kinds of a
//! tp cut are the decode cut's; every kind of every real preset certifies at tp 8 (translation
//! validation of the split over 8 chips with a real all-reduce); a miscompiled split is caught;
//! the cost model charges the all-reduces over the link.

use rdu_compiler::certify::{certify_tp, CertifyFault};
use rdu_compiler::deploy::{
    layer_kinds_for, lower_decode_streamed, lower_tp_decode_streamed, rebind, LowerOptions, Storage, StreamedModel,
    StreamedReject,
};
use rdu_compiler::fit::{admits_tp, admitted_widths};
use rdu_compiler::front::lift;
use rdu_compiler::lang::parse;
use rdu_compiler::lower::cost::program_cost;
use rdu_compiler::lower::{lower, lower_split, Split};
use rdu_compiler::model::author::source_of;
use rdu_compiler::model::presets;
use rdu_compiler::model::spec::Cut;
use rdu_spatial::chip::Chip;
use rdu_spatial::program::{Lit, SpatialProgram};
use std::sync::OnceLock;

use crate::support_tp;

fn opts<'a>(storage: Storage, progress: &'a mut dyn FnMut(rdu_compiler::deploy::Progress<'_>)) -> LowerOptions<'a> {
    crate::share_references();
    LowerOptions { chip: Chip::builtin("sn50").expect("builtin chip"), storage, seed: 7, progress }
}

fn real_presets() -> Vec<&'static str> {
    presets::names().into_iter().filter(|n| !n.starts_with("tiny-")).collect()
}

#[test]
fn a_refused_width_names_the_dimension() {
    let llama = presets::resolve("llama-3.1-8b").unwrap();
    let err = admits_tp(&llama, 3, &Storage::AllQ8).unwrap_err().to_string();
    assert_eq!(err, "--tp 3 does not divide the 32 attention heads of llama-3.1-8b (layer 0)");
    // 8 kv heads: 16 and 32 chips replicate them; 24 divides neither them nor the heads.
    assert_eq!(admitted_widths(&llama, 64, &Storage::AllQ8), vec![1, 2, 4, 8, 16, 32]);
    assert!(admits_tp(&llama, 0, &Storage::AllQ8).unwrap_err().to_string().contains("at least one chip"));
    let next = presets::resolve("qwen3-next-80b-a3b").unwrap();
    let err = admits_tp(&next, 32, &Storage::AllQ8).unwrap_err().to_string();
    assert!(err.contains("16 attention heads") || err.contains("DeltaNet key heads"), "{err}");
    // DeepSeek-V2-Lite's 1408 expert columns over 8 chips are 176 each: whole Q8_0 blocks only when dense.
    let lite = presets::resolve("deepseek-v2-lite").unwrap();
    let err = admits_tp(&lite, 8, &Storage::AllQ8).unwrap_err().to_string();
    assert!(err.contains("Q8_0 blocks of Wd0") && err.contains("10944"), "{err}");
    admits_tp(&lite, 8, &Storage::Dense).expect("dense weights have no blocks to split");
    // gpt-oss-120b as stored: its experts' 2880 hidden columns are 90 MXFP4 blocks and its
    // heads 64; whole blocks in equal shares would allow gcd(90, 64) = 2 chips at most, but the
    // experts are zero-padded where a chip would split blocks (`expert_width`), so every width
    // dividing the heads is admitted, as with bf16 experts. Padding cannot help a width that
    // does not divide the heads, nor experts stored Q8_0 (never padded).
    let oss = presets::resolve("gpt-oss-120b").unwrap();
    let stored = rdu_compiler::model::quantization::declared_storage(&oss).expect("MXFP4 declared");
    assert_eq!(admitted_widths(&oss, 64, &stored), vec![1, 2, 4, 8, 16, 32, 64]);
    let err = admits_tp(&oss, 3, &stored).unwrap_err().to_string();
    assert_eq!(err, "--tp 3 does not divide the 64 attention heads of gpt-oss-120b (layer 0)");
    let err = admits_tp(&oss, 8, &Storage::AllQ8).unwrap_err().to_string();
    assert!(err.contains("Q8_0 blocks of Wed0: its 2880 input columns over 8 chips are 360 each"), "{err}");
    assert_eq!(admitted_widths(&oss, 64, &Storage::Dense), vec![1, 2, 4, 8, 16, 32, 64]);
    let err = lower_tp_decode_streamed(&llama, 3, 64, opts(Storage::AllQ8, &mut |_| {})).unwrap_err();
    assert!(matches!(&err, StreamedReject::Invalid(m) if m.contains("32 attention heads")), "{err}");
}

#[test]
fn tp_kinds_are_the_decode_kinds_on_every_real_preset() {
    for name in real_presets() {
        let spec = presets::resolve(name).unwrap();
        let decode: Vec<Vec<usize>> =
            layer_kinds_for(&spec, Cut::Decode { ctx: 4096 }, &Storage::AllQ8).into_iter().map(|k| k.layers).collect();
        let widths = admitted_widths(&spec, 16, &Storage::AllQ8);
        assert!(widths.len() > 1, "{name} admits no width but 1");
        for tp in widths {
            let kinds: Vec<Vec<usize>> = layer_kinds_for(&spec, Cut::Tp { tp, ctx: 4096 }, &Storage::AllQ8)
                .into_iter()
                .map(|k| k.layers)
                .collect();
            assert_eq!(kinds, decode, "{name} at tp {tp}: the kinds differ from decode's");
        }
    }
}

/// Every kind of `name` certified over 8 chips at its real shapes (decode, ctx 4096, SN50),
/// Q8_0 where 8 chips keep whole blocks, else dense.
fn lower_real_tp8(name: &str) {
    let spec = presets::resolve(name).expect("preset");
    let storage = if admits_tp(&spec, 8, &Storage::AllQ8).is_ok() { Storage::AllQ8 } else { Storage::Dense };
    if let Err(refusal) = admits_tp(&spec, 8, &storage) {
        // Refused for a dimension: it must say which.
        assert!(refusal.to_string().contains("does not divide"), "{name}: {refusal}");
        return;
    }
    let fresh;
    let model = if name == LLAMA {
        assert!(storage == Storage::AllQ8, "{LLAMA} keeps whole Q8_0 blocks over 8 chips");
        llama_tp8_decode()
    } else {
        fresh = lower_tp_decode_streamed(&spec, 8, 4096, opts(storage.clone(), &mut |_| {}))
            .unwrap_or_else(|e| panic!("{name} tp 8: {e}"));
        &fresh
    };
    let decode: Vec<Vec<usize>> =
        layer_kinds_for(&spec, Cut::Decode { ctx: 4096 }, &storage).into_iter().map(|k| k.layers).collect();
    assert_eq!(model.kinds.iter().map(|k| k.layers.clone()).collect::<Vec<_>>(), decode, "{name}");
    for k in &model.kinds {
        let c = &k.program.certificate;
        for check in ["slices", "partial sums", "numbers over 8 chips"] {
            assert!(c.checks.iter().any(|x| x.starts_with(check)), "{name} {}: no `{check}` check", k.program.name);
        }
        assert!(c.max_abs_err.is_finite(), "{name} {}", k.program.name);
        let tp = k.program.spatial.tp.as_ref().expect("a tp layout");
        assert_eq!(
            (tp.chips, tp.all_reduce.len()),
            (8, support_tp::all_reduces(&spec, 8)),
            "{name} {}",
            k.program.name
        );
        assert!(k.program.cost.link_bytes > 0, "{name}: the all-reduces cost no link traffic");
    }
    let step = model.step_estimate();
    assert!(step.roofline_fraction > 0.0 && step.roofline_fraction <= 1.0, "{name}: {step:?}");
}

const LLAMA: &str = "llama-3.1-8b";

/// llama-3.1-8b's decode over 8 chips (ctx 4096, Q8_0, SN50, seed 7), lowered and certified
/// once for the two tests that read it: its own certification at tp 8, and the prefill over 8
/// chips whose states must be this cut's.
fn llama_tp8_decode() -> &'static StreamedModel {
    static MODEL: OnceLock<StreamedModel> = OnceLock::new();
    MODEL.get_or_init(|| {
        let spec = presets::resolve(LLAMA).expect("preset");
        lower_tp_decode_streamed(&spec, 8, 4096, opts(Storage::AllQ8, &mut |_| {}))
            .unwrap_or_else(|e| panic!("{LLAMA} tp 8: {e}"))
    })
}

#[test]
fn llama_3_1_8b_certifies_at_tp_8() {
    lower_real_tp8(LLAMA);
}

#[test]
fn qwen3_8b_certifies_at_tp_8() {
    lower_real_tp8("qwen3-8b");
}

#[test]
fn qwen3_next_80b_a3b_certifies_at_tp_8() {
    lower_real_tp8("qwen3-next-80b-a3b");
}

#[test]
fn qwen3_5_27b_certifies_at_tp_8() {
    lower_real_tp8("qwen3.5-27b");
}

#[test]
fn qwen3_6_35b_a3b_certifies_at_tp_8() {
    lower_real_tp8("qwen3.6-35b-a3b");
}

#[test]
fn gemma_3_27b_it_certifies_at_tp_8() {
    lower_real_tp8("gemma-3-27b-it");
}

#[test]
fn gemma_3_270m_is_refused_at_tp_8() {
    lower_real_tp8("gemma-3-270m");
}

#[test]
fn deepseek_v2_certifies_at_tp_8() {
    lower_real_tp8("deepseek-v2");
}

#[test]
fn deepseek_v2_lite_certifies_at_tp_8() {
    lower_real_tp8("deepseek-v2-lite");
}

#[test]
fn deepseek_v3_certifies_at_tp_8() {
    lower_real_tp8("deepseek-v3");
}

#[test]
fn deepseek_v3_prefill_over_8_chips_certifies() {
    prefill_real_tp8("deepseek-v3");
}

#[test]
fn kimi_k2_certifies_at_tp_8() {
    lower_real_tp8("kimi-k2");
}

#[test]
fn kimi_k2_prefill_over_8_chips_certifies() {
    prefill_real_tp8("kimi-k2");
}

#[test]
fn glm_4_5_certifies_at_tp_8() {
    lower_real_tp8("glm-4.5");
}

#[test]
fn glm_4_5_prefill_over_8_chips_certifies() {
    prefill_real_tp8("glm-4.5");
}

#[test]
fn glm_4_5_air_certifies_at_tp_8() {
    lower_real_tp8("glm-4.5-air");
}

#[test]
fn glm_4_5_air_prefill_over_8_chips_certifies() {
    prefill_real_tp8("glm-4.5-air");
}

#[test]
fn minimax_m2_certifies_at_tp_8() {
    lower_real_tp8("minimax-m2");
}

#[test]
fn minimax_m2_prefill_over_8_chips_certifies() {
    prefill_real_tp8("minimax-m2");
}

#[test]
fn gpt_oss_120b_certifies_at_tp_8() {
    lower_real_tp8("gpt-oss-120b");
}

#[test]
fn gpt_oss_20b_certifies_at_tp_8() {
    lower_real_tp8("gpt-oss-20b");
}

#[test]
fn mixtral_8x7b_certifies_at_tp_8() {
    lower_real_tp8("mixtral-8x7b");
}

#[test]
fn mistral_7b_certifies_at_tp_8() {
    lower_real_tp8("mistral-7b");
}

/// Layer 0 of `name` at `tp` chips: the lowered per-chip program and graph, and the unsplit
/// decode program and graph (names as in layer 0).
fn split_kind(
    name: &str,
    tp: usize,
) -> (SpatialProgram, rdu_compiler::graph::Graph, SpatialProgram, rdu_compiler::graph::Graph) {
    let spec = presets::resolve(name).expect("preset");
    let storage = if admits_tp(&spec, tp, &Storage::AllQ8).is_ok() { Storage::AllQ8 } else { Storage::Dense };
    split_kind_stored(name, tp, &storage)
}

/// [`split_kind`] with the weights stored as `storage`.
fn split_kind_stored(
    name: &str,
    tp: usize,
    storage: &Storage,
) -> (SpatialProgram, rdu_compiler::graph::Graph, SpatialProgram, rdu_compiler::graph::Graph) {
    let spec = presets::resolve(name).expect("preset");
    let chip = Chip::builtin("sn50").unwrap();
    let storage = storage.clone();
    admits_tp(&spec, tp, &storage).expect("an admitted width");
    let src = source_of(&spec, 0, Cut::Tp { tp, ctx: 64 }, &storage);
    let program = parse(src.text()).unwrap();
    let graph = lift(&program).unwrap();
    let split = lower_split(
        "kind",
        &program,
        &graph,
        &src.stored,
        Split { chips: tp, slices: &src.slices },
        &chip,
        &mut |_, _| {},
    );
    let whole = source_of(&spec, 0, Cut::Decode { ctx: 64 }, &storage);
    let whole_program = parse(whole.text()).unwrap();
    let whole_graph = lift(&whole_program).unwrap();
    let unsplit = lower("kind", &whole_program, &whole_graph, &whole.stored, &chip, &mut |_, _| {});
    (split, graph, unsplit, whole_graph)
}

#[test]
fn a_miscompiled_split_is_caught() {
    let chip = Chip::builtin("sn50").unwrap();
    for name in ["tiny-llama", "tiny-qwen3-next", "tiny-deepseek-v2"] {
        let (program, graph, unsplit, whole) = split_kind(name, 2);
        certify_tp(&program, &graph, &unsplit, &whole, &chip, 3).unwrap_or_else(|e| panic!("{name}: {e}"));

        // Two chips swap their heads of the first weight split by heads: each computes another
        // chip's share, which only the numbers show.
        let heads = program.tp.as_ref().unwrap().splits.iter().position(|s| s.axis == 0).expect("a head split");
        let mut swapped = program.clone();
        swapped.tp.as_mut().unwrap().splits[heads].parts.swap(0, 1);
        let fault = certify_tp(&swapped, &graph, &unsplit, &whole, &chip, 3).expect_err("swapped slices");
        assert!(matches!(fault, CertifyFault::Numbers { .. }), "{name}: {fault}");

        // A weight that meets a chip's shard of its input, its columns swapped between chips:
        // each chip would multiply its shard by another's columns.
        let split = program.tp.as_ref().unwrap().splits.iter().position(|s| s.tensor.starts_with("Wqa"));
        if let Some(i) = split {
            let mut crossed = program.clone();
            crossed.tp.as_mut().unwrap().splits[i].parts.swap(0, 1);
            let fault = certify_tp(&crossed, &graph, &unsplit, &whole, &chip, 3).expect_err("crossed columns");
            assert!(matches!(&fault, CertifyFault::Structure(m) if m.contains("split alike")), "{name}: {fault}");
        }
        assert_eq!(split.is_some(), name == "tiny-deepseek-v2", "{name}: which programs shard");

        // Both chips load the same rows: the slices no longer partition the tensor.
        let mut overlap = program.clone();
        let s = &mut overlap.tp.as_mut().unwrap().splits[0];
        s.parts[1] = s.parts[0].clone();
        let fault = certify_tp(&overlap, &graph, &unsplit, &whole, &chip, 3).expect_err("overlapping slices");
        assert!(
            matches!(&fault, CertifyFault::Structure(m) if m.contains("do not partition") || m.contains("stop at")),
            "{name}: {fault}"
        );

        // An all-reduce dropped: the partial sum reaches the residual add.
        let mut dropped = program.clone();
        let op = dropped
            .sections
            .iter_mut()
            .flat_map(|s| &mut s.stages)
            .flat_map(|st| &mut st.ops)
            .find(|op| op.op == rdu_spatial::Op::AllReduce)
            .expect("an all_reduce");
        op.op = rdu_spatial::Op::Scale;
        op.attrs = vec![("by".into(), Lit::Float(1.0))];
        let fault = certify_tp(&dropped, &graph, &unsplit, &whole, &chip, 3).expect_err("no all-reduce");
        // The exact kernel check sees the statement is no longer the source's; the partial-sum
        // check would see the sum escape.
        let caught = |m: &str| m.contains("partial sum") || m.contains("is `all_reduce`");
        assert!(matches!(&fault, CertifyFault::Structure(m) if caught(m)), "{name}: {fault}");
    }
}

/// The routed experts of every layer of `spec` stored MXFP4 (as gpt-oss's checkpoints store them).
fn mxfp4_experts(spec: &rdu_compiler::model::spec::ModelSpec) -> Storage {
    let names = (0..spec.n_layers()).flat_map(|l| ["Weg", "Weu", "Wed"].map(|w| format!("{w}{l}")));
    Storage::Exactly(names.map(|n| (n, rdu_spatial::program::Storage::Mxfp4)).collect())
}

/// tiny-gpt-oss's 64 expert columns stored MXFP4 (2 blocks) over 4 chips: 16 each would split
/// blocks, so they are zero-padded to 128 (one block a chip; the last two chips hold only
/// zeros). The padded split certifies against the unpadded program; a split whose padding is
/// not declared, declared for other values, or moved to other chips is caught.
#[test]
fn padded_mxfp4_experts_certify_and_a_miscompiled_pad_is_caught() {
    let chip = Chip::builtin("sn50").unwrap();
    let spec = presets::resolve("tiny-gpt-oss").unwrap();
    let storage = mxfp4_experts(&spec);
    assert_eq!(admitted_widths(&spec, 4, &storage), vec![1, 2, 4]);
    let (program, graph, unsplit, whole) = split_kind_stored("tiny-gpt-oss", 4, &storage);
    let wed = program.decl("Wed0").expect("Wed0");
    assert_eq!((wed.shape.clone(), wed.storage), (vec![8, 64, 32], rdu_spatial::program::Storage::Mxfp4));
    assert_eq!(unsplit.decl("Wed0").expect("Wed0").shape, vec![8, 64, 64], "the unsplit program as stored");
    let c = certify_tp(&program, &graph, &unsplit, &whole, &chip, 3).expect("the padded split certifies");
    let padded = c.checks.iter().find(|x| x.starts_with("zero-padded")).expect("a zero-padded check");
    assert!(padded.contains("`Wed0` 64 to 128") && padded.contains("`beg0` 64 to 128"), "{padded}");
    assert!(c.checks.iter().any(|x| x.starts_with("numbers over 4 chips")), "{:?}", c.checks);
    let split = |p: &SpatialProgram, name: &str| p.tp.as_ref().unwrap().splits.iter().position(|s| s.tensor == name);
    let edited = |edit: &dyn Fn(&mut rdu_spatial::program::TpSplit)| {
        let mut p = program.clone();
        let i = split(&p, "Wed0").expect("Wed0 is split");
        edit(&mut p.tp.as_mut().unwrap().splits[i]);
        certify_tp(&p, &graph, &unsplit, &whole, &chip, 3).expect_err("a miscompiled pad")
    };
    let fault = edited(&|s| s.stored = None);
    assert!(matches!(&fault, CertifyFault::Structure(m) if m.contains("outside 0..64")), "{fault}");
    let fault = edited(&|s| s.stored = Some(32));
    assert!(matches!(&fault, CertifyFault::Structure(m) if m.contains("padded from 32 to 128")), "{fault}");
    // The down projection's real columns on the last chips, its zeros on the first: each chip
    // multiplies its gated unit by another chip's columns, which only the numbers show.
    let fault = edited(&|s| s.parts.reverse());
    assert!(matches!(fault, CertifyFault::Numbers { .. }), "{fault}");
}

/// gpt-oss-120b with its experts as the checkpoint stores them (MXFP4) over 8 chips at its real
/// shapes: 2880 columns zero-padded to 3072 (12 blocks a chip), every kind certified against
/// the unpadded program, and the chips charged the padded bytes they read.
#[test]
fn gpt_oss_120b_certifies_at_tp_8_with_its_mxfp4_experts_as_stored() {
    let spec = presets::resolve("gpt-oss-120b").unwrap();
    let stored = rdu_compiler::model::quantization::declared_storage(&spec).expect("MXFP4 declared");
    let model = lower_tp_decode_streamed(&spec, 8, 4096, opts(stored, &mut |_| {})).expect("tp 8 lowers");
    assert_eq!(model.kinds.len(), 2, "sliding and full attention");
    for k in &model.kinds {
        let c = &k.program.certificate;
        for check in ["slices", "zero-padded: `Weg0` 2880 to 3072", "partial sums", "numbers over 8 chips"] {
            assert!(
                c.checks.iter().any(|x| x.starts_with(check)),
                "{}: no `{check}` check in {:?}",
                k.program.name,
                c.checks
            );
        }
        let wed = k.program.spatial.decl("Wed0").expect("Wed0");
        assert_eq!((wed.shape.clone(), wed.storage), (vec![128, 2880, 384], rdu_spatial::program::Storage::Mxfp4));
        let split = k.program.spatial.tp.as_ref().unwrap().splits.iter().find(|s| s.tensor == "Wed0").unwrap();
        assert_eq!((split.stored, split.parts[7].clone()), (Some(2880), vec![(2688, 3072)]));
    }
    let step = model.step_estimate();
    assert!(step.roofline_fraction > 0.0 && step.roofline_fraction <= 1.0, "{step:?}");
}

#[test]
fn the_link_carries_two_ring_all_reduces_per_layer() {
    let chip = Chip::builtin("sn50").unwrap();
    let spec = presets::resolve("tiny-llama").unwrap();
    for tp in [2usize, 4] {
        let (program, ..) = split_kind("tiny-llama", tp);
        let cost = program_cost(&program, &chip).unwrap();
        // Ring all-reduce: each chip sends 2(tp−1)/tp of the f32 hidden row, twice a layer.
        let per = (spec.d_model * 4 * 2 * (tp - 1) / tp) as u64;
        assert_eq!(cost.link_bytes, 2 * per, "tp {tp}");
        let one = lower_decode_streamed(&spec, 64, opts(Storage::AllQ8, &mut |_| {})).unwrap();
        assert_eq!(one.kinds[0].program.cost.link_bytes, 0);
        // Each chip streams its share of the layer's weights.
        assert!(cost.hbm_bytes < one.kinds[0].program.cost.hbm_bytes);
    }
}

#[test]
fn tp_programs_and_bundles_round_trip_and_are_deterministic() {
    let spec = presets::resolve("tiny-qwen3.5").unwrap();
    let lowered = || lower_tp_decode_streamed(&spec, 2, 64, opts(Storage::AllQ8, &mut |_| {})).expect("lowers");
    let (a, b) = (lowered(), lowered());
    let mut texts = String::new();
    for k in &a.kinds {
        let text = rdu_spatial::text::print(&k.program.spatial);
        assert_eq!(rdu_spatial::text::parse(&text).expect("parses"), k.program.spatial);
        texts.push_str(&text);
    }
    // The fused q | k | v projection of a DeltaNet layer: three runs per chip.
    let wqkv = texts.lines().find(|l| l.starts_with("split Wqkv0 axis=0")).expect("Wqkv0 is split");
    assert_eq!(wqkv.matches("..").count(), 6, "{wqkv}");
    let dir = tempfile::tempdir().unwrap();
    a.bundle().unwrap().write(&dir.path().join("a"), false).unwrap();
    b.bundle().unwrap().write(&dir.path().join("b"), false).unwrap();
    let opened = rdu_spatial::bundle::Bundle::open(&dir.path().join("a")).expect("a valid bundle");
    let m = &opened.manifest;
    assert_eq!(m.cut.tp, Some(2));
    // Every layer's split weights and states carry two chips' slices; the replicated norms none.
    for l in 0..spec.n_layers() {
        let an = &m.tensors[&format!("an{l}")];
        assert!(an.slices.is_empty());
        let wo = &m.tensors[&format!("Wo{l}")];
        assert_eq!(wo.slices.len(), 2, "Wo{l}");
    }
    let delta_state = m.states.iter().find(|s| s.name == rebind("Sd0", 0, 0)).expect("a DeltaNet state");
    assert_eq!(delta_state.slices.len(), 2);
    for f in ["manifest.json", "programs/deltanet_dense.spatial"] {
        assert_eq!(
            std::fs::read(dir.path().join("a").join(f)).unwrap(),
            std::fs::read(dir.path().join("b").join(f)).unwrap(),
            "{f} differs between two lowerings"
        );
    }
}

#[test]
fn every_tiny_preset_certifies_at_every_admitted_width_up_to_4() {
    for name in presets::names().into_iter().filter(|n| n.starts_with("tiny-")) {
        let spec = presets::resolve(name).unwrap();
        let widths = admitted_widths(&spec, 4, &Storage::Dense);
        assert!(widths.contains(&2), "{name} admits no split at all: {widths:?}");
        for tp in widths.into_iter().filter(|&tp| tp > 1) {
            let model = lower_tp_decode_streamed(&spec, tp, 16, opts(Storage::Dense, &mut |_| {}))
                .unwrap_or_else(|e| panic!("{name} tp {tp}: {e}"));
            for k in &model.kinds {
                let checks = &k.program.certificate.checks;
                assert!(
                    checks.iter().any(|c| c.starts_with(&format!("numbers over {tp} chips"))),
                    "{name}: {checks:?}"
                );
            }
        }
    }
}

/// Prefill over 8 chips at real shapes: llama-3.1-8b's chunk of 512 rows against 4096
/// positions, every kind and the head certified over the chips against the unsplit prefill
/// programs, the states the tp decode cut's (same names and per-chip slices), so a tp decode
/// bundle continues from them.
#[test]
fn llama_3_1_8b_prefill_over_8_chips_certifies_at_the_real_chunk() {
    use rdu_compiler::deploy::lower_prefill_tp_streamed;
    let _heavy = crate::one_heavy_at_a_time();
    let spec = presets::resolve(LLAMA).unwrap();
    let model = lower_prefill_tp_streamed(&spec, 512, 8, 4096, opts(Storage::AllQ8, &mut |_| {})).unwrap();
    for k in &model.kinds {
        let checks = k.program.certificate.checks.join(", ");
        assert!(checks.contains("numbers over 8 chips"), "{}: {checks}", k.program.name);
    }
    assert!(model.head.certificate.checks.iter().any(|c| c.starts_with("numbers over 8 chips")));
    let states = |m: &StreamedModel| m.bundle().unwrap().manifest.states;
    assert_eq!(states(&model), states(llama_tp8_decode()), "the tp decode cut's states, sliced alike");
    let step = model.step_estimate();
    assert!(step.model_flop_utilisation > 0.0 && step.model_flop_utilisation < 1.0, "{step:?}");
}

/// Prefill of 512 rows over 8 chips at real shapes (ctx 4096, SN50; Q8_0 where 8 chips keep
/// whole blocks, else dense): every kind and the head certified over the chips against the
/// unsplit prefill programs, the kinds the decode cut's.
fn prefill_real_tp8(name: &str) {
    use rdu_compiler::deploy::lower_prefill_tp_streamed;
    let _heavy = crate::one_heavy_at_a_time();
    let spec = presets::resolve(name).expect("preset");
    let storage = if admits_tp(&spec, 8, &Storage::AllQ8).is_ok() { Storage::AllQ8 } else { Storage::Dense };
    admits_tp(&spec, 8, &storage).unwrap_or_else(|e| panic!("{name}: {e}"));
    let model = lower_prefill_tp_streamed(&spec, 512, 8, 4096, opts(storage.clone(), &mut |_| {}))
        .unwrap_or_else(|e| panic!("{name} prefill over 8 chips: {e}"));
    let decode: Vec<Vec<usize>> =
        layer_kinds_for(&spec, Cut::Decode { ctx: 4096 }, &storage).into_iter().map(|k| k.layers).collect();
    assert_eq!(model.kinds.iter().map(|k| k.layers.clone()).collect::<Vec<_>>(), decode, "{name}");
    for k in &model.kinds {
        let checks = k.program.certificate.checks.join(", ");
        assert!(checks.contains("numbers over 8 chips"), "{name} {}: {checks}", k.program.name);
    }
    assert!(model.head.certificate.checks.iter().any(|c| c.starts_with("numbers over 8 chips")), "{name}");
}

/// The DeepSeek-V3, Kimi K2, GLM-4.5 and MiniMax-M2 presets admit 8 chips (GLM-4.5-Air's
/// 10944 dense and 1408 expert columns keep whole Q8_0 blocks over 8 chips only dense), so
/// their tp-8 tests certify rather than accept a refusal.
#[test]
fn the_deepseek_v3_router_presets_admit_8_chips() {
    for name in ["deepseek-v3", "kimi-k2", "glm-4.5", "minimax-m2"] {
        let spec = presets::resolve(name).unwrap();
        admits_tp(&spec, 8, &Storage::AllQ8).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let air = presets::resolve("glm-4.5-air").unwrap();
    let err = admits_tp(&air, 8, &Storage::AllQ8).unwrap_err().to_string();
    assert!(err.contains("Q8_0 blocks") && err.contains("10944"), "{err}");
    admits_tp(&air, 8, &Storage::Dense).expect("dense weights have no blocks to split");
}

/// Every tiny preset that admits two chips lowers its prefill over them, certified.
#[test]
fn tiny_presets_prefill_over_two_chips() {
    use rdu_compiler::deploy::lower_prefill_tp_streamed;
    for name in presets::names().into_iter().filter(|n| n.starts_with("tiny-")) {
        let spec = presets::resolve(name).unwrap();
        if admits_tp(&spec, 2, &Storage::Dense).is_err() {
            continue;
        }
        let model = lower_prefill_tp_streamed(&spec, 5, 2, 64, opts(Storage::Dense, &mut |_| {}))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for k in &model.kinds {
            let checks = k.program.certificate.checks.join(", ");
            assert!(checks.contains("numbers over 2 chips"), "{name} {}: {checks}", k.program.name);
        }
    }
}

/// DeepSeek-V3 as its checkpoint stores it (what `rdu lower deepseek-v3 --cut tp --tp 16` deploys:
/// `--storage auto` follows its fp8 `quantization_config`) over 16 chips: every kind certifies
/// over 16 chips, the bundle stores every layer matrix `fp8` in 128 × 128 blocks and nothing
/// else, and it re-certifies from its files (`rdu verify`).
#[test]
fn deepseek_v3_fp8_as_declared_certifies_at_tp_16() {
    use rdu_spatial::manifest::TensorStorage;
    let bundle = certified_as_declared_at_tp_16("deepseek-v3");
    // q_a and kv_a split along their 7168 input columns: 448 a chip, 3.5 blocks, so a chip
    // holds 128 × 64 blocks, each with the scale of the 128 × 128 block it lies in.
    let cut = |name: &str| ["Wqa", "Wkva"].contains(&name.trim_end_matches(|c: char| c.is_ascii_digit()));
    let fp8: Vec<&String> = (bundle.manifest.tensors.iter())
        .filter(|(_, t)| t.storage == TensorStorage::Fp8)
        .inspect(|(name, t)| match cut(name) {
            true => assert_eq!((t.block, t.stored_block, t.slices.len()), (Some([128, 64]), Some([128, 128]), 16)),
            false => assert_eq!((t.block, t.stored_block), (Some([128, 128]), None), "{name}"),
        })
        .map(|(name, _)| name)
        .collect();
    assert_eq!(fp8.len(), 8 * 3 + 11 * 58, "q_a, q_b, kv_a, kv_b, o and the MLP or the experts of each layer");
    assert!(fp8.iter().all(|n| !n.starts_with("Wr") && !n.starts_with("bsel") && *n != "E" && *n != "Wout"));
}

/// The preset `name` lowered over 16 chips with the storage its `quantization_config` declares:
/// every kind certified over the 16 chips, and its bundle re-certified from its files.
fn certified_as_declared_at_tp_16(name: &str) -> rdu_spatial::bundle::Bundle {
    let spec = presets::resolve(name).expect("preset");
    let storage = rdu_compiler::model::quantization::declared_storage(&spec).expect("declared");
    let model = lower_tp_decode_streamed(&spec, 16, 4096, opts(storage, &mut |_| {})).expect("tp 16");
    for k in &model.kinds {
        let c = &k.program.certificate;
        assert!(c.checks.iter().any(|x| x.starts_with("numbers over 16 chips")), "{}: {:?}", k.program.name, c.checks);
    }
    let bundle = model.bundle().expect("bundle");
    let chip = Chip::builtin("sn50").expect("chip");
    rdu_compiler::verify::verify_bundle(&bundle, &chip, &mut |_| {}).expect("the bundle re-certifies");
    bundle
}

/// GLM-4.5-FP8 as its checkpoint stores it (`rdu lower glm-4.5-fp8 --cut tp --tp 16`: the preset's
/// compressed-tensors `quantization_config`, one scale per output row) over 16 chips: every kind
/// certifies over 16 chips at its real shapes, the bundle stores every layer matrix `fp8` in
/// `[1, in]` blocks — a row-parallel chip's share `[1, in/16]` pieces of its rows — and neither
/// the routers, the embedding nor the head, and it re-certifies from its files.
#[test]
fn glm_4_5_fp8_in_compressed_tensors_layout_certifies_at_tp_16() {
    use rdu_spatial::manifest::TensorStorage;
    let bundle = certified_as_declared_at_tp_16("glm-4.5-fp8");
    let fp8: Vec<&String> = (bundle.manifest.tensors.iter())
        .filter(|(_, t)| t.storage == TensorStorage::Fp8)
        .inspect(|(name, t)| {
            let cols = *t.shape.last().expect("a matrix");
            let base = name.trim_end_matches(|c: char| c.is_ascii_digit());
            let want = match base {
                "Wo" | "Wd" | "Wed" | "Wsd" => (Some([1, cols / 16]), Some([1, cols])),
                _ => (Some([1, cols]), None),
            };
            assert_eq!((t.block, t.stored_block), want, "{name}");
        })
        .map(|(name, _)| name)
        .collect();
    assert_eq!(fp8.len(), 7 * 3 + 10 * 89, "q, k, v, o and the MLP or the experts of each layer");
    assert!(fp8.iter().all(|n| !n.starts_with("Wr") && *n != "E" && *n != "Wout"));
}

/// An FP8 split whose chip shares cut the checkpoint's 128 × 128 blocks is admitted, each
/// chip holding finer blocks: Kimi K2 over 32 chips (its 2048 expert and shared-expert
/// columns are 64 a chip: 128 × 64 blocks of the down projections, 64 × 128 of gate and up)
/// and GLM-4.5 stored FP8 over 16 (1536 expert columns, 96 a chip: 128 × 32 blocks); and
/// GLM-4.5-FP8's one scale a row (compressed-tensors' `channel`: `[1, in]` blocks) over 16, a
/// row-parallel share holding `[1, in/16]` pieces of its rows, a column-parallel one whole rows.
#[test]
fn fp8_shares_that_cut_blocks_are_admitted_in_finer_blocks() {
    use rdu_compiler::model::spec::{Declared, Quantization};
    use rdu_compiler::model::storage::Format;
    let kimi = presets::resolve("kimi-k2").expect("preset");
    let mut glm = presets::resolve("glm-4.5").expect("preset");
    glm.quantization = Some(Quantization::all(Declared::Fp8Block { rows: 128, cols: 128 }));
    let glm_fp8 = presets::resolve("glm-4.5-fp8").expect("preset");
    for (spec, tp, want) in [
        (&kimi, 32, [("Wed3", [128, 64]), ("Weg3", [64, 128]), ("Wsd3", [128, 64])]),
        (&glm, 16, [("Wed3", [128, 32]), ("Weg3", [32, 128]), ("Wsd3", [128, 32])]),
        (&glm_fp8, 16, [("Wed3", [1, 96]), ("Weg3", [1, 5120]), ("Wo3", [1, 768])]),
    ] {
        let storage = rdu_compiler::model::quantization::declared_storage(spec).expect("fp8 declared");
        admits_tp(spec, tp, &storage).unwrap_or_else(|e| panic!("{} at tp {tp}: {e}", spec.name));
        let source = source_of(spec, 3, Cut::Tp { tp, ctx: 4096 }, &storage);
        for (name, [rows, cols]) in want {
            let got = source.stored.get(name).copied();
            assert_eq!(got, Some(Format::Fp8 { rows, cols }), "{} at tp {tp}: {name}", spec.name);
        }
    }
}
