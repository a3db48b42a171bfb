//! Layer kinds of every preset and of irregular configs; renaming vs rebind on every layer;
//! authored programs round-trip through the printer and parser.

use rdu_compiler::deploy::{layer_kinds, rebind, Storage};
use rdu_compiler::lang::{parse, print, renaming, shape_digest, Source};
use rdu_compiler::model::author::{embed_source, head_source, source_of};
use rdu_compiler::model::config::from_config_json;
use rdu_compiler::model::presets;
use rdu_compiler::model::quantization::declared_storage;
use rdu_compiler::model::spec::{Cut, ModelSpec};
use std::collections::{BTreeMap, BTreeSet};

fn spec(name: &str) -> ModelSpec {
    presets::resolve(name).unwrap_or_else(|e| panic!("preset {name}: {e}"))
}

/// (kind name, layers) of a model.
fn kinds_of(spec: &ModelSpec, storage: &Storage) -> Vec<(String, Vec<usize>)> {
    layer_kinds(spec, storage).into_iter().map(|k| (k.name, k.layers)).collect()
}

fn every(start: usize, step: usize, end: usize) -> Vec<usize> {
    (start..end).step_by(step).collect()
}

fn others(n: usize, excluded: &[usize]) -> Vec<usize> {
    (0..n).filter(|l| !excluded.contains(l)).collect()
}

#[test]
fn real_presets_have_the_documented_kinds() {
    let q8 = Storage::AllQ8;
    let attn = every(3, 4, 48);
    assert_eq!(
        kinds_of(&spec("qwen3-next-80b-a3b"), &q8),
        vec![("deltanet_moe".into(), others(48, &attn)), ("gated_attention_moe".into(), attn)]
    );
    let global = every(5, 6, 62);
    assert_eq!(global.last(), Some(&59));
    assert_eq!(
        kinds_of(&spec("gemma-3-27b-it"), &q8),
        vec![("attention_sliding_dense".into(), others(62, &global)), ("attention_dense".into(), global)]
    );
    let global = every(5, 6, 18);
    assert_eq!(kinds_of(&spec("gemma-3-270m"), &q8)[1].1, global);
    assert_eq!(
        kinds_of(&spec("deepseek-v2-lite"), &q8),
        vec![("mla_dense".into(), vec![0]), ("mla_moe".into(), (1..27).collect())]
    );
    assert_eq!(kinds_of(&spec("deepseek-v2"), &q8)[1].1, (1..60).collect::<Vec<_>>());
    assert_eq!(kinds_of(&spec("llama-3.1-8b"), &q8), vec![("attention_dense".into(), (0..32).collect())]);
    assert_eq!(kinds_of(&spec("qwen3-8b"), &q8).len(), 1);
    for name in ["qwen3.5-27b", "qwen3.6-27b"] {
        let attn = every(3, 4, 64);
        assert_eq!(
            kinds_of(&spec(name), &q8),
            vec![("deltanet_dense".into(), others(64, &attn)), ("gated_attention_dense".into(), attn)],
            "{name}"
        );
    }
    let k = kinds_of(&spec("qwen3.6-35b-a3b"), &q8);
    assert_eq!((k.len(), k[1].1.clone()), (2, every(3, 4, 40)));
}

/// gpt-oss (its experts MXFP4 as its config declares, or everything Q8_0): the sliding layers
/// (even) and the full ones (odd), 2 kinds; Mixtral one kind of MoE layers, Mistral one of
/// sliding dense layers (its config's window of 4096), on the presets' real configs.
#[test]
fn gpt_oss_mixtral_and_mistral_have_their_documented_kinds() {
    let q8 = Storage::AllQ8;
    for (name, layers) in [("gpt-oss-120b", 36), ("gpt-oss-20b", 24)] {
        let spec = spec(name);
        let stored = declared_storage(&spec).expect("gpt-oss declares MXFP4");
        assert!(matches!(&stored, Storage::Exactly(w) if w.keys().any(|k| k.starts_with("Weg"))), "{name}");
        for storage in [&q8, &stored] {
            let want = vec![
                ("attention_sliding_moe".into(), every(0, 2, layers)),
                ("attention_moe".into(), every(1, 2, layers)),
            ];
            assert_eq!(kinds_of(&spec, storage), want, "{name}");
        }
    }
    assert_eq!(kinds_of(&spec("mixtral-8x7b"), &q8), vec![("attention_moe".into(), (0..32).collect())]);
    assert_eq!(kinds_of(&spec("mistral-7b"), &q8), vec![("attention_sliding_dense".into(), (0..32).collect())]);
}

#[test]
fn tiny_presets_have_two_kinds_where_the_family_allows() {
    for name in presets::names().into_iter().filter(|n| n.starts_with("tiny-")) {
        let n_kinds = layer_kinds(&spec(name), &Storage::AllQ8).len();
        // Llama, Mistral, Mixtral and MiniMax-M2 layers are uniform by construction.
        let uniform = ["tiny-llama", "tiny-mistral", "tiny-mixtral", "tiny-minimax-m2"].contains(&name);
        let expected_min = if uniform { 1 } else { 2 };
        assert!(n_kinds >= expected_min, "{name}: {n_kinds} kinds");
    }
}

fn config(model_type_and_fields: &str) -> ModelSpec {
    from_config_json(model_type_and_fields, "irregular").expect("config imports")
}

const QWEN3_MOE: &str = r#"{"model_type": "qwen3_moe", "vocab_size": 256, "hidden_size": 64,
  "intermediate_size": 128, "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 512,
  "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": true,
  "decoder_sparse_step": DSS, "mlp_only_layers": MLP_ONLY}"#;

#[test]
fn irregular_layer_patterns_give_their_kinds() {
    let only = config(&QWEN3_MOE.replace("DSS", "1").replace("MLP_ONLY", "[2]"));
    assert_eq!(
        kinds_of(&only, &Storage::AllQ8),
        vec![("attention_moe".into(), vec![0, 1, 3, 4, 5]), ("attention_dense".into(), vec![2])]
    );
    let step2 = config(&QWEN3_MOE.replace("DSS", "2").replace("MLP_ONLY", "[]"));
    assert_eq!(
        kinds_of(&step2, &Storage::AllQ8),
        vec![("attention_dense".into(), vec![0, 2, 4]), ("attention_moe".into(), vec![1, 3, 5])]
    );
    let explicit = config(
        r#"{"model_type": "gemma3_text", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16,
        "query_pre_attn_scalar": 16, "sliding_window": 8, "max_position_embeddings": 512,
        "layer_types": ["full_attention", "sliding_attention", "full_attention", "full_attention", "sliding_attention"]}"#,
    );
    assert_eq!(
        kinds_of(&explicit, &Storage::AllQ8),
        vec![("attention_dense".into(), vec![0, 2, 3]), ("attention_sliding_dense".into(), vec![1, 4])]
    );
}

#[test]
fn a_layer_stored_differently_is_its_own_kind() {
    let llama = spec("llama-3.1-8b");
    let cut = Cut::Decode { ctx: 64 };
    let mut stored = BTreeSet::new();
    for l in 0..llama.n_layers() {
        stored.extend(source_of(&llama, l, cut, &Storage::AllQ8).q8());
    }
    stored.remove("Wq5");
    let kinds = kinds_of(&llama, &Storage::q8(stored));
    assert_eq!(kinds.len(), 2);
    assert_eq!(kinds[1].1, vec![5]);
    assert_eq!(kinds[0].1, others(32, &[5]));
}

/// Layers differing only in what is stored FP8 are their own kinds, named as the Q8_0 ones are
/// (`_fp8_{weights}`); a storage set mixing formats names each (`_q8_..._fp8_...`).
#[test]
fn kinds_differing_in_what_is_stored_fp8_are_named_for_it() {
    use rdu_compiler::model::storage::Format;
    let llama = spec("tiny-llama");
    let fp8 = Format::Fp8 { rows: 16, cols: 32 };
    let mut stored: std::collections::BTreeMap<String, Format> =
        rdu_compiler::model::quantization::blockable_weights(&llama).into_iter().map(|n| (n, fp8)).collect();
    stored.retain(|n, _| n != "E" && n != "Wout");
    stored.insert("Wo1".into(), Format::Q8_0);
    stored.remove("Wd1");
    let storage = Storage::Exactly(stored);
    let names: Vec<String> = layer_kinds(&llama, &storage).into_iter().map(|k| k.name).collect();
    assert_eq!(names, ["attention_dense_fp8_wd_wo", "attention_dense_q8_wo"]);
    let source = source_of(&llama, 0, Cut::Decode { ctx: 64 }, &storage);
    assert_eq!(source.stored["Wq0"], fp8);
    assert!(source.text().contains("weight Wq0 : q8[64, 64]"), "the text says what may be stored, not how");
}

/// Every name bound (declared or assigned) in a program, and the shared ones.
fn bound_names(source: &Source) -> BTreeSet<String> {
    let program = source.program().expect("authored program parses");
    let mut names: BTreeSet<String> = program
        .decls()
        .filter(|d| d.kind != rdu_compiler::lang::ast::DeclKind::Shared)
        .map(|d| d.name.text.clone())
        .collect();
    for s in program.stmts() {
        names.extend(s.binders.iter().map(|b| b.text.clone()));
    }
    names
}

#[test]
fn renaming_agrees_with_rebind_on_every_layer_of_every_preset() {
    for name in presets::names() {
        let spec = spec(name);
        let cut = Cut::Decode { ctx: 256 };
        for kind in layer_kinds(&spec, &Storage::AllQ8) {
            let rep = kind.representative();
            let rep_src = source_of(&spec, rep, cut, &Storage::AllQ8);
            let rep_names = bound_names(&rep_src);
            for &layer in &kind.layers {
                let src = source_of(&spec, layer, cut, &Storage::AllQ8);
                let map: BTreeMap<String, String> = renaming(&rep_src, &src)
                    .unwrap_or_else(|| panic!("{name}: no renaming from layer {rep} to layer {layer}"));
                assert_eq!(map.keys().cloned().collect::<BTreeSet<_>>(), rep_names, "{name} layer {layer}");
                let image: BTreeSet<&String> = map.values().collect();
                assert_eq!(image.len(), map.len(), "{name} layer {layer}: renaming is not a bijection");
                for (from, to) in &map {
                    assert_eq!(&rebind(from, rep, layer), to, "{name}: `{from}` from layer {rep} to {layer}");
                }
            }
        }
    }
}

#[test]
fn authored_programs_round_trip_through_printer_and_parser() {
    for name in presets::names() {
        let spec = spec(name);
        let tiny = name.starts_with("tiny-");
        for cut in [Cut::Decode { ctx: 128 }, Cut::Forward { seq: 5 }] {
            let mut sources = vec![embed_source(&spec, cut, &Storage::AllQ8), head_source(&spec, cut, &Storage::Dense)];
            let layers: Vec<usize> = if tiny {
                (0..spec.n_layers()).collect()
            } else {
                layer_kinds(&spec, &Storage::AllQ8).iter().map(|k| k.representative()).collect()
            };
            sources.extend(layers.iter().map(|&l| source_of(&spec, l, cut, &Storage::AllQ8)));
            for src in sources {
                let p = parse(src.text()).unwrap_or_else(|d| panic!("{name}: {}\n{}", d[0], src.text()));
                let printed = print(&p);
                assert_eq!(parse(&printed).expect("printed program parses"), p, "{name}");
                let reprinted = Source::split(printed, src.stored.clone(), src.slices.clone());
                assert_eq!(shape_digest(&reprinted), shape_digest(&src), "{name}: printing changed the digest");
            }
        }
    }
}
