//! The fuzz targets: every parser rdu reads, each driven as rdu drives it, past the parser into
//! what consumes its result (lift after parse, validate after reading a manifest, encoding after
//! loading a tokenizer, …). A target returns whether the input was accepted; a rejection must
//! be an error with a message, never a panic. Where a round trip exists it is an oracle: an
//! accepted program must print and parse back to itself.

use crate::mutate::{tokens, Context, Format, Seed};
use rdu_checkpoint::{Gguf, SafeTensors};
use rdu_compiler::front::lift;
use rdu_compiler::lang::{self, Source};
use rdu_spatial::bundle::Bundle;
use rdu_spatial::chip::Chip;
use rdu_spatial::cost::{estimate, CostInput, Precision, StageWork};
use rdu_spatial::memory::{place, MemoryDemand};
use rdu_spatial::op::Key;
use rdu_spatial::Op;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Whether a target took an input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Accepted,
    Rejected,
}

type Exercise = Box<dyn Fn(&[u8], usize) -> Outcome + Send + Sync>;

/// One parser under test: its seed corpus, how its inputs mutate, and how it is driven.
pub struct Target {
    pub name: &'static str,
    /// What it reads, for the report.
    pub what: &'static str,
    format: Format,
    seeds: Vec<Seed>,
    tokens: Vec<String>,
    dictionary: Vec<&'static str>,
    exercise: Exercise,
}

impl Target {
    pub fn seeds(&self) -> &[Seed] {
        &self.seeds
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn context(&self) -> Context<'_> {
        Context { format: self.format, seeds: &self.seeds, tokens: &self.tokens, dictionary: &self.dictionary }
    }

    /// Runs `input`; `origin` is the seed it was mutated from (the manifest target reads the
    /// program files of that seed's bundle beside it).
    pub fn exercise(&self, input: &[u8], origin: usize) -> Outcome {
        (self.exercise)(input, origin)
    }
}

/// Every target's name, in the order `all` runs them.
pub const NAMES: [&str; 8] = ["rdu", "spatial", "manifest", "config", "chip", "safetensors", "gguf", "tokenizer"];

/// The seed corpus directory: `tests/data/fuzz` at the workspace root.
pub fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/fuzz")
}

/// The target called `name`, its corpus read from disk.
pub fn target(name: &str) -> Result<Target, String> {
    let dir = corpus_root().join(name);
    let t = match name {
        "rdu" => text_target(
            "rdu",
            "program text (.rdu): lex, parse, print round trip, shape digest, lift",
            &dir,
            rdu_words(),
            Format::Text,
            exercise_rdu,
        )?,
        "spatial" => text_target(
            "spatial",
            "spatial text (.spatial): parse, print round trip",
            &dir,
            SPATIAL_WORDS.to_vec(),
            Format::Text,
            exercise_spatial,
        )?,
        "manifest" => manifest_target(&dir)?,
        "config" => text_target(
            "config",
            "config.json: the model config import (both layouts)",
            &dir,
            CONFIG_WORDS.iter().chain(rdu_compiler::model::config::MODEL_TYPES).copied().collect(),
            Format::Json,
            exercise_config,
        )?,
        "chip" => text_target(
            "chip",
            "chip TOML: load, consistency checks, memory fit and cost on the chip",
            &dir,
            CHIP_WORDS.to_vec(),
            Format::Text,
            exercise_chip,
        )?,
        "safetensors" => binary_target(
            "safetensors",
            "safetensors: header, then every tensor read",
            &dir,
            Format::Safetensors,
            safetensors_hot,
            exercise_safetensors,
        )?,
        "gguf" => binary_target(
            "gguf",
            "GGUF: header and metadata, every tensor read, ModelSpec import, its tokenizer",
            &dir,
            Format::Binary,
            gguf_hot,
            exercise_gguf,
        )?,
        "tokenizer" => text_target(
            "tokenizer",
            "tokenizer.json: load, encode, decode",
            &dir,
            TOKENIZER_WORDS.to_vec(),
            Format::Json,
            exercise_tokenizer,
        )?,
        other => return Err(format!("no fuzz target `{other}`; targets: {}", NAMES.join(", "))),
    };
    Ok(t)
}

/// Every target.
pub fn all() -> Result<Vec<Target>, String> {
    NAMES.iter().map(|n| target(n)).collect()
}

/// The files of `dir` (sorted, recursively), relative names with their bytes.
fn read_dir(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) -> Result<(), String> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(root, &path, out)?;
            } else {
                let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                let name = path.strip_prefix(root).unwrap_or(&path).display().to_string();
                out.push((name, bytes));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    Ok(out)
}

/// The seeds of a target: every file of its corpus directory, and every file a `seeds.list` there
/// names (one path a line, relative to the workspace root: fixtures used in place, not copied).
fn corpus(dir: &Path, hot: fn(&[u8]) -> usize) -> Result<Vec<Seed>, String> {
    let mut files = Vec::new();
    for (name, bytes) in read_dir(dir)? {
        if name == "seeds.list" {
            let root = corpus_root().join("../../..");
            for line in String::from_utf8_lossy(&bytes).lines().map(str::trim) {
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let bytes =
                    std::fs::read(root.join(line)).map_err(|e| format!("{}/seeds.list: {line}: {e}", dir.display()))?;
                files.push((line.to_string(), bytes));
            }
        } else if !name.ends_with(".md") {
            files.push((name, bytes));
        }
    }
    let seeds: Vec<Seed> = files.into_iter().map(|(name, bytes)| Seed { hot: hot(&bytes), name, bytes }).collect();
    if seeds.is_empty() {
        return Err(format!("{}: no seed files", dir.display()));
    }
    Ok(seeds)
}

fn distinct_tokens(seeds: &[Seed]) -> Vec<String> {
    let mut set = BTreeSet::new();
    for seed in seeds {
        for (s, e) in tokens(&seed.bytes) {
            if let Ok(t) = std::str::from_utf8(&seed.bytes[s..e]) {
                if !t.trim().is_empty() && t.len() <= 64 {
                    set.insert(t.to_string());
                }
            }
        }
    }
    set.into_iter().collect()
}

fn text_target(
    name: &'static str,
    what: &'static str,
    dir: &Path,
    dictionary: Vec<&'static str>,
    format: Format,
    exercise: fn(&[u8]) -> Outcome,
) -> Result<Target, String> {
    let seeds = corpus(dir, |b| b.len())?;
    let tokens = distinct_tokens(&seeds);
    Ok(Target { name, what, format, seeds, tokens, dictionary, exercise: Box::new(move |b, _| exercise(b)) })
}

fn binary_target(
    name: &'static str,
    what: &'static str,
    dir: &Path,
    format: Format,
    hot: fn(&[u8]) -> usize,
    exercise: fn(&[u8]) -> Outcome,
) -> Result<Target, String> {
    let seeds = corpus(dir, hot)?;
    let tokens = if format == Format::Safetensors { distinct_tokens(&seeds) } else { Vec::new() };
    let dictionary = SAFETENSORS_WORDS.to_vec();
    Ok(Target { name, what, format, seeds, tokens, dictionary, exercise: Box::new(move |b, _| exercise(b)) })
}

fn text(input: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(input)
}

fn rdu_words() -> Vec<&'static str> {
    let mut words: Vec<&'static str> = Op::language().map(Op::name).collect();
    words.extend(Key::ALL.iter().map(|k| k.name()));
    words.extend([
        "weight", "input", "state", "output", "f32", "i32", "bf16", "q8", "<-", "=", "[", "]", ",", ":", "(", ")", "#",
        "\n", "x0", "base",
    ]);
    words
}

/// `.rdu`: parse; an accepted program prints and parses back to itself; its shape digest; lift,
/// and every refusal formatted.
fn exercise_rdu(input: &[u8]) -> Outcome {
    let text = text(input);
    let digest = lang::shape_digest(&Source::with_q8(text.to_string(), &BTreeSet::from(["x0".to_string()])));
    let _ = digest.hex();
    let program = match lang::parse(&text) {
        Ok(p) => p,
        Err(diags) => {
            assert!(!diags.is_empty(), "a parse error without a diagnostic");
            for d in &diags {
                assert!(
                    d.span.end as usize <= text.len() && d.span.start <= d.span.end,
                    "span {:?} outside the text",
                    d.span
                );
                let _ = format!("{d:?}");
            }
            return Outcome::Rejected;
        }
    };
    let printed = lang::print(&program);
    assert_eq!(lang::parse(&printed).as_ref(), Ok(&program), "an accepted program does not print back to itself");
    match lift(&program) {
        Ok(graph) => {
            let _ = format!("{graph:?}").len();
            Outcome::Accepted
        }
        Err(refusal) => {
            assert!(!refusal.diagnostics.is_empty(), "a refusal without a diagnostic");
            let _ = refusal.to_string();
            Outcome::Rejected
        }
    }
}

const SPATIAL_WORDS: &[&str] = &[
    "tensor",
    "role=",
    "home=",
    "hbm",
    "sram",
    "host",
    "ddr",
    "temp",
    "storage=",
    "q8_0",
    "shared",
    "chip=",
    "sn40l",
    "program",
    "section",
    "stage",
    "weight",
    "input",
    "state",
    "output",
    "activation",
    "f32",
    "i32",
    "bf16",
    "q8",
    "fold=q8",
    "pcus=",
    "pmus=",
    "tiles=",
    "pcu=",
    "pmu=",
    "prefetch",
    "chips=",
    "all_reduce",
    "tp",
    Op::Slice.name(),
    Op::Shard.name(),
    "matmul",
    Op::RmsNorm.name(),
    Op::Silu.name(),
    Op::GeluTanh.name(),
    Op::Attend.name(),
    Op::Rope.name(),
    "softmax",
    Op::Add.name(),
    Op::Mul.name(),
    "scale=",
    "eps=",
    "offset=",
    "window=",
    "style=",
    "neox",
    "interleaved",
    "top_k=",
    "..",
    "=",
    ":",
    "[",
    "]",
    "(",
    ")",
    ",",
    "{",
    "}",
    "\n",
    "  ",
];

/// Spatial text: parse; an accepted program prints and parses back to itself, and its JSON form
/// reads back too.
fn exercise_spatial(input: &[u8]) -> Outcome {
    let text = text(input);
    match rdu_spatial::text::parse(&text) {
        Ok(p) => {
            let printed = rdu_spatial::text::print(&p);
            // Compared as printed text: a `nan` literal is not equal to itself.
            let back = rdu_spatial::text::parse(&printed)
                .unwrap_or_else(|e| panic!("an accepted program prints to text that does not parse: {e}\n{printed}"));
            assert_eq!(rdu_spatial::text::print(&back), printed, "an accepted program does not print back to itself");
            let json = rdu_spatial::text::to_json(&p);
            let from_json = rdu_spatial::text::from_json(&json)
                .unwrap_or_else(|e| panic!("an accepted program's JSON does not read back: {e}"));
            assert_eq!(rdu_spatial::text::print(&from_json), printed, "JSON round trip");
            Outcome::Accepted
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            Outcome::Rejected
        }
    }
}

/// `manifest.json`: read beside its seed bundle's program files (format, version, fields,
/// hashes), then every problem validation finds; an accepted manifest writes back to JSON
/// that reads as itself.
fn manifest_target(dir: &Path) -> Result<Target, String> {
    let mut seeds = Vec::new();
    let mut bundles: Vec<BTreeMap<String, String>> = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    names.sort();
    for bundle in names {
        let mut files = BTreeMap::new();
        let mut manifest = None;
        for (name, bytes) in read_dir(&bundle)? {
            let text = String::from_utf8(bytes).map_err(|_| format!("{}/{name}: not UTF-8", bundle.display()))?;
            if name == "manifest.json" {
                manifest = Some(text);
            } else {
                files.insert(name, text);
            }
        }
        let manifest = manifest.ok_or_else(|| format!("{}: no manifest.json", bundle.display()))?;
        let name = bundle.file_name().unwrap_or_default().to_string_lossy().into_owned();
        seeds.push(Seed { hot: manifest.len(), name, bytes: manifest.into_bytes() });
        bundles.push(files);
    }
    if seeds.is_empty() {
        return Err(format!("{}: no seed bundles", dir.display()));
    }
    let tokens = distinct_tokens(&seeds);
    let exercise = move |input: &[u8], origin: usize| {
        let files = bundles[origin % bundles.len()].clone();
        match Bundle::from_manifest_text(&text(input), "manifest.json", files) {
            Ok(bundle) => {
                let problems = bundle.problems();
                for p in &problems {
                    assert!(!p.to_string().is_empty());
                }
                let json = bundle.manifest.to_json();
                let back: rdu_spatial::manifest::Manifest = serde_json::from_str(&json)
                    .unwrap_or_else(|e| panic!("a manifest read writes JSON that does not read back: {e}"));
                assert_eq!(back, bundle.manifest, "manifest JSON round trip");
                if problems.is_empty() {
                    let _ = bundle.manifest.schedule.layer_order().count();
                    Outcome::Accepted
                } else {
                    Outcome::Rejected
                }
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                Outcome::Rejected
            }
        }
    };
    Ok(Target {
        name: "manifest",
        what: "manifest.json: read (format, version, fields, hashes) and validate",
        format: Format::Json,
        seeds,
        tokens,
        dictionary: MANIFEST_WORDS.to_vec(),
        exercise: Box::new(exercise),
    })
}

const MANIFEST_WORDS: &[&str] = &[
    "format",
    "version",
    "programs",
    "embed",
    "head",
    "kinds",
    "layers",
    "bind",
    "tensors",
    "inputs",
    "role",
    "tokens",
    "position",
    "sequence",
    "states",
    "shared",
    "activations",
    "slices",
    "schedule",
    "loop",
    "q8_0",
    "f32",
    "bf16",
    "source_blake3",
    "spatial_blake3",
    "programs/embed.rdu",
    "programs/../manifest.json",
    "/etc/passwd",
    "",
    "tp",
    "chips",
    "axis",
    "parts",
];

/// The config import's keys; its `model_type` values come from `MODEL_TYPES` itself.
const CONFIG_WORDS: &[&str] = &[
    "model_type",
    "architectures",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "yarn",
    "linear",
    "factor",
    "sliding_window",
    "layer_types",
    "full_attention",
    "sliding_attention",
    "linear_attention",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "text_config",
    "tie_word_embeddings",
    "torch_dtype",
    "bfloat16",
];

/// `config.json`: the import, both layouts; an accepted config's spec is formatted whole.
fn exercise_config(input: &[u8]) -> Outcome {
    match rdu_compiler::model::config::from_config_json(&text(input), "fuzz") {
        Ok(spec) => {
            let _ = format!("{spec:?}").len();
            Outcome::Accepted
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            Outcome::Rejected
        }
    }
}

const CHIP_WORDS: &[&str] = &[
    "name",
    "description",
    "pcus",
    "pmus",
    "sram_bytes",
    "hbm_bytes",
    "hbm_bandwidth",
    "ddr_bytes",
    "ddr_bandwidth",
    "peak_flops_bf16",
    "peak_flops_fp8",
    "clock",
    "pmu_sram_bytes",
    "pmu_bytes_per_cycle",
    "pcu_flops_bf16",
    "pcu_flops_fp8",
    "link_bandwidth",
    "link_latency",
    "reconfiguration",
    "pipeline_fill",
    "synchronisation",
    "mesh_rows",
    "mesh_cols",
    "hop",
    "value",
    "unit",
    "units",
    "bytes",
    "source",
    "assumption",
    "[",
    "]",
    "=",
    "\"",
    "{",
    "}",
    "#",
];

/// Chip TOML: load (every figure, provenance, consistency); an accepted chip then places a
/// memory demand and costs a small step, as `rdu lower` does with it.
fn exercise_chip(input: &[u8]) -> Outcome {
    match Chip::from_toml_str(&text(input), "fuzz.toml") {
        Ok(chip) => {
            let _ = (chip.pmu_bandwidth(), chip.mesh_tiles());
            for demand in [(0, 0), (1 << 30, 1 << 20), (u64::MAX / 2, u64::MAX / 2)] {
                let _ = place(&chip, MemoryDemand { weight_bytes: demand.0, state_bytes: demand.1 });
            }
            let stage = |name: &str, pcus: u32| StageWork {
                name: name.into(),
                flops: 1 << 30,
                hbm_bytes: 1 << 24,
                ddr_bytes: 1 << 10,
                sram_bytes: 1 << 20,
                link_bytes: 1 << 12,
                pcus,
                pmus: pcus,
                tiles: 8,
                hops: 3,
                after: None,
            };
            let input = CostInput { sections: vec![vec![stage("a", 1), stage("b", chip.pcus.max(1))]] };
            for precision in [Precision::Bf16, Precision::Fp8] {
                let _ = estimate(&chip, &input, precision).map_err(|e| e.to_string());
            }
            Outcome::Accepted
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            Outcome::Rejected
        }
    }
}

const SAFETENSORS_WORDS: &[&str] = &[
    "dtype",
    "shape",
    "data_offsets",
    "__metadata__",
    "F32",
    "F16",
    "BF16",
    "F64",
    "I8",
    "U8",
    "I32",
    "I64",
    "BOOL",
    "F8_E4M3",
    "format",
    "pt",
];

/// The header region of a safetensors file: the length prefix and the JSON.
fn safetensors_hot(bytes: &[u8]) -> usize {
    let len = bytes.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    usize::try_from(len).unwrap_or(usize::MAX).saturating_add(8).min(bytes.len())
}

/// safetensors: open from bytes, then every tensor read as f32 (its length checked), and as
/// the FP8 (DeepSeek) and MXFP4 (gpt-oss) readers read it: each value dequantised.
fn exercise_safetensors(input: &[u8]) -> Outcome {
    match SafeTensors::from_bytes("fuzz.safetensors", input.to_vec()) {
        Ok(st) => {
            let names: Vec<String> = st.names().map(str::to_string).collect();
            for name in names {
                let n: Option<usize> = st.shape(&name).map(|s| s.iter().product());
                let _ = st.dtype(&name);
                if let Ok(values) = st.read_f32(&name) {
                    assert_eq!(Some(values.len()), n, "{name}: read_f32 length is not the shape's");
                }
                if let Ok(w) = st.read_fp8(&name, [2, 3]) {
                    assert_eq!(Some(w.dequantize().len()), n, "{name}: fp8 values are not the shape's");
                }
                let weight = name.strip_suffix("_blocks").unwrap_or(&name);
                if let Ok(w) = st.read_mxfp4(weight) {
                    let shape = st.stored_shape(weight).map(|s| s.iter().product::<usize>());
                    assert_eq!(Some(w.dequantize().len()), shape, "{weight}: mxfp4 values are not the shape's");
                }
            }
            Outcome::Accepted
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            Outcome::Rejected
        }
    }
}

/// The header region of a GGUF file: everything before the tensor data.
fn gguf_hot(bytes: &[u8]) -> usize {
    Gguf::from_bytes("seed", bytes.to_vec()).map_or(bytes.len(), |g| g.data_start() as usize)
}

/// GGUF: open, every metadata getter, every tensor read (dense and Q8_0), the ModelSpec import,
/// and the file's tokenizer (built, end ids, a round of encoding and decoding).
fn exercise_gguf(input: &[u8]) -> Outcome {
    let gguf = match Gguf::from_bytes("fuzz.gguf", input.to_vec()) {
        Ok(g) => g,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return Outcome::Rejected;
        }
    };
    for (key, value) in gguf.metadata() {
        let _ = (value.as_u64(), value.as_f32(), value.as_str(), value.as_array());
        let _ = gguf.get_u32(key).map_err(|e| e.to_string());
        let _ = gguf.get_str_array(key).map_err(|e| e.to_string());
        let _ = gguf.get_f32_array(key).map_err(|e| e.to_string());
    }
    for tensor in gguf.tensors() {
        let n: usize = tensor.shape.iter().product();
        if let Ok(values) = gguf.read_f32(&tensor.name) {
            assert_eq!(values.len(), n, "{}", tensor.name);
        }
        if let Ok(q8) = gguf.read_q8_0(&tensor.name) {
            assert_eq!(q8.n_elements(), n, "{}", tensor.name);
        }
    }
    let spec = rdu_compiler::model::gguf::from_gguf(&gguf, "fuzz");
    if let Ok(spec) = &spec {
        let _ = format!("{spec:?}").len();
    }
    let _ = rdu_host::Tokenizer::check_gguf(&gguf).map_err(|e| e.to_string());
    let _ = rdu_host::Tokenizer::gguf_end_ids(&gguf).map_err(|e| e.to_string());
    if let Ok(tok) = rdu_host::Tokenizer::from_gguf(&gguf) {
        drive_tokenizer(&tok);
    }
    if spec.is_ok() {
        Outcome::Accepted
    } else {
        Outcome::Rejected
    }
}

const TOKENIZER_WORDS: &[&str] = &[
    "version",
    "truncation",
    "padding",
    "added_tokens",
    "normalizer",
    "pre_tokenizer",
    "post_processor",
    "decoder",
    "model",
    "type",
    "BPE",
    "WordPiece",
    "WordLevel",
    "Unigram",
    "ByteLevel",
    "Metaspace",
    "Sequence",
    "Split",
    "Replace",
    "Prepend",
    "ByteFallback",
    "Fuse",
    "Strip",
    "NFC",
    "NFKC",
    "Lowercase",
    "TemplateProcessing",
    "vocab",
    "merges",
    "unk_token",
    "byte_fallback",
    "dropout",
    "continuing_subword_prefix",
    "end_of_word_suffix",
    "fuse_unk",
    "ignore_merges",
    "special",
    "content",
    "id",
    "pattern",
    "Regex",
    "String",
    "behavior",
    "Isolated",
    "replacement",
    "prepend_scheme",
    "always",
    "first",
    "never",
    "add_prefix_space",
    "trim_offsets",
    "use_regex",
    "<s>",
    "</s>",
    "<unk>",
    "<|endoftext|>",
    "▁",
    "Ġ",
    "(?i:'s|'t)",
    "\\p{L}+",
    "[",
    "(",
    "\\",
    "*",
];

/// `tokenizer.json`: load from its text, then a round of encoding and decoding.
fn exercise_tokenizer(input: &[u8]) -> Outcome {
    match rdu_host::Tokenizer::from_tokenizer_json_text(&text(input), "tokenizer.json") {
        Ok(tok) => {
            drive_tokenizer(&tok);
            Outcome::Accepted
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            Outcome::Rejected
        }
    }
}

/// Encodes and decodes a few texts (ASCII, accents, CJK, emoji, controls, special tokens) and
/// decodes ids around the vocabulary's ends, streaming included.
fn drive_tokenizer(tok: &rdu_host::Tokenizer) {
    const TEXTS: [&str; 4] =
        ["Hello world, héllo 123!", " <s>a</s>\n\t\u{0}  <|endoftext|>", "日本語 🦀 naïve", "aaaaaaaaaaaaaaaaaaaa bb"];
    let vocab = tok.vocab_size() as u32;
    for text in TEXTS {
        for bos in [false, true] {
            if let Ok(ids) = tok.encode(text, bos) {
                let _ = tok.decode(&ids);
                let mut stream = rdu_host::StreamDecoder::new();
                for &id in &ids {
                    let _ = stream.push(tok, id);
                }
                let _ = stream.finish();
            }
        }
    }
    let ids = [0, 1, 2, vocab.saturating_sub(1), vocab, vocab.saturating_add(1), u32::MAX];
    let _ = tok.decode(&ids);
    for id in ids {
        let _ = (tok.piece_bytes(id), tok.decode_piece(id), tok.token_type(id));
    }
    let _ = (tok.bos(), tok.eos(), tok.add_bos_default());
}
