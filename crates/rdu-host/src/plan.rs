//! What a step takes and checks: how many tokens, the context, the vocabulary, and how the runtime inputs are filled.
//!
//! The manifest's `inputs` are filled by their `role`: `tokens` (i32 `[rows]`) with the step's
//! token ids; `position` with the position of the step (or of its `sequence` in a batched
//! step) — a scalar, or `[rows]` holding consecutive positions. Nothing is read from a name.
//! Any other runtime input is refused at load.

use std::collections::BTreeMap;

use rdu_spatial::manifest::{CutMode, InputRole, Manifest};
use rdu_spatial::{Arg, Op, SimTensor, SpatialProgram};

use crate::error::{HostError, Result};

/// How one runtime input is filled.
#[derive(Clone, Debug, PartialEq)]
enum Feed {
    Tokens(String),
    /// A position input: a scalar, or one consecutive position per row; `seq` is the
    /// sequence of a batched step whose position it is, `None` for the whole step's.
    Position {
        name: String,
        per_row: bool,
        seq: Option<usize>,
    },
}

/// The step's shape and checks, fixed when the bundle is loaded.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    /// Token ids per step.
    pub rows: usize,
    /// Positions the programs (caches, RoPE tables) hold.
    pub ctx: usize,
    /// Consecutive positions one step covers: `rows`, or 1 when every row is its own sequence.
    pub span: usize,
    /// Sequences of one step, each with its own position: the batch, or 1.
    pub sequences: usize,
    pub vocab: usize,
    /// The head's output that holds the logits.
    pub logits: String,
    feeds: Vec<Feed>,
}

impl Plan {
    pub fn new(dir: &str, manifest: &Manifest, embed: &SpatialProgram, head: &SpatialProgram) -> Result<Plan> {
        let fail = |name: &str, problem: String| HostError::Input { dir: dir.to_string(), name: name.into(), problem };
        let mut feeds = Vec::new();
        let mut rows = None;
        let mut per_row = Vec::new();
        for input in &manifest.inputs {
            if input.dtype != "i32" {
                return Err(fail(&input.name, format!("has dtype {}; token and position inputs are i32", input.dtype)));
            }
            let (name, seq) = (input.name.clone(), input.sequence);
            match (input.role, input.shape.as_slice()) {
                (InputRole::Tokens, &[n]) if seq.is_none() => {
                    rows = Some(n);
                    feeds.push(Feed::Tokens(name));
                }
                (InputRole::Position, []) => feeds.push(Feed::Position { name, per_row: false, seq }),
                (InputRole::Position, &[n]) => {
                    per_row.push((name.clone(), n));
                    feeds.push(Feed::Position { name, per_row: true, seq });
                }
                (role, shape) => {
                    let problem = format!(
                        "a {} input of shape {shape:?}{} is not one this host fills (tokens [rows] for the whole step, positions [] or [rows])",
                        role.word(),
                        seq.map(|b| format!(" for sequence {b}")).unwrap_or_default(),
                    );
                    return Err(fail(&input.name, problem));
                }
            }
        }
        let rows = rows.ok_or_else(|| fail("tok", "the manifest declares no token input".into()))?;
        if let Some((name, n)) = per_row.into_iter().find(|(_, n)| *n != rows) {
            return Err(fail(&name, format!("holds {n} positions for {rows} rows; give one per row or a scalar")));
        }
        let batched = matches!(manifest.cut.mode, CutMode::Batched | CutMode::BatchedTp);
        let span = if batched { 1 } else { rows };
        let sequences = if batched { rows } else { 1 };
        if let Some((name, b)) = feeds.iter().find_map(|f| match f {
            Feed::Position { name, seq: Some(b), .. } if *b >= sequences => Some((name, *b)),
            _ => None,
        }) {
            return Err(fail(name, format!("names sequence {b} of a step of {sequences}")));
        }
        let ctx = manifest.cut.ctx.or(manifest.cut.seq).unwrap_or(rows);
        let logits = match head.outputs.as_slice() {
            outs if outs.iter().any(|o| o == "logits") => "logits".to_string(),
            [only] => only.clone(),
            _ => return Err(HostError::NoOutput { program: "the head program".into(), name: "logits".into() }),
        };
        let vocab = vocab(embed, manifest, &logits)
            .ok_or_else(|| fail("tok", "neither the embedding table nor the logits give the vocabulary".into()))?;
        Ok(Plan { rows, ctx, span, sequences, vocab, logits, feeds })
    }

    /// Refuses a step that would run past the context, a wrong number of tokens or positions,
    /// or an unknown token. `positions` holds each sequence's position (one for a single sequence).
    pub fn check(&self, tokens: &[u32], positions: &[usize]) -> Result<()> {
        if tokens.len() != self.rows {
            return Err(HostError::Rows { rows: self.rows, given: tokens.len() });
        }
        if positions.len() != self.sequences {
            return Err(HostError::Positions { sequences: self.sequences, given: positions.len() });
        }
        if let Some(&token) = tokens.iter().find(|&&t| t as usize >= self.vocab || i32::try_from(t).is_err()) {
            return Err(HostError::Token { token, vocab: self.vocab });
        }
        for &pos in positions {
            if pos >= self.ctx {
                return Err(HostError::PastContext { pos, ctx: self.ctx });
            }
            let end = pos.saturating_add(self.span);
            if end > self.ctx || i32::try_from(end).is_err() {
                return Err(HostError::RowsPastContext { pos, end, ctx: self.ctx });
            }
        }
        Ok(())
    }

    /// The runtime inputs of a checked step, by name.
    pub fn inputs(&self, tokens: &[u32], positions: &[usize]) -> BTreeMap<String, SimTensor> {
        let pos = positions[0];
        // `check` bounds every token by the vocabulary and every position by an i32 end.
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        let mut out = BTreeMap::new();
        for feed in &self.feeds {
            let (name, tensor) = match feed {
                Feed::Tokens(name) => (name, SimTensor::i32(vec![ids.len()], ids.clone())),
                Feed::Position { name, per_row: false, seq: Some(b) } => {
                    (name, SimTensor::scalar_i32(positions[*b] as i32))
                }
                Feed::Position { name, per_row: false, seq: None } => (name, SimTensor::scalar_i32(pos as i32)),
                Feed::Position { name, per_row: true, .. } => {
                    // Consecutive positions, or the same one for every row when each row is its own sequence.
                    let positions = (0..self.rows).map(|r| (pos + r.min(self.span - 1)) as i32).collect();
                    (name, SimTensor::i32(vec![self.rows], positions))
                }
            };
            out.insert(name.clone(), tensor);
        }
        out
    }
}

/// The vocabulary: the rows of the table the embedding program's `embed` looks up, else the logits' width.
fn vocab(embed: &SpatialProgram, manifest: &Manifest, logits: &str) -> Option<usize> {
    let table = embed.ops().find(|(_, op)| op.op == Op::Embed).and_then(|(_, op)| match op.args.get(1) {
        Some(Arg::Tensor(name)) => embed.decl(name).and_then(|d| d.shape.first().copied()),
        _ => None,
    });
    table.or_else(|| manifest.activations.iter().find(|a| a.name == logits).and_then(|a| a.shape.last().copied()))
}
