//! GGUF import and conformance: the llama.cpp fixture files in `tests/data/fixtures/gguf/`
//! (the hf/llama and hf/gemma3_text models as llama.cpp's converter writes them) imported
//! into specs and run through the reference runner — forward and token-by-token decode —
//! within 1e-4 of transformers (on the original weights for the F32 files, on the
//! Q8_0-dequantised weights for the Q8_0 files, whose argmax must also agree with llama.cpp's).

use rdu_checkpoint::Gguf;
use rdu_compiler::error::Error;
use rdu_compiler::model::gguf::{from_gguf, from_gguf_path};
use rdu_compiler::model::naming::{checkpoint_source, TensorSource};
use rdu_compiler::model::spec::{Dialect, Family, Mixer, RopeScaling, RopeStyle};
use rdu_compiler::reference::{GgufWeights, Reference};
use rdu_testkit::{argmax, fixtures, Tolerance};

#[test]
fn llama_imports() {
    for quant in ["f32", "q8_0"] {
        let spec = f32_states(from_gguf_path(fixtures::gguf_file("llama", quant)).expect("import"));
        assert_eq!(spec.name, format!("tiny-llama-{quant}"));
        assert_eq!((spec.family, &spec.dialect), (Family::Llama, &Dialect::Gguf));
        assert_eq!((spec.vocab, spec.d_model, spec.n_layers(), spec.max_ctx), (256, 64, 2, 256));
        assert!(!spec.head.tied, "llama has output.weight");
        assert_eq!(spec.rotations.len(), 1);
        assert_eq!(
            (spec.rotations[0].style, spec.rotations[0].base, spec.rotations[0].dim),
            (RopeStyle::Interleaved, 1e4, 16)
        );
        let Mixer::Attention { heads, kv_heads, head_dim, qk_norm, .. } = spec.layers[0].mixer else {
            panic!("attention expected")
        };
        assert_eq!((heads, kv_heads, head_dim, qk_norm), (4, 2, 16, false));
        assert_eq!(spec.layers[0].norms.eps, 1e-6);
        assert!(!spec.layers[0].norms.unit_offset);
        assert_eq!(spec.layers[0].window, None);
        assert_eq!((spec.bos, spec.eos.as_slice()), (Some(1), &[2][..]));
        assert_eq!(checkpoint_source(&spec, "Wq1"), Some(TensorSource::Tensor("blk.1.attn_q.weight".into())));
        assert_eq!(checkpoint_source(&spec, "fn0"), Some(TensorSource::Tensor("blk.0.ffn_norm.weight".into())));
        assert_eq!(checkpoint_source(&spec, "Wout"), Some(TensorSource::Tensor("output.weight".into())));
    }
}

#[test]
fn gemma3_imports() {
    for quant in ["f32", "q8_0"] {
        let spec = f32_states(from_gguf_path(fixtures::gguf_file("gemma3", quant)).expect("import"));
        assert_eq!(spec.family, Family::Gemma3);
        assert_eq!((spec.vocab, spec.d_model, spec.n_layers()), (256, 64, 4));
        assert!(spec.head.tied, "gemma3 has no output.weight");
        assert!(!spec.head.norm_unit_offset && spec.layers.iter().all(|l| !l.norms.unit_offset), "GGUF stores w+1");
        // The HF fixture's layer_types: sliding, sliding, full, sliding (window 4).
        let windows: Vec<_> = spec.layers.iter().map(|l| l.window).collect();
        assert_eq!(windows, vec![Some(4), Some(4), None, Some(4)]);
        let bases: Vec<_> = spec.layers.iter().map(|l| spec.rotations[l.rotation.unwrap()].base).collect();
        assert_eq!(bases, vec![1e4, 1e4, 1e6, 1e4]);
        assert!(spec.rotations.iter().all(|r| r.style == RopeStyle::Neox));
        let Mixer::Attention { heads, kv_heads, head_dim, qk_norm, scale, .. } = spec.layers[0].mixer else {
            panic!("attention expected")
        };
        assert_eq!((heads, kv_heads, head_dim, qk_norm), (4, 1, 16, true));
        assert_eq!(scale, 0.25, "query_pre_attn_scalar 16 = head_dim");
        assert_eq!(spec.embed.scale, Some(8.0));
        let n = &spec.layers[0].norms;
        assert!(n.pre_attn && n.post_attn && n.pre_ffn && n.post_ffn);
        let name = |w: &str| checkpoint_source(&spec, w);
        assert_eq!(name("pan2"), Some(TensorSource::Tensor("blk.2.post_attention_norm.weight".into())));
        assert_eq!(name("fn2"), Some(TensorSource::Tensor("blk.2.ffn_norm.weight".into())));
        assert_eq!(name("pfn2"), Some(TensorSource::Tensor("blk.2.post_ffw_norm.weight".into())));
        assert_eq!(name("Wout"), None, "tied: no output weight");
    }
}

/// Forward and token-by-token decode of `arch`'s `quant` file through the reference runner
/// with storage as stored; returns the max |diff| of each.
fn check_reference(arch: &str, quant: &str) -> (f32, f32) {
    let path = fixtures::gguf_file(arch, quant);
    let spec = f32_states(from_gguf_path(&path).expect("import"));
    let weights = GgufWeights::open(&spec, &path).expect("open");
    let storage = weights.storage();
    let fixtures::GgufReferences { tokens, transformers: want, llamacpp } = fixtures::gguf_references(arch, quant);
    let vocab = spec.vocab;
    let mut reference = Reference::new(&spec, storage, &weights);
    let out = reference.forward(&tokens).unwrap_or_else(|e| panic!("{arch}/{quant}: {e}"));
    let got = out.logits.as_f32().expect("f32");
    let forward = Tolerance::F32.assert(&format!("{arch}/{quant} forward"), got, &want);
    for (pos, row) in got.chunks(vocab).enumerate() {
        let ll = &llamacpp[pos * vocab..(pos + 1) * vocab];
        assert_eq!(argmax(row), argmax(ll), "{arch}/{quant}: argmax differs from llama.cpp at {pos}");
    }
    let mut decoder = reference.decoder(tokens.len()).expect("decoder");
    let mut decode = 0f32;
    for (pos, &tok) in tokens.iter().enumerate() {
        let row = decoder.step(tok, pos).expect("step").logits.into_f32();
        let d = Tolerance::F32.assert(
            &format!("{arch}/{quant} decode at {pos}"),
            &row,
            &want[pos * vocab..(pos + 1) * vocab],
        );
        decode = decode.max(d);
    }
    eprintln!("{arch}/{quant} reference: forward max |diff| {forward:e}, decode {decode:e}");
    (forward, decode)
}

#[test]
fn llama_f32_matches_transformers() {
    check_reference("llama", "f32");
}

#[test]
fn llama_q8_0_matches_dequantised_transformers() {
    check_reference("llama", "q8_0");
}

#[test]
fn gemma3_f32_matches_transformers() {
    check_reference("gemma3", "f32");
}

#[test]
fn gemma3_q8_0_matches_dequantised_transformers() {
    check_reference("gemma3", "q8_0");
}

#[test]
fn q8_0_storage_is_as_stored() {
    let path = fixtures::gguf_file("llama", "q8_0");
    let spec = f32_states(from_gguf_path(&path).expect("import"));
    let weights = GgufWeights::open(&spec, &path).expect("open");
    let rdu_compiler::deploy::Storage::Exactly(set) = weights.storage() else { panic!("as stored") };
    for name in ["E", "Wout", "Wq0", "Wk1", "Wd1"] {
        assert!(set.contains_key(name), "{name} is Q8_0 in the file");
    }
    assert!(!set.contains_key("an0") && !set.contains_key("nf"), "norms are F32");
    let f32_spec = f32_states(from_gguf_path(fixtures::gguf_file("llama", "f32")).expect("import"));
    let f32_weights = GgufWeights::open(&f32_spec, &fixtures::gguf_file("llama", "f32")).expect("open");
    assert_eq!(f32_weights.storage(), rdu_compiler::deploy::Storage::Exactly(Default::default()));
}

// ---- errors ----

/// A minimal GGUF v3 file: metadata only (u32, f32 and string values), no tensors.
fn gguf_bytes(kv: &[(String, Value)]) -> Vec<u8> {
    gguf_with_f32(kv, None)
}

/// A minimal GGUF v3 file with metadata and at most one 1-D F32 tensor.
fn gguf_with_f32(kv: &[(String, Value)], tensor: Option<(&str, &[f32])>) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    let mut out = Vec::new();
    out.extend(b"GGUF");
    out.extend(3u32.to_le_bytes());
    out.extend((tensor.is_some() as u64).to_le_bytes());
    out.extend((kv.len() as u64).to_le_bytes());
    for (key, value) in kv {
        string(&mut out, key);
        match value {
            Value::U32(v) => {
                out.extend(4u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Value::F32(v) => {
                out.extend(6u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Value::Str(s) => {
                out.extend(8u32.to_le_bytes());
                string(&mut out, s);
            }
        }
    }
    if let Some((name, values)) = tensor {
        string(&mut out, name);
        out.extend(1u32.to_le_bytes());
        out.extend((values.len() as u64).to_le_bytes());
        out.extend(0u32.to_le_bytes()); // F32
        out.extend(0u64.to_le_bytes());
        out.resize(out.len().next_multiple_of(32), 0);
        out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    }
    out
}

#[derive(Clone, Copy)]
enum Value {
    U32(u32),
    F32(f32),
    Str(&'static str),
}

fn llama_kv(arch: &'static str) -> Vec<(String, Value)> {
    vec![
        ("general.architecture".into(), Value::Str(arch)),
        (format!("{arch}.context_length"), Value::U32(128)),
        (format!("{arch}.embedding_length"), Value::U32(64)),
        (format!("{arch}.block_count"), Value::U32(2)),
        (format!("{arch}.feed_forward_length"), Value::U32(128)),
        (format!("{arch}.attention.head_count"), Value::U32(4)),
        (format!("{arch}.attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
        (format!("{arch}.vocab_size"), Value::U32(256)),
    ]
}

fn import(kv: &[(String, Value)]) -> rdu_compiler::error::Result<rdu_compiler::model::spec::ModelSpec> {
    let gguf = Gguf::from_bytes("test.gguf", gguf_bytes(kv)).expect("valid GGUF");
    from_gguf(&gguf, "test")
}

fn config_error(result: rdu_compiler::error::Result<rdu_compiler::model::spec::ModelSpec>) -> (String, String) {
    match result {
        Err(Error::Config { field, message, .. }) => (field, message),
        Err(other) => panic!("expected a config error, got {other}"),
        Ok(_) => panic!("expected an error"),
    }
}

#[test]
fn minimal_metadata_imports() {
    let spec = import(&llama_kv("llama")).expect("import");
    assert_eq!((spec.vocab, spec.n_layers(), spec.layers[0].norms.eps), (256, 2, 1e-5));
    assert!(spec.head.tied, "no output.weight tensor");
}

#[test]
fn rope_freqs_become_rotation_factors() {
    let factors = [1.0f32, 1.0, 2.5, 8.0, 8.0, 8.0, 8.0, 8.0];
    let kv = llama_kv("llama");
    let gguf = Gguf::from_bytes("freqs.gguf", gguf_with_f32(&kv, Some(("rope_freqs.weight", &factors)))).expect("GGUF");
    let spec = from_gguf(&gguf, "freqs").expect("import");
    let rot = &spec.rotations[0];
    assert_eq!(rot.scaling, RopeScaling::Factors { factors: factors.to_vec() });
    assert_eq!(rot.rope_spec().scaling, rdu_spatial::rope::RopeScaling::Factors { factors: factors.to_vec() });
    // A table of the wrong length is an error naming the tensor.
    let gguf =
        Gguf::from_bytes("bad.gguf", gguf_with_f32(&kv, Some(("rope_freqs.weight", &factors[..5])))).expect("GGUF");
    assert_eq!(config_error(from_gguf(&gguf, "bad")).0, "rope_freqs.weight");
}

#[test]
fn unknown_architecture_is_named() {
    let (field, message) = config_error(import(&llama_kv("mamba")));
    assert_eq!(field, "general.architecture");
    assert!(message.contains("`mamba`") && message.contains("llama"), "{message}");
}

#[test]
fn missing_key_is_named() {
    let mut kv = llama_kv("qwen3");
    kv.retain(|(k, _)| k != "qwen3.block_count");
    let (field, message) = config_error(import(&kv));
    assert_eq!(field, "qwen3.block_count");
    assert!(message.contains("missing"), "{message}");
    let err = import(&kv).unwrap_err().to_string();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("test.gguf"), "{err}");
}

#[test]
fn zero_kv_heads_are_refused_in_one_line_by_every_attention_reader() {
    // The standard architectures and the DeltaNet hybrids read the attention header with one
    // reader; a hybrid file stops there, before its `ssm.*` keys.
    for arch in ["llama", "qwen3", "gemma3", "qwen3next", "qwen35", "qwen35moe"] {
        let mut kv = llama_kv(arch);
        kv.push((format!("{arch}.attention.head_count_kv"), Value::U32(0)));
        let (field, _) = config_error(import(&kv));
        assert_eq!(field, format!("{arch}.attention.head_count_kv"));
        let err = import(&kv).unwrap_err().to_string();
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
}

/// `spec` with its states stored f32, as transformers' float32 cache holds them (the fixtures'
/// f32 files are the reference within 1e-4).
fn f32_states(mut spec: rdu_compiler::model::spec::ModelSpec) -> rdu_compiler::model::spec::ModelSpec {
    spec.state = rdu_compiler::model::spec::StateDtype::F32;
    spec
}
