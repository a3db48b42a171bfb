//! The prefill cut's programs: every layer of every preset declares exactly the decode cut's
//! states (so a decode bundle continues from a prefill bundle's state), its kinds are the
//! decode kinds, rows carry their own positions, and the head computes the last row only.

use rdu_compiler::deploy::{layer_kinds_for, Storage};
use rdu_compiler::front::lift;
use rdu_compiler::lang::ast::DeclKind;
use rdu_compiler::lang::parse;
use rdu_compiler::model::author::{embed_source, head_source, source_of};
use rdu_compiler::model::presets;
use rdu_compiler::model::spec::Cut;

/// `kind name : shape` of every declaration of `kind` in `text`, in order.
fn decls(text: &str, kind: DeclKind) -> Vec<(String, Vec<usize>)> {
    let program = parse(text).expect("parses");
    program.decls().filter(|d| d.kind == kind).map(|d| (d.name.text.clone(), d.ty.shape.clone())).collect()
}

#[test]
fn prefill_layers_declare_the_decode_states_on_every_preset() {
    for name in presets::names() {
        let spec = presets::resolve(name).expect("preset");
        let ctx = 4096.min(spec.max_ctx.max(1));
        for chunk in [1, 7, 512.min(ctx)] {
            let (prefill, decode) = (Cut::Prefill { chunk, ctx }, Cut::Decode { ctx });
            for layer in 0..spec.n_layers() {
                let p = source_of(&spec, layer, prefill, &Storage::AllQ8);
                let d = source_of(&spec, layer, decode, &Storage::AllQ8);
                let states = decls(p.text(), DeclKind::State);
                assert_eq!(states, decls(d.text(), DeclKind::State), "{name} layer {layer} chunk {chunk}");
                // Every layer with a cache or a recurrence carries state.
                assert!(!states.is_empty(), "{name} layer {layer}: no state");
                let inputs = decls(p.text(), DeclKind::Input);
                assert!(inputs.iter().all(|(n, s)| n != "pos" || s == &[chunk]), "{name} layer {layer}: {inputs:?}");
                assert_eq!(p.stored, d.stored, "{name} layer {layer}: the storage sets differ");
            }
            let kinds = |cut| -> Vec<(String, Vec<usize>)> {
                layer_kinds_for(&spec, cut, &Storage::AllQ8).into_iter().map(|k| (k.name, k.layers)).collect()
            };
            assert_eq!(kinds(prefill), kinds(decode), "{name} chunk {chunk}: prefill kinds differ from decode kinds");
        }
    }
}

#[test]
fn a_prefill_chunk_embeds_every_row_and_the_head_reads_the_last() {
    for name in presets::names().into_iter().filter(|n| n.starts_with("tiny-")) {
        let spec = presets::resolve(name).expect("preset");
        let cut = Cut::Prefill { chunk: 5, ctx: 32 };
        let embed = embed_source(&spec, cut, &Storage::AllQ8);
        assert_eq!(decls(embed.text(), DeclKind::Input), [("tok".to_string(), vec![5])], "{name}");
        let head = lift(&parse(head_source(&spec, cut, &Storage::AllQ8).text()).expect("parses")).expect("lifts");
        let logits = head.outputs.iter().find(|o| o.name == "logits").expect("logits");
        assert_eq!(head.value(logits.value).ty.shape, [1, spec.vocab], "{name}");
        for layer in 0..spec.n_layers() {
            lift(&parse(source_of(&spec, layer, cut, &Storage::AllQ8).text()).expect("parses"))
                .unwrap_or_else(|r| panic!("{name} layer {layer}: {r}"));
        }
    }
}

/// `attend` takes the chunk's keys and values together, each shaped as one slot per query row;
/// `attend_mla` and `attend_mla_up` the chunk's latents. Anything else is refused at the statement, by code.
#[test]
fn attend_over_a_chunk_is_typed() {
    let program = |call: &str| {
        format!(
            "input q : f32[3, 4, 8]\ninput p : i32[3]\ninput k : f32[3, 2, 8]\ninput v : f32[3, 2, 6]\n\
             input kw : f32[2, 2, 8]\ninput c : f32[3, 8]\ninput wk : f32[4, 6, 6]\ninput wv : f32[4, 5, 6]\nstate K : f32[4, 2, 8]\nstate V : f32[4, 2, 6]\n\
             state C : f32[4, 8]\n\
             a = {call}\nK <- cache_put(K, k, p)\nV <- cache_put(V, v, p)\nC <- cache_put(C, c, p)\noutput a\n"
        )
    };
    let refusal = |call: &str| -> Option<(&'static str, Option<usize>)> {
        let text = program(call);
        match lift(&parse(&text).expect("parses")) {
            Ok(_) => None,
            Err(r) => r.diagnostics.iter().find(|d| d.binder.as_deref() == Some("a")).map(|d| (d.code, d.index)),
        }
    };
    // Fits: (the unused inputs are refused as unused declarations, not at `a`.)
    assert_eq!(refusal("attend(q, K, V, p, k, v, scale=0.5, window=2)"), None);
    assert_eq!(refusal("attend_mla(q, C, p, c, scale=0.5, latent=6)"), None);
    assert_eq!(refusal("attend_mla_up(q, C, wk, wv, p, c, scale=0.5, latent=6)"), None);
    // The keys without the values; keys of another row count.
    assert_eq!(refusal("attend(q, K, V, p, k, scale=0.5)"), Some(("E0202", Some(0))));
    assert_eq!(refusal("attend(q, K, V, p, kw, v, scale=0.5)"), Some(("E0203", Some(0))));
    assert_eq!(refusal("attend(q, K, V, p, v, k, scale=0.5)"), Some(("E0203", Some(0))));
    assert_eq!(refusal("attend_mla(q, C, p, k, scale=0.5, latent=6)"), Some(("E0203", Some(0))));
    assert_eq!(refusal("attend_mla_up(q, C, wk, wv, p, k, scale=0.5, latent=6)"), Some(("E0203", Some(0))));
    // Up-projections whose rows do not make q's key, or of another latent width.
    assert_eq!(refusal("attend_mla_up(q, C, wv, wv, p, c, scale=0.5, latent=6)"), Some(("E0203", Some(0))));
    assert_eq!(refusal("attend_mla_up(q, C, wk, wv, p, c, scale=0.5, latent=5)"), Some(("E0203", Some(0))));
}
