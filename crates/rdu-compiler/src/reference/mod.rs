//! The reference runner: embedding → every layer's lifted program evaluated by
//! `graph::eval` with that layer's weights and state → head. Slow and plain on purpose —
//! it is what conformance tests hold against transformers, and what certification and the
//! spatial engine are held against.
//!
//! Each layer runs its OWN authored program (not its kind's representative), so the runner
//! checks the author and the interpreter without relying on the kinds machinery.

mod weights;

pub use weights::{GgufWeights, HfWeights, SeededWeights, WeightSource};

use crate::front::lift;
use crate::graph::{eval, Bindings, Graph, Tensor};
use crate::lang::{ast::DeclKind, Source};
use crate::model::author::{embed_source, head_source, source_of};
use crate::model::spec::{Cut, ModelSpec};
use crate::model::storage::{Format, Storage};
use rdu_spatial::manifest::RopeTable;
use rdu_spatial::names::parse_rope_table;
use std::collections::BTreeMap;
use std::sync::Arc;

type Map = BTreeMap<String, Arc<Tensor>>;

/// One authored program, parsed and lifted, with its declarations.
struct Lifted {
    graph: Graph,
    decls: Vec<(DeclKind, String, Vec<usize>)>,
    /// Weights stored in a block format: the runner reads them as their dequantised blocks.
    stored: BTreeMap<String, Format>,
}

fn lift_source(what: &str, source: &Source) -> Result<Lifted, String> {
    let program = source.program().map_err(|d| format!("{what}: authored program does not parse: {}", d[0]))?;
    let graph = lift(program).map_err(|r| format!("{what}: authored program does not lift: {}", r.diagnostics[0]))?;
    let decls = program.decls().map(|d| (d.kind, d.name.text.clone(), d.ty.shape.clone())).collect();
    Ok(Lifted { graph, decls, stored: source.stored.clone() })
}

/// The programs of one cut, lifted.
struct Programs {
    embed: Lifted,
    layers: Vec<Lifted>,
    head: Lifted,
}

impl Programs {
    fn new(spec: &ModelSpec, cut: Cut, storage: &Storage) -> Result<Programs, String> {
        let layers = (0..spec.n_layers())
            .map(|l| lift_source(&format!("layer {l}"), &source_of(spec, l, cut, storage)))
            .collect::<Result<_, _>>()?;
        Ok(Programs {
            embed: lift_source("embedding", &embed_source(spec, cut, storage))?,
            layers,
            head: lift_source("head", &head_source(spec, cut, storage))?,
        })
    }
}

/// The result of one step: logits `[rows, vocab]` and every layer's output.
pub struct StepOut {
    pub logits: Tensor,
    /// The embedding output, then each layer's output (`x`, `xo0`, …, `xo{L-1}`).
    pub hidden: Vec<Tensor>,
}

/// Runs a model through the reference interpreter.
pub struct Reference<'w> {
    spec: ModelSpec,
    storage: Storage,
    weights: &'w dyn WeightSource,
    loaded: Map,
    shared: Map,
}

impl<'w> Reference<'w> {
    pub fn new(spec: &ModelSpec, storage: Storage, weights: &'w dyn WeightSource) -> Reference<'w> {
        Reference { spec: spec.clone(), storage, weights, loaded: Map::new(), shared: Map::new() }
    }

    /// One forward step over the whole sequence `tokens` (positions 0..T), no cache.
    pub fn forward(&mut self, tokens: &[u32]) -> Result<StepOut, String> {
        if tokens.is_empty() {
            return Err("no tokens to run".into());
        }
        let programs = Programs::new(&self.spec, Cut::Forward { seq: tokens.len() }, &self.storage)?;
        let mut states = Map::new();
        self.step(&programs, tokens, 0, &mut states)
    }

    /// A decoder over a cache of `ctx` positions; feed it one token at a time.
    pub fn decoder(&mut self, ctx: usize) -> Result<Decoder<'_, 'w>, String> {
        if ctx == 0 {
            return Err("the context must hold at least one position".into());
        }
        let programs = Programs::new(&self.spec, Cut::Decode { ctx }, &self.storage)?;
        Ok(Decoder { reference: self, programs, states: Map::new(), ctx })
    }

    fn step(&mut self, programs: &Programs, tokens: &[u32], pos: usize, states: &mut Map) -> Result<StepOut, String> {
        let toks: Vec<i32> = tokens
            .iter()
            .map(|&t| {
                if (t as usize) < self.spec.vocab {
                    Ok(t as i32)
                } else {
                    Err(format!("token id {t} is out of range: the vocabulary has {} tokens", self.spec.vocab))
                }
            })
            .collect::<Result<_, _>>()?;
        let mut inputs = Map::new();
        inputs.insert("tok".into(), Arc::new(Tensor::i32(vec![toks.len()], toks)));
        inputs.insert("pos".into(), Arc::new(Tensor::i32(vec![], vec![pos as i32])));
        let mut x = self.run(&programs.embed, &inputs, states)?.remove("x").ok_or("embedding produced no `x`")?;
        let mut hidden = vec![x.clone()];
        for (l, layer) in programs.layers.iter().enumerate() {
            inputs.insert(crate::model::author::hidden_name(l), Arc::new(x));
            let mut out = self.run(layer, &inputs, states)?;
            x = out.remove(&format!("xo{l}")).ok_or_else(|| format!("layer {l} produced no `xo{l}`"))?;
            hidden.push(x.clone());
        }
        inputs.insert(crate::model::author::hidden_name(self.spec.n_layers()), Arc::new(x));
        let logits = self.run(&programs.head, &inputs, states)?.remove("logits").ok_or("head produced no `logits`")?;
        Ok(StepOut { logits, hidden })
    }

    /// Evaluates one program: loads its weights, computes its shared tables, zero-fills new
    /// states, and writes back the states it updates.
    fn run(&mut self, program: &Lifted, inputs: &Map, states: &mut Map) -> Result<BTreeMap<String, Tensor>, String> {
        for (kind, name, shape) in &program.decls {
            match kind {
                DeclKind::Weight if !self.loaded.contains_key(name) => {
                    let stored = self.weights.stores(name);
                    let deployed = program.stored.get(name).copied();
                    if let (Some(Format::Fp8 { .. }), false) = (stored, stored == deployed) {
                        // As the host refuses it: FP8 values read as another storage.
                        let as_what = deployed.map_or("dense".to_string(), |f| f.word());
                        return Err(format!(
                            "`{name}` is stored F8_E4M3 with block scales, which a {as_what} weight cannot read (lower with --storage auto)"
                        ));
                    }
                    let mut t = self.weights.weight(name, shape)?;
                    if let Some(format) = deployed.filter(|&f| stored != Some(f)) {
                        t = as_stored(t, format)?;
                    }
                    self.loaded.insert(name.clone(), Arc::new(t));
                }
                DeclKind::Shared if self.shared.get(name).is_none_or(|t| t.shape != *shape) => {
                    let t = shared_table(&self.spec, name, shape)?;
                    self.shared.insert(name.clone(), Arc::new(t));
                }
                DeclKind::State if !states.contains_key(name) => {
                    states.insert(name.clone(), Arc::new(Tensor::zeros(shape.clone())));
                }
                _ => {}
            }
        }
        let env = Env { layers: [inputs, &self.loaded, &self.shared, states] };
        let evaluated = eval(&program.graph, &env).map_err(|e| e.to_string())?;
        for (name, t) in evaluated.states {
            states.insert(name, Arc::new(t));
        }
        Ok(evaluated.outputs)
    }
}

/// Token-by-token decoding with carried state.
pub struct Decoder<'r, 'w> {
    reference: &'r mut Reference<'w>,
    programs: Programs,
    states: Map,
    ctx: usize,
}

impl Decoder<'_, '_> {
    /// Feeds `token` at position `pos`; returns its logits row and every layer's output.
    pub fn step(&mut self, token: u32, pos: usize) -> Result<StepOut, String> {
        if pos >= self.ctx {
            return Err(format!("position {pos} is past the context of {} positions", self.ctx));
        }
        self.reference.step(&self.programs, &[token], pos, &mut self.states)
    }
}

struct Env<'a> {
    layers: [&'a Map; 4],
}

impl Bindings for Env<'_> {
    fn tensor(&self, name: &str) -> Option<Arc<Tensor>> {
        self.layers.iter().find_map(|m| m.get(name).cloned())
    }
}

/// A weight as a deployment stores it in `format` when the checkpoint holds it otherwise (as
/// the host does: `rdu_host::weights`): quantised to its blocks, read back dequantised.
fn as_stored(t: Tensor, format: Format) -> Result<Tensor, String> {
    let shape = t.shape.clone();
    let values = t.into_f32();
    let dequantised = match format {
        Format::Q8_0 => rdu_checkpoint::quantize_q8_0(&values, &shape).map_err(|e| e.to_string())?.dequantize(),
        Format::Fp8 { rows, cols } => {
            rdu_checkpoint::quantize_fp8(&values, &shape, [rows as usize, cols as usize])?.dequantize()
        }
        Format::Mxfp4 => rdu_checkpoint::quantize_mxfp4(&values, &shape)?.dequantize(),
        Format::Dense | Format::Bf16 => values,
    };
    Ok(Tensor::f32(shape, dequantised))
}

/// `cos{r}` / `sin{r}` of `shape` `[rows, dim/2]` for rotation `r` of the spec.
fn shared_table(spec: &ModelSpec, name: &str, shape: &[usize]) -> Result<Tensor, String> {
    let table = parse_rope_table(name).and_then(|(table, r)| Some((table, spec.rotations.get(r)?)));
    let (Some((table, rot)), [rows, _]) = (table, shape) else {
        return Err(format!("unknown shared tensor `{name}`"));
    };
    let (cos, sin) = rdu_spatial::rope::tables(&rot.rope_spec(), *rows);
    let data = if table == RopeTable::Cos { cos } else { sin };
    Ok(Tensor::f32(shape.to_vec(), data))
}
