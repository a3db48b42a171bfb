//! compressed-tensors' `quantization_config` (`quant_method` `compressed-tensors`, as
//! llm-compressor writes it; GLM-4.5-FP8's): `format` `float-quantized`, `config_groups` whose
//! `weights` are 8-bit floats (e4m3fn) scaled by `strategy` — `channel` (one scale per output
//! row: `weight_scale` `[out, 1]`), `block` (`block_structure` `[rows, cols]`: one per block) or
//! `tensor` (one per matrix) — and an `ignore` list of modules left unquantised.
//!
//! Activations quantised dynamically (`input_activations.dynamic: true`: a scale computed from
//! each row as it arrives) are a GPU product's detail: rdu's engines compute with the weights'
//! dequantised values and float activations, as they do for DeepSeek's FP8. Anything that
//! would change the numbers rdu computes — static activation scales (`input_scale`), integer
//! or 4-bit weights, group strategies, packed formats, a quantised KV cache, transforms — is
//! refused in one line naming the field.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::Ctx;
use crate::error::Result;
use crate::model::spec::{Declared, Modules, Quantization};

#[derive(Deserialize)]
struct Config {
    format: Option<String>,
    config_groups: Option<BTreeMap<String, Group>>,
    #[serde(default)]
    ignore: Vec<String>,
    kv_cache_scheme: Option<Value>,
    transform_config: Option<Value>,
    sparsity_config: Option<Value>,
}

#[derive(Deserialize)]
struct Group {
    #[serde(default)]
    targets: Vec<String>,
    weights: Option<Args>,
    input_activations: Option<Args>,
    output_activations: Option<Value>,
    format: Option<String>,
}

/// One tensor's quantisation arguments (compressed-tensors' `QuantizationArgs`).
#[derive(Deserialize)]
struct Args {
    num_bits: Option<u32>,
    #[serde(rename = "type")]
    kind: Option<String>,
    strategy: Option<String>,
    block_structure: Option<Value>,
    symmetric: Option<bool>,
    dynamic: Option<Value>,
}

/// The only format whose weights rdu reads as stored: FP8 values beside their scales.
const FLOAT: &str = "float-quantized";

/// The `quantization_config` at `at` of a compressed-tensors checkpoint.
pub(super) fn quantization(top: &Ctx<'_>, value: &Value, at: &str) -> Result<Quantization> {
    let c: Config = top.parse_at(value, at)?;
    let format = top.require(c.format, &format!("{at}.format"))?;
    if format != FLOAT {
        return Err(top.err(&format!("{at}.format"), not_read(&format)));
    }
    for (field, v) in [("kv_cache_scheme", &c.kv_cache_scheme), ("transform_config", &c.transform_config)] {
        if v.as_ref().is_some_and(|v| !v.is_null()) {
            let what = if field == "kv_cache_scheme" { "a quantised KV cache" } else { "transformed weights" };
            return Err(top.err(&format!("{at}.{field}"), format!("{what} changes the numerics; rdu does not read it")));
        }
    }
    let sparse = c.sparsity_config.as_ref().and_then(|s| s.get("format")).and_then(Value::as_str);
    if let Some(f) = sparse.filter(|f| *f != "dense") {
        return Err(top.err(&format!("{at}.sparsity_config.format"), format!("`{f}`: rdu reads dense weights only")));
    }
    let groups = top.require(c.config_groups.filter(|g| !g.is_empty()), &format!("{at}.config_groups"))?;
    let mut declared: Option<(String, Declared)> = None;
    let mut targets = Vec::new();
    let mut linear = false;
    for (name, g) in &groups {
        let at = format!("{at}.config_groups.{name}");
        let this = group(top, g, &at)?;
        match &declared {
            Some((first, d)) if *d != this => {
                let message =
                    format!("{this:?} differs from group `{first}`'s {d:?}: rdu reads one FP8 scheme a model");
                return Err(top.err(&format!("{at}.weights"), message));
            }
            _ => declared = Some((name.clone(), this)),
        }
        for t in &g.targets {
            match t.as_str() {
                "Linear" => linear = true,
                t if t.starts_with("re:") || t.contains('.') => targets.push(t.to_string()),
                other => {
                    let message =
                        format!("`{other}`: rdu reads the class `Linear`, module names and `re:` expressions");
                    return Err(top.err(&format!("{at}.targets"), message));
                }
            }
        }
    }
    let format = declared.map(|(_, d)| d).ok_or_else(|| top.err(&format!("{at}.config_groups"), "is empty"))?;
    let targets = if linear { Vec::new() } else { targets };
    let q = Quantization { format, not_converted: Vec::new(), ignore: c.ignore, targets };
    Modules::of(&q).map_err(|e| top.err(&format!("{at}.ignore"), e))?;
    Ok(q)
}

/// The FP8 scheme of one config group, or the first field rdu does not read.
fn group(top: &Ctx<'_>, g: &Group, at: &str) -> Result<Declared> {
    if let Some(f) = g.format.as_deref().filter(|f| *f != FLOAT) {
        return Err(top.err(&format!("{at}.format"), not_read(f)));
    }
    if g.output_activations.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(top.err(
            &format!("{at}.output_activations"),
            "quantised outputs change the numerics; rdu does not read them",
        ));
    }
    let w = top.require(g.weights.as_ref(), &format!("{at}.weights"))?;
    let field = |f: &str| format!("{at}.weights.{f}");
    float8(top, w, &format!("{at}.weights"))?;
    if w.symmetric == Some(false) {
        return Err(top.err(&field("symmetric"), "false: zero points are not read; FP8 weights are symmetric"));
    }
    if w.dynamic.as_ref().is_some_and(|d| d != &Value::Bool(false)) {
        return Err(top.err(&field("dynamic"), "stored weights have fixed scales; expected false"));
    }
    let strategy = top.require(w.strategy.as_deref(), &field("strategy"))?;
    let declared = match strategy {
        "channel" => Declared::Fp8Channel,
        "tensor" => Declared::Fp8Tensor,
        "block" => {
            let block = top.require(w.block_structure.as_ref(), &field("block_structure"))?;
            let dims: Option<Vec<u32>> = block.as_array().and_then(|a| {
                a.iter().map(|d| d.as_u64().and_then(|d| u32::try_from(d).ok()).filter(|&d| d > 0)).collect()
            });
            match dims.as_deref() {
                Some(&[rows, cols]) => Declared::Fp8Block { rows, cols },
                _ => {
                    return Err(
                        top.err(&field("block_structure"), format!("{block}: expected [rows, cols], each at least 1"))
                    )
                }
            }
        }
        other => {
            let message = format!("`{other}` is not read; rdu reads FP8 weights scaled by channel, block or tensor");
            return Err(top.err(&field("strategy"), message));
        }
    };
    if let Some(a) = &g.input_activations {
        let at = format!("{at}.input_activations");
        float8(top, a, &at)?;
        if a.dynamic.as_ref() != Some(&Value::Bool(true)) {
            let found = a.dynamic.as_ref().map_or("missing".to_string(), Value::to_string);
            let message = format!(
                "{found}: static activation scales (`input_scale`) change the numerics; rdu reads dynamic activations only"
            );
            return Err(top.err(&format!("{at}.dynamic"), message));
        }
    }
    Ok(declared)
}

/// Refuses arguments other than 8-bit floats (e4m3fn).
fn float8(top: &Ctx<'_>, a: &Args, at: &str) -> Result<()> {
    match (a.kind.as_deref(), a.num_bits) {
        (Some("float"), Some(8)) => Ok(()),
        (Some("float"), bits) => {
            let bits = bits.map_or("missing".to_string(), |b| b.to_string());
            Err(top.err(&format!("{at}.num_bits"), format!("{bits}: rdu reads 8-bit floats (e4m3) only")))
        }
        (kind, _) => {
            let kind = kind.map_or("missing".to_string(), |k| format!("`{k}`"));
            Err(top.err(&format!("{at}.type"), format!("{kind}: rdu reads `float` (FP8 e4m3) only")))
        }
    }
}

fn not_read(format: &str) -> String {
    format!("`{format}` is not read; rdu reads compressed-tensors' `{FLOAT}` (FP8 weights beside their scales)")
}
