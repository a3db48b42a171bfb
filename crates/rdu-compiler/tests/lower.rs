//! Lowering and certification of every kind of the presets.

use rdu_compiler::certify::certify;
use rdu_compiler::front::lift;
use rdu_compiler::lang::parse;
use rdu_compiler::lower::lower;
use rdu_compiler::lower::streamed::{layer_kinds_for, Storage};
use rdu_compiler::model::author::source_of;
use rdu_compiler::model::presets;
use rdu_compiler::model::spec::Cut;
use rdu_spatial::chip::Chip;

fn certify_kinds(name: &str, cut: Cut, storage: Storage, chip: &str) {
    let spec = presets::resolve(name).unwrap();
    let chip = Chip::builtin(chip).unwrap();
    for kind in layer_kinds_for(&spec, cut, &storage) {
        let src = source_of(&spec, kind.representative(), cut, &storage);
        let program = parse(&src.text).unwrap();
        let graph = lift(&program).unwrap();
        let t = std::time::Instant::now();
        let lowered = lower(&kind.name, &program, &graph, &src.q8, &chip, &mut |_, _| {});
        let cert = certify(&lowered, &graph, &chip, 1).unwrap_or_else(|e| panic!("{name} {}: {e}", kind.name));
        eprintln!(
            "{name} {} sections {} err {:e} in {:?}",
            kind.name,
            lowered.sections.len(),
            cert.max_abs_err,
            t.elapsed()
        );
    }
}

#[test]
fn tiny_presets_certify() {
    for name in presets::names().into_iter().filter(|n| n.starts_with("tiny-")) {
        for storage in [Storage::AllQ8, Storage::Dense] {
            certify_kinds(name, Cut::Decode { ctx: 64 }, storage.clone(), "sn50");
            certify_kinds(name, Cut::Forward { seq: 7 }, storage, "sn40l");
        }
    }
}

#[test]
fn real_presets_certify_at_real_shapes() {
    for name in ["llama-3.1-8b", "qwen3-next-80b-a3b", "gemma-3-27b-it", "deepseek-v2"] {
        certify_kinds(name, Cut::Decode { ctx: 4096 }, Storage::AllQ8, "sn50");
    }
}
