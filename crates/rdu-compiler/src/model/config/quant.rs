//! `quantization_config`: the block format a checkpoint stores its layer projections in.
//!
//! Read: `quant_method` `fp8` with `fmt` `e4m3` (or `float8_e4m3fn`) and `weight_block_size`
//! `[rows, cols]` (DeepSeek-V3, GLM, MiniMax: one f32 scale per block), and `mxfp4`
//! (gpt-oss: blocks of 32 along the input axis); `modules_to_not_convert` for either; and
//! `compressed-tensors` FP8 (`compressed.rs`: GLM-4.5-FP8's, one scale per output row).
//! Anything else a config declares is refused in one line: weights stored in a format rdu
//! does not read would otherwise be read wrongly.

use serde::Deserialize;
use serde_json::Value;

use super::Ctx;
use crate::error::Result;
use crate::model::spec::{Declared, Quantization};

#[derive(Deserialize)]
struct Config {
    quant_method: Option<String>,
    fmt: Option<String>,
    weight_block_size: Option<Vec<usize>>,
    modules_to_not_convert: Option<Vec<String>>,
}

/// The `quantization_config` of `root`, if it has one.
pub(super) fn quantization(top: &Ctx<'_>, root: &Value) -> Result<Option<Quantization>> {
    let value = match root.get("quantization_config") {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let at = "quantization_config";
    if value.get("quant_method").and_then(Value::as_str) == Some("compressed-tensors") {
        return super::compressed::quantization(top, value, at).map(Some);
    }
    let c: Config = top.parse_at(value, at)?;
    let method = top.require(c.quant_method, &format!("{at}.quant_method"))?;
    let format = match method.as_str() {
        "fp8" => {
            let fmt = c.fmt.unwrap_or_else(|| "e4m3".into());
            if !matches!(fmt.as_str(), "e4m3" | "float8_e4m3fn") {
                return Err(top.err(&format!("{at}.fmt"), format!("`{fmt}`: rdu reads fp8 weights as e4m3 only")));
            }
            let field = format!("{at}.weight_block_size");
            let block = top.require(c.weight_block_size, &field)?;
            let &[rows, cols] = block.as_slice() else {
                return Err(top.err(&field, format!("{block:?}: expected [rows, cols]")));
            };
            let dim = |d: usize| u32::try_from(d).ok().filter(|&d| d > 0);
            match (dim(rows), dim(cols)) {
                (Some(rows), Some(cols)) => Declared::Fp8Block { rows, cols },
                _ => return Err(top.err(&field, format!("{block:?}: each side must be a positive 32-bit count"))),
            }
        }
        "mxfp4" => Declared::Mxfp4,
        other => {
            return Err(top.err(
                &format!("{at}.quant_method"),
                format!("`{other}` is not read; rdu reads fp8 (e4m3, block-scaled), compressed-tensors (FP8) and mxfp4 checkpoints"),
            ))
        }
    };
    let not_converted = c.modules_to_not_convert.unwrap_or_default();
    Ok(Some(Quantization { not_converted, ..Quantization::all(format) }))
}
