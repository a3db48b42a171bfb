//! Parses the text form line by line; every error names its line and never panics.

use super::cursor::{show, Cursor, Res};
use super::lex::{tokens, Tok};
use super::TextError;
use crate::program::{
    Arg, Dtype, Fold, Home, KernelOp, Lit, Region, Role, Section, SpatialProgram, Stage, Storage, TensorDecl, Tiling,
    TpInfo, TpSplit,
};

/// Parses a whole program.
pub(super) fn program(text: &str) -> Result<SpatialProgram, TextError> {
    let mut program: Option<SpatialProgram> = None;
    for (idx, raw) in text.split('\n').enumerate() {
        let line = idx + 1;
        let err = |message: String| TextError::Syntax { line, message };
        let toks = tokens(raw).map_err(err)?;
        if toks.is_empty() {
            continue;
        }
        let indented = raw.starts_with(|c: char| c.is_whitespace());
        let mut cur = Cursor { toks: &toks, at: 0 };
        match program.as_mut() {
            None => program = Some(header(&mut cur).map_err(err)?),
            Some(p) if indented => {
                let op = op(&mut cur).map_err(err)?;
                let stage = p.sections.last_mut().and_then(|s| s.stages.last_mut());
                stage.ok_or_else(|| err("op line outside a stage".into()))?.ops.push(op);
            }
            Some(p) => item(&mut cur, p).map_err(err)?,
        }
        cur.end().map_err(err)?;
    }
    program.ok_or(TextError::Syntax { line: 1, message: "expected `program NAME chip=CHIP`".into() })
}

fn header(cur: &mut Cursor<'_>) -> Res<SpatialProgram> {
    if cur.ident("`program`")? != "program" {
        return Err("expected `program NAME chip=CHIP` first".into());
    }
    let name = cur.ident("a program name")?;
    cur.key("chip")?;
    let chip = cur.ident("a chip name")?;
    Ok(SpatialProgram { name, chip, tensors: vec![], sections: vec![], outputs: vec![], tp: None })
}

fn item(cur: &mut Cursor<'_>, p: &mut SpatialProgram) -> Res<()> {
    let keyword = cur.ident("a keyword")?;
    let in_header = p.sections.is_empty() && p.outputs.is_empty();
    match keyword.as_str() {
        "tp" if in_header && p.tensors.is_empty() && p.tp.is_none() => {
            cur.key("chips")?;
            p.tp = Some(TpInfo { chips: cur.count("a chip count")?, splits: vec![], all_reduce: vec![] });
        }
        "split" | "all_reduce" if in_header && p.tensors.is_empty() => {
            let tp = p.tp.as_mut().ok_or_else(|| format!("`{keyword}` before `tp chips=N`"))?;
            let name = cur.ident("a name")?;
            if keyword == "split" {
                cur.key("axis")?;
                let axis = cur.count("an axis")?;
                let stored = match cur.peek() {
                    Some(Tok::Ident(k)) if k == "stored" => {
                        cur.key("stored")?;
                        Some(cur.count("a stored extent")?)
                    }
                    _ => None,
                };
                tp.splits.push(TpSplit { tensor: name, axis, parts: chip_ranges(cur)?, stored });
            } else {
                tp.all_reduce.push(name);
            }
        }
        "tensor" if in_header => p.tensors.push(decl(cur)?),
        "section" if p.outputs.is_empty() => {
            let idx: usize = cur.count("a section index")?;
            if idx != p.sections.len() {
                return Err(format!("expected `section {}`, found section {idx}", p.sections.len()));
            }
            p.sections.push(Section::default());
        }
        "stage" if p.outputs.is_empty() => {
            let section = p.sections.last_mut().ok_or("`stage` before any `section`")?;
            let name = cur.ident("a stage name")?;
            cur.key("pcus")?;
            let pcus = cur.count("a PCU count")?;
            cur.key("pmus")?;
            let pmus = cur.count("a PMU count")?;
            let region = if matches!(cur.peek(), Some(Tok::Ident(k)) if k == "pcu") {
                cur.key("pcu")?;
                let pcu = unit_run(cur)?;
                cur.key("pmu")?;
                Some(Region { pcu, pmu: unit_run(cur)? })
            } else {
                None
            };
            let prefetch = cur.peek().is_some();
            if prefetch && cur.ident("`prefetch`")? != "prefetch" {
                return Err("expected `pcu=`, `prefetch` or the end of the stage line".into());
            }
            section.stages.push(Stage { name, ops: vec![], pcus, pmus, prefetch, region });
        }
        "output" => p.outputs.push(cur.ident("an output name")?),
        "tp" | "split" | "all_reduce" | "tensor" | "section" | "stage" => {
            return Err(format!("`{keyword}` is out of place"));
        }
        other => return Err(format!("unknown line `{other}` (op lines are indented)")),
    }
    Ok(())
}

fn decl(cur: &mut Cursor<'_>) -> Res<TensorDecl> {
    let name = cur.ident("a tensor name")?;
    cur.punct(':')?;
    let dtype = match cur.ident("a dtype")?.as_str() {
        "f32" => Dtype::F32,
        "i32" => Dtype::I32,
        other => return Err(format!("unknown dtype `{other}` (f32 or i32)")),
    };
    cur.punct('[')?;
    let mut shape = Vec::new();
    if !cur.eat(']') {
        loop {
            shape.push(cur.count("a dimension")?);
            if cur.eat(']') {
                break;
            }
            cur.punct(',')?;
        }
    }
    let mut storage = Storage::Dense;
    if cur.peek() == Some(&Tok::Ident("storage".into())) {
        cur.key("storage")?;
        let word = cur.ident("a storage")?;
        storage = Storage::from_word(&word)
            .ok_or_else(|| format!("unknown storage `{word}` (dense, q8_0, bf16, fp8_ROWSxCOLS or mxfp4)"))?;
    }
    cur.key("role")?;
    let role = match cur.ident("a role")?.as_str() {
        "input" => Role::Input,
        "weight" => Role::Weight,
        "shared" => Role::Shared,
        "state" => Role::State,
        "output" => Role::Output,
        "temp" => Role::Temp,
        other => return Err(format!("unknown role `{other}`")),
    };
    cur.key("home")?;
    let home = match cur.ident("a home")?.as_str() {
        "hbm" => Home::Hbm,
        "ddr" => Home::Ddr,
        "sram" => Home::Sram,
        "host" => Home::Host,
        other => return Err(format!("unknown home `{other}` (hbm, ddr, sram or host)")),
    };
    Ok(TensorDecl { name, dtype, shape, storage, role, home })
}

fn op(cur: &mut Cursor<'_>) -> Res<KernelOp> {
    let mut outs = vec![cur.ident("an output name")?];
    while cur.eat(',') {
        outs.push(cur.ident("an output name")?);
    }
    let update = match cur.next() {
        Some(Tok::Punct('=')) => false,
        Some(Tok::Arrow) => true,
        other => return Err(format!("expected `=` or `<-`, found {}", show(other))),
    };
    let name = cur.ident("an op name")?;
    let name: crate::op::Op = name.parse().map_err(|e: crate::op::UnknownOp| e.to_string())?;
    cur.punct('(')?;
    let (mut args, mut attrs) = (Vec::new(), Vec::new());
    if !cur.eat(')') {
        loop {
            let is_attr = matches!(cur.peek(), Some(Tok::Ident(_))) && cur.peek2() == Some(&Tok::Punct('='));
            if is_attr {
                let key = cur.ident("an attribute")?;
                cur.punct('=')?;
                attrs.push((key, lit(cur, 0)?));
            } else if !attrs.is_empty() {
                return Err("positional argument after an attribute".into());
            } else if let Some(Tok::Ident(t)) = cur.peek() {
                args.push(Arg::Tensor(t.clone()));
                cur.at += 1;
            } else {
                args.push(Arg::Lit(lit(cur, 0)?));
            }
            if cur.eat(')') {
                break;
            }
            cur.punct(',')?;
        }
    }
    let mut fold = None;
    if cur.peek() == Some(&Tok::Ident("fold".into())) {
        cur.key("fold")?;
        let word = cur.ident("`q8`, `fp8` or `mxfp4`")?;
        fold = Some(Fold::from_word(&word).ok_or_else(|| format!("unknown fold `{word}` (q8, fp8 or mxfp4)"))?);
    }
    let mut tiling = None;
    if cur.peek() == Some(&Tok::Ident("tile".into())) {
        cur.at += 1;
        cur.punct('(')?;
        cur.key("axis")?;
        let axis = cur.count("an axis")?;
        cur.punct(',')?;
        let tiles = ranges(cur)?;
        cur.punct(')')?;
        tiling = Some(Tiling { axis, tiles });
    }
    Ok(KernelOp { outs, update, op: name, args, attrs, fold, tiling })
}

/// `[s..e, ...]`.
/// Every chip's ranges, `[[s..e, ...], ...]`; the flat `[s..e, ...]` gives each chip one range.
fn chip_ranges(cur: &mut Cursor<'_>) -> Res<Vec<Vec<(usize, usize)>>> {
    if matches!(cur.peek2(), Some(Tok::Punct('['))) && matches!(cur.peek(), Some(Tok::Punct('['))) {
        cur.punct('[')?;
        let mut chips = Vec::new();
        if cur.eat(']') {
            return Ok(chips);
        }
        loop {
            chips.push(ranges(cur)?);
            if cur.eat(']') {
                return Ok(chips);
            }
            cur.punct(',')?;
        }
    }
    Ok(ranges(cur)?.into_iter().map(|r| vec![r]).collect())
}

/// A run of unit indices `s..e` (a stage's region), `s <= e`.
fn unit_run(cur: &mut Cursor<'_>) -> Res<(u32, u32)> {
    let start = cur.count("a unit index")?;
    match cur.next() {
        Some(Tok::DotDot) => {}
        other => return Err(format!("expected `..`, found {}", show(other))),
    }
    let end = cur.count("a unit index")?;
    if end < start {
        return Err(format!("the unit run {start}..{end} ends before it starts"));
    }
    Ok((start, end))
}

fn ranges(cur: &mut Cursor<'_>) -> Res<Vec<(usize, usize)>> {
    cur.punct('[')?;
    let mut out = Vec::new();
    if cur.eat(']') {
        return Ok(out);
    }
    loop {
        let start = cur.count("a range start")?;
        match cur.next() {
            Some(Tok::DotDot) => {}
            other => return Err(format!("expected `..`, found {}", show(other))),
        }
        out.push((start, cur.count("a range end")?));
        if cur.eat(']') {
            return Ok(out);
        }
        cur.punct(',')?;
    }
}

fn lit(cur: &mut Cursor<'_>, depth: usize) -> Res<Lit> {
    if depth > 32 {
        return Err("lists nested too deeply".into());
    }
    match cur.next().cloned() {
        Some(Tok::Int(s)) => s.parse().map(Lit::Int).map_err(|_| format!("integer {s} is out of range")),
        Some(Tok::Float(f)) => Ok(Lit::Float(f)),
        Some(Tok::Ident(w)) | Some(Tok::Str(w)) => Ok(Lit::Word(w)),
        Some(Tok::Punct('[')) => {
            let mut items = Vec::new();
            if cur.eat(']') {
                return Ok(Lit::List(items));
            }
            loop {
                items.push(lit(cur, depth + 1)?);
                if cur.eat(']') {
                    return Ok(Lit::List(items));
                }
                cur.punct(',')?;
            }
        }
        other => Err(format!("expected a literal, found {}", show(other.as_ref()))),
    }
}
