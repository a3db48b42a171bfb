//! What a step takes and checks: how many tokens, the context, the vocabulary, and how the runtime inputs are filled.
//!
//! The manifest's `inputs` are filled by their `role`: `tokens` (i32 `[rows]`) with the step's
//! token ids; `position` with the position of the step (or of its `sequence` in a batched
//! step) — a scalar, or one consecutive position per row of the sequence; a verify step's
//! `resume` and `pending` inputs from what the host was told the previous verify step accepted
//! ([`Continue`]). Nothing is read from a name. Any other runtime input is refused at load.

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
    /// A verify step's resume row (`i32[1]`) of a sequence.
    Resume {
        name: String,
        seq: Option<usize>,
    },
    /// A verify step's positions for the previous step's drafted rows (`i32[draft]`) of a sequence.
    Pending {
        name: String,
        seq: Option<usize>,
    },
}

/// How a verify step continues one sequence from the step before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Continue {
    /// From the states as they are: a new sequence, or states a prefill or decode bundle left.
    Fresh,
    /// After row `valid - 1` of the previous verify step: its first `valid` rows stand (the last
    /// accepted token and `valid - 1` drafted ones), the others are discarded.
    After { valid: usize },
}

/// The step's shape and checks, fixed when the bundle is loaded.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    /// Token ids per step.
    pub rows: usize,
    /// Positions the programs (caches, RoPE tables) hold.
    pub ctx: usize,
    /// Consecutive positions one step covers of each sequence: `rows`, 1 when every row is its
    /// own sequence, a verify step's `draft + 1`.
    pub span: usize,
    /// A verify step's drafted tokens per sequence.
    pub draft: Option<usize>,
    /// Sequences of one step, each with its own position: the batch, or 1.
    pub sequences: usize,
    pub vocab: usize,
    /// The head's output that holds the logits.
    pub logits: String,
    /// A multi-token-prediction block's input of the previous rows' hidden state: its name and
    /// width (`f32[rows, width]`, given with each step: `Host::step_hidden`).
    pub hidden: Option<(String, usize)>,
    feeds: Vec<Feed>,
}

impl Plan {
    pub fn new(dir: &str, manifest: &Manifest, embed: &SpatialProgram, head: &SpatialProgram) -> Result<Plan> {
        let fail = |name: &str, problem: String| HostError::Input { dir: dir.to_string(), name: name.into(), problem };
        let mut feeds = Vec::new();
        let mut rows = None;
        let mut per_row = Vec::new();
        let draft = manifest.cut.draft.filter(|_| manifest.cut.mode == CutMode::Verify);
        let mut hidden = None;
        for input in &manifest.inputs {
            if input.role == InputRole::Hidden {
                match (input.dtype.as_str(), input.shape.as_slice(), input.sequence) {
                    ("f32", &[hidden_rows, width], None) => hidden = Some((input.name.clone(), width, hidden_rows)),
                    _ => {
                        let problem =
                            "is a hidden input, which this host fills as f32 [rows, d_model] for the whole step";
                        return Err(fail(&input.name, problem.into()));
                    }
                }
                continue;
            }
            if input.dtype != "i32" {
                return Err(fail(&input.name, format!("has dtype {}; token and position inputs are i32", input.dtype)));
            }
            let (name, seq) = (input.name.clone(), input.sequence);
            match (input.role, input.shape.as_slice(), draft) {
                (InputRole::Tokens, &[n], _) if seq.is_none() => {
                    rows = Some(n);
                    feeds.push(Feed::Tokens(name));
                }
                (InputRole::Position, [], _) => feeds.push(Feed::Position { name, per_row: false, seq }),
                (InputRole::Position, &[n], _) => {
                    per_row.push((name.clone(), n));
                    feeds.push(Feed::Position { name, per_row: true, seq });
                }
                (InputRole::Resume, [1], Some(_)) => feeds.push(Feed::Resume { name, seq }),
                (InputRole::Pending, &[n], Some(k)) if n == k => feeds.push(Feed::Pending { name, seq }),
                (role, shape, _) => {
                    let problem = format!(
                        "a {} input of shape {shape:?}{} is not one this host fills (tokens [rows] for the whole step, positions [] or [rows], a verify step's resume [1] and pending [draft])",
                        role.word(),
                        seq.map(|b| format!(" for sequence {b}")).unwrap_or_default(),
                    );
                    return Err(fail(&input.name, problem));
                }
            }
        }
        let rows = rows.ok_or_else(|| fail("tok", "the manifest declares no token input".into()))?;
        let batched = matches!(manifest.cut.mode, CutMode::Batched | CutMode::BatchedTp);
        let (span, sequences) = match draft {
            Some(k) => (k + 1, manifest.cut.batch.unwrap_or(1)),
            None if batched => (1, rows),
            None => (rows, 1),
        };
        if span * sequences != rows {
            return Err(fail("tok", format!("holds {rows} tokens, not {span} for each of {sequences} sequence(s)")));
        }
        // One position per row of the step (of a sequence's rows in a verify step).
        let per_row_len = if draft.is_some() { span } else { rows };
        if let Some((name, n)) = per_row.into_iter().find(|(_, n)| *n != per_row_len) {
            return Err(fail(
                &name,
                format!("holds {n} positions for {per_row_len} rows; give one per row or a scalar"),
            ));
        }
        if let Some((name, b)) = feeds.iter().find_map(|f| match f {
            Feed::Position { name, seq: Some(b), .. }
            | Feed::Resume { name, seq: Some(b) }
            | Feed::Pending { name, seq: Some(b) }
                if *b >= sequences =>
            {
                Some((name, *b))
            }
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
        if let Some((name, _, _)) = hidden.as_ref().filter(|(_, _, hidden_rows)| *hidden_rows != rows) {
            return Err(fail(name, format!("holds a number of rows other than the step's {rows}")));
        }
        let hidden = hidden.map(|(name, width, _)| (name, width));
        Ok(Plan { rows, ctx, span, draft, sequences, vocab, logits, hidden, feeds })
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

    /// The runtime inputs of a checked step, by name; `how` says how a verify step continues
    /// each sequence (one entry per sequence; ignored by any other bundle).
    pub fn inputs(&self, tokens: &[u32], positions: &[usize], how: &[Continue]) -> BTreeMap<String, SimTensor> {
        // `check` bounds every token by the vocabulary and every position by an i32 end.
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        let draft = self.draft.unwrap_or(0);
        let mut out = BTreeMap::new();
        for feed in &self.feeds {
            let (name, tensor) = match feed {
                Feed::Tokens(name) => (name, SimTensor::i32(vec![ids.len()], ids.clone())),
                Feed::Position { name, per_row: false, seq } => {
                    (name, SimTensor::scalar_i32(positions[seq.unwrap_or(0)] as i32))
                }
                Feed::Position { name, per_row: true, seq } if self.draft.is_some() => {
                    // Consecutive positions of the sequence's rows.
                    let pos = positions[seq.unwrap_or(0)];
                    (name, SimTensor::i32(vec![self.span], (0..self.span).map(|r| (pos + r) as i32).collect()))
                }
                Feed::Position { name, per_row: true, .. } => {
                    // Consecutive positions, or the same one for every row when each row is its own sequence.
                    let pos = positions[0];
                    let positions = (0..self.rows).map(|r| (pos + r.min(self.span - 1)) as i32).collect();
                    (name, SimTensor::i32(vec![self.rows], positions))
                }
                Feed::Resume { name, seq } => {
                    let row = match how.get(seq.unwrap_or(0)) {
                        Some(Continue::After { valid }) => valid - 1,
                        _ => draft,
                    };
                    (name, SimTensor::i32(vec![1], vec![row as i32]))
                }
                Feed::Pending { name, seq } => {
                    // The previous step's drafted row `i` stood at `pos - accepted + i`.
                    let pos = positions[seq.unwrap_or(0)];
                    let accepted = match how.get(seq.unwrap_or(0)) {
                        Some(Continue::After { valid }) => valid - 1,
                        _ => 0,
                    };
                    let at = |i: usize| if i < accepted { pos - accepted + i } else { pos };
                    (name, SimTensor::i32(vec![draft], (0..draft).map(|i| at(i) as i32).collect()))
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
