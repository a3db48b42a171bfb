//! The fuzz targets in the ordinary test suite: a few thousand mutated inputs of every parser
//! (proptest draws the seed and the mutations, and shrinks a failure to few small ops), every
//! seed accepted as it is, and every failure the long campaigns found, kept as a regression.

use proptest::prelude::*;
use rdu_fuzz::harness::build;
use rdu_fuzz::mutate::{Op, KIND_NAMES};
use rdu_fuzz::targets::{target, Outcome, Target, NAMES};
use std::sync::OnceLock;

fn targets() -> &'static Vec<Target> {
    static ALL: OnceLock<Vec<Target>> = OnceLock::new();
    ALL.get_or_init(|| NAMES.iter().map(|n| target(n).unwrap_or_else(|e| panic!("{e}"))).collect())
}

fn get(name: &str) -> &'static Target {
    targets().iter().find(|t| t.name == name).expect("a target")
}

/// Ops of the kinds `name`'s format draws; small parameters as often as large ones.
fn ops(name: &'static str) -> impl Strategy<Value = Vec<Op>> {
    let kinds = get(name).format().kinds();
    let param = || prop_oneof![0..64u64, any::<u64>()];
    let op = (prop::sample::select(kinds), param(), param(), param()).prop_map(|(kind, a, b, c)| Op { kind, a, b, c });
    prop::collection::vec(op, 1..6)
}

/// Seed `which` of `name` with `ops` applied, run; a panic fails the case.
fn run(name: &str, which: prop::sample::Index, ops: &[Op]) {
    let t = get(name);
    let which = which.index(t.seeds().len());
    let input = build(&t.context(), which, ops);
    t.exercise(&input, which);
}

#[test]
fn every_seed_is_accepted_as_it_is() {
    for t in targets() {
        for (i, seed) in t.seeds().iter().enumerate() {
            assert_eq!(t.exercise(&seed.bytes, i), Outcome::Accepted, "{}: seed {} is refused", t.name, seed.name);
        }
    }
    assert_eq!(KIND_NAMES.len(), 16);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn program_text(which in any::<prop::sample::Index>(), ops in ops("rdu")) {
        run("rdu", which, &ops);
    }

    #[test]
    fn spatial_text(which in any::<prop::sample::Index>(), ops in ops("spatial")) {
        run("spatial", which, &ops);
    }

    #[test]
    fn manifest_json(which in any::<prop::sample::Index>(), ops in ops("manifest")) {
        run("manifest", which, &ops);
    }

    #[test]
    fn config_json(which in any::<prop::sample::Index>(), ops in ops("config")) {
        run("config", which, &ops);
    }

    #[test]
    fn chip_toml(which in any::<prop::sample::Index>(), ops in ops("chip")) {
        run("chip", which, &ops);
    }

    #[test]
    fn safetensors(which in any::<prop::sample::Index>(), ops in ops("safetensors")) {
        run("safetensors", which, &ops);
    }

    #[test]
    fn tokenizer_json(which in any::<prop::sample::Index>(), ops in ops("tokenizer")) {
        run("tokenizer", which, &ops);
    }
}

proptest! {
    // A GGUF input reads every tensor of a fixture model and builds its tokenizer: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn gguf(which in any::<prop::sample::Index>(), ops in ops("gguf")) {
        run("gguf", which, &ops);
    }
}
