//! Property tests: mutated GGUF and safetensors bytes are read or rejected, never a panic.

mod common;

use common::fuzz::{apply, exercise_gguf, exercise_safetensors, safetensors_seed, seeds, Mutation, INTERESTING};
use proptest::prelude::*;

fn mutation() -> impl Strategy<Value = Mutation> {
    let value = prop_oneof![any::<u64>(), prop::sample::select(INTERESTING.to_vec())];
    prop_oneof![
        (any::<u64>(), any::<u8>()).prop_map(|(at, bit)| Mutation::FlipBit { at, bit }),
        any::<u64>().prop_map(|len| Mutation::Truncate { len }),
        (0..4096u64, value.clone()).prop_map(|(at, value)| Mutation::WriteU64 { at, value }),
        (0..4096u64, value).prop_map(|(at, v)| Mutation::WriteU32 { at, value: v as u32 }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn mutated_gguf_never_panics(
        which in 0..2usize,
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let bytes = apply(seeds()[which].clone(), &mutations);
        exercise_gguf(bytes);
    }

    #[test]
    fn mutated_safetensors_never_panics(mutations in prop::collection::vec(mutation(), 1..6)) {
        exercise_safetensors(apply(safetensors_seed(), &mutations));
    }
}

#[test]
fn seeds_are_valid() {
    for seed in seeds() {
        assert!(exercise_gguf(seed));
    }
    assert!(exercise_safetensors(safetensors_seed()));
}
