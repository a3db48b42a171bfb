//! Tensor-parallel decode against tensor-parallel width 1 and against transformers: every
//! fixture model lowered for `--tp 2` and `--tp 4` where it admits the width (each kind
//! certified over its chips), written as a bundle, read back by the host with the HF
//! checkpoint and run on chip threads with a real all-reduce — token-by-token decode logits
//! and the 8 generated positions within 1e-4 of the one-chip decode bundle's and of
//! `tests/data/fixtures/hf/*`. A width a fixture does not admit is refused naming the dimension.

use crate::common;
#[path = "../../rdu-compiler-tests/tests/support/tp.rs"]
mod support_tp;

use common::f32_states;
use rdu_compiler::deploy::{
    lower_decode_streamed, lower_tp_decode_streamed, LowerOptions, Storage, StreamedModel, StreamedReject,
};
use rdu_compiler::fit::admits_tp;
use rdu_compiler::model::config::from_config_path;
use rdu_compiler::model::spec::ModelSpec;
use rdu_host::{Host, WeightsSource};
use rdu_spatial::chip::Chip;
use rdu_spatial::manifest::chip_ranges;
use rdu_spatial::tensor_parallel::take;
use rdu_testkit::{fixtures, npy, Tolerance};
use std::path::Path;

fn opts(progress: &mut dyn FnMut(rdu_compiler::deploy::Progress<'_>)) -> LowerOptions<'_> {
    LowerOptions { chip: Chip::builtin("sn50").expect("chip"), storage: Storage::Dense, seed: 0, progress }
}

/// Every logits row of the prompt decoded token by token, then of the fixture's generated
/// tokens fed back (teacher-forced, so that every width sees the same positions).
fn decode_rows(
    model: &StreamedModel,
    dir: &Path,
    tokens: &[u32],
    gen_ids: &[u32],
    out: &Path,
) -> (Vec<Vec<f32>>, Host) {
    model.bundle().expect("bundle").write(out, false).expect("write");
    let mut host = Host::load(out, &WeightsSource::Hf(dir.to_path_buf()), &mut |_, _, _| {}).expect("load");
    let feed: Vec<u32> = tokens.iter().chain(&gen_ids[..gen_ids.len() - 1]).copied().collect();
    let rows = feed
        .iter()
        .enumerate()
        .map(|(pos, &tok)| host.step(&[tok], pos).expect("step").logits.as_f32().expect("f32").to_vec())
        .collect();
    (rows, host)
}

fn check(arch: &str) {
    let dir = fixtures::hf(arch);
    let spec: ModelSpec = f32_states(from_config_path(&dir.join("config.json")).expect("config"));
    let tokens = npy::ids(dir.join("tokens.npy"));
    let gen_ids = npy::ids(dir.join("gen_ids.npy"));
    let vocab = spec.vocab;
    let ctx = tokens.len() + gen_ids.len();
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut want = npy::f32(dir.join("logits_step.npy"));
    want.extend(npy::f32(dir.join("gen_logits.npy"))[vocab..].iter().copied());

    let one = lower_decode_streamed(&spec, ctx, opts(&mut |_| {})).unwrap_or_else(|e| panic!("{arch}: {e}"));
    let (one_chip, one_host) = decode_rows(&one, &dir, &tokens, &gen_ids, &tmp.path().join("tp1"));
    let mut widths = 0;
    for tp in [2, 4] {
        if let Err(refusal) = admits_tp(&spec, tp, &Storage::Dense) {
            // Refused up front, naming the dimension, and the lowering says the same.
            let line = refusal.to_string();
            assert!(line.starts_with(&format!("--tp {tp} ")) && !line.contains('\n'), "{arch}: {line}");
            let err = lower_tp_decode_streamed(&spec, tp, ctx, opts(&mut |_| {})).expect_err("refused");
            assert!(matches!(&err, StreamedReject::Invalid(m) if *m == line), "{arch}: {err}");
            continue;
        }
        widths += 1;
        let model =
            lower_tp_decode_streamed(&spec, tp, ctx, opts(&mut |_| {})).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert_eq!(model.kinds.len(), one.kinds.len(), "{arch} tp {tp}: kinds differ from decode");
        for (k, d) in model.kinds.iter().zip(&one.kinds) {
            assert_eq!(k.layers, d.layers, "{arch} tp {tp}: kind {} groups other layers", k.program.name);
            // MLA's down-projections all-reduced too where each chip's columns hold whole
            // Q8_0 blocks (64 over 2 chips; not over 4).
            let want = support_tp::all_reduces(&spec, tp);
            let got = k.program.spatial.tp.as_ref().map(|t| (t.chips as usize, t.all_reduce.len()));
            assert_eq!(got, Some((tp, want)), "{arch} tp {tp} kind {}", k.program.name);
        }
        let (rows, host) = decode_rows(&model, &dir, &tokens, &gen_ids, &tmp.path().join(format!("tp{tp}")));
        for (pos, row) in rows.iter().enumerate() {
            Tolerance::F32.assert(&format!("{arch} tp {tp} vs tp 1 at {pos}"), row, &one_chip[pos]);
            Tolerance::F32.assert(
                &format!("{arch} tp {tp} vs transformers at {pos}"),
                row,
                &want[pos * vocab..(pos + 1) * vocab],
            );
        }
        // Every chip's carried state is its slice of the one-chip state (a replicated one whole).
        assert_eq!(host.chips(), tp);
        for entry in &host.manifest().states {
            let whole = one_host.state(&entry.name).expect("one-chip state");
            for c in 0..tp {
                let got = host.chip_state(c, &entry.name).expect("chip state");
                let want = match chip_ranges(&entry.slices, c) {
                    Some((axis, ranges)) => take(&whole.shape, whole.as_f32().unwrap(), axis, &ranges).unwrap().1,
                    None => whole.as_f32().unwrap().to_vec(),
                };
                Tolerance::F32.assert(
                    &format!("{arch} tp {tp} chip {c} state {}", entry.name),
                    got.as_f32().unwrap(),
                    &want,
                );
            }
        }
    }
    assert!(widths > 0, "{arch}: no width of 2 and 4 is admitted, nothing was compared");
}

rdu_testkit::per_fixture!(
    check:
    llama, qwen3, qwen3_next, gemma3_text, deepseek_v2, deepseek_v2_noqlora, deepseek_v3, glm4_moe,
    minimax_m2, gpt_oss, mistral, mixtral,
);

#[test]
fn qwen3_next_t80() {
    check("qwen3_next_T80");
}

#[test]
fn gemma3_text_t80() {
    check("gemma3_text_T80");
}
