//! The text form of a `SpatialProgram`: a stable, line-based printer and its parser.
//!
//! ```text
//! program attention_dense chip=sn50
//! tensor xo0 : f32[1, 64] role=input home=hbm
//! tensor Wq1 : f32[64, 64] storage=q8_0 role=weight home=hbm
//! section 0
//! stage s0 pcus=4 pmus=2 pcu=0..4 pmu=0..2 prefetch
//!   h1 = rms_norm(xo0, an1, eps=1e-6, offset=0)
//!   q1 = linear(h1, Wq1) fold=q8 tile(axis=1, [0..32, 32..64])
//! output xo1
//! ```
//!
//! Lines in order: `program`, then optionally `tp chips=N`, `split T axis=A [stored=N] [s..e, ...]` and
//! `all_reduce STAGE`, the `tensor` declarations, the `section`s with their `stage`s and
//! indented op lines, and the `output`s. Floats print shortest-round-trip (`{:?}`); an
//! integer never has a `.` or an exponent. Words print bare where they are identifiers and
//! quoted otherwise (always quoted as a positional argument, where a bare name is a
//! tensor). `parse(print(p)) == p` for every program whose names are identifiers and whose
//! floats are not NaN; `print(parse(t)) == t` for every printed `t`.

mod cursor;
mod lex;
mod parse;

use std::fmt::Write;

use crate::program::{Arg, KernelOp, Lit, SpatialProgram, Storage, TensorDecl, Tiling};

/// A text or JSON form that does not describe a program.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error("line {line}: {message}")]
    Syntax { line: usize, message: String },
    #[error("json: {message}")]
    Json { message: String },
}

/// The program's text form, one line per item, ending in a newline.
pub fn print(program: &SpatialProgram) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "program {} chip={}", program.name, program.chip);
    if let Some(tp) = &program.tp {
        let _ = writeln!(out, "tp chips={}", tp.chips);
        for split in &tp.splits {
            let stored = split.stored.map_or(String::new(), |n| format!(" stored={n}"));
            let _ = writeln!(out, "split {} axis={}{stored} {}", split.tensor, split.axis, chip_ranges(&split.parts));
        }
        for stage in &tp.all_reduce {
            let _ = writeln!(out, "all_reduce {stage}");
        }
    }
    for decl in &program.tensors {
        out.push_str(&decl_line(decl));
        out.push('\n');
    }
    for (idx, section) in program.sections.iter().enumerate() {
        let _ = writeln!(out, "section {idx}");
        for stage in &section.stages {
            let _ = write!(out, "stage {} pcus={} pmus={}", stage.name, stage.pcus, stage.pmus);
            if let Some(r) = &stage.region {
                let _ = write!(out, " pcu={}..{} pmu={}..{}", r.pcu.0, r.pcu.1, r.pmu.0, r.pmu.1);
            }
            out.push_str(if stage.prefetch { " prefetch\n" } else { "\n" });
            for op in &stage.ops {
                let _ = writeln!(out, "  {}", op_line(op));
            }
        }
    }
    for name in &program.outputs {
        let _ = writeln!(out, "output {name}");
    }
    out
}

/// Parses a program's text form; the first error names its line.
pub fn parse(text: &str) -> Result<SpatialProgram, TextError> {
    parse::program(text)
}

/// The program's JSON form (pretty-printed, fields in declaration order).
pub fn to_json(program: &SpatialProgram) -> String {
    serde_json::to_string_pretty(program).unwrap_or_default()
}

/// Reads a program's JSON form.
pub fn from_json(json: &str) -> Result<SpatialProgram, TextError> {
    serde_json::from_str(json).map_err(|e| TextError::Json { message: e.to_string() })
}

/// One op as it appears on its (indented) line.
pub fn op_line(op: &KernelOp) -> String {
    let mut line = op.outs.join(", ");
    line.push_str(if op.update { " <- " } else { " = " });
    line.push_str(op.op.name());
    line.push('(');
    let positional = op.args.iter().map(|a| match a {
        Arg::Tensor(name) => name.clone(),
        Arg::Lit(Lit::Word(w)) => quote(w),
        Arg::Lit(lit) => lit_text(lit),
    });
    let attrs = op.attrs.iter().map(|(k, v)| format!("{k}={}", lit_text(v)));
    line.push_str(&positional.chain(attrs).collect::<Vec<_>>().join(", "));
    line.push(')');
    if let Some(fold) = op.fold {
        let _ = write!(line, " fold={}", fold.word());
    }
    if let Some(Tiling { axis, tiles }) = &op.tiling {
        let _ = write!(line, " tile(axis={axis}, {})", ranges(tiles));
    }
    line
}

/// A literal as printed in an attribute value or a list.
pub fn lit_text(lit: &Lit) -> String {
    match lit {
        Lit::Int(i) => i.to_string(),
        Lit::Float(f) => float_text(*f),
        Lit::Word(w) if is_plain_word(w) => w.clone(),
        Lit::Word(w) => quote(w),
        Lit::List(items) => format!("[{}]", items.iter().map(lit_text).collect::<Vec<_>>().join(", ")),
    }
}

fn decl_line(decl: &TensorDecl) -> String {
    let dims = decl.shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
    let storage = match decl.storage {
        Storage::Dense => String::new(),
        other => format!(" storage={}", other.word()),
    };
    format!(
        "tensor {} : {}[{dims}]{storage} role={} home={}",
        decl.name,
        decl.dtype.as_str(),
        decl.role.as_str(),
        decl.home.as_str()
    )
}

fn ranges(parts: &[(usize, usize)]) -> String {
    format!("[{}]", parts.iter().map(|(s, e)| format!("{s}..{e}")).collect::<Vec<_>>().join(", "))
}

/// Every chip's ranges: `[[0..4, 8..12], [4..8, 12..16]]`.
fn chip_ranges(chips: &[Vec<(usize, usize)>]) -> String {
    format!("[{}]", chips.iter().map(|p| ranges(p)).collect::<Vec<_>>().join(", "))
}

fn float_text(f: f64) -> String {
    if f.is_nan() {
        "nan".into()
    } else if f.is_infinite() {
        if f > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{f:?}")
    }
}

/// Whether a word prints bare: an identifier that is not a float spelling.
fn is_plain_word(w: &str) -> bool {
    lex::is_ident(w) && !lex::is_float_word(w)
}

fn quote(w: &str) -> String {
    let mut out = String::from("\"");
    for c in w.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
