//! The manifest's JSON layout: two-space indentation, with arrays of scalars and short entries kept on one line.

use serde_json::Value;

/// An array or object whose one-line form is at most this long stays on one line.
const INLINE_WIDTH: usize = 72;

/// `value` printed deterministically: keys in the order the value holds them, one trailing newline.
pub fn pretty(value: &Value) -> String {
    let mut out = String::new();
    write(value, 0, &mut out);
    out.push('\n');
    out
}

fn write(value: &Value, depth: usize, out: &mut String) {
    let line = one_line(value);
    let scalars = matches!(value, Value::Array(items) if items.iter().all(|v| !v.is_array() && !v.is_object()));
    let entries: Vec<(Option<&String>, &Value)> = match value {
        _ if scalars || line.len() <= INLINE_WIDTH => Vec::new(),
        Value::Array(items) => items.iter().map(|v| (None, v)).collect(),
        Value::Object(map) => map.iter().map(|(k, v)| (Some(k), v)).collect(),
        // A scalar is one line however long (a string longer than the width included).
        _ => Vec::new(),
    };
    if entries.is_empty() {
        out.push_str(&line);
        return;
    }
    let (open, close) = if value.is_array() { ('[', ']') } else { ('{', '}') };
    out.push(open);
    out.push('\n');
    for (i, (key, item)) in entries.iter().enumerate() {
        out.extend(std::iter::repeat_n("  ", depth + 1));
        if let Some(key) = key {
            out.push_str(&Value::String((*key).clone()).to_string());
            out.push_str(": ");
        }
        write(item, depth + 1, out);
        out.push_str(if i + 1 < entries.len() { ",\n" } else { "\n" });
    }
    out.extend(std::iter::repeat_n("  ", depth));
    out.push(close);
}

/// `value` on one line, with a space after every comma and colon.
fn one_line(value: &Value) -> String {
    match value {
        Value::Array(items) => format!("[{}]", items.iter().map(one_line).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => {
            let fields = map.iter().map(|(k, v)| format!("{}: {}", Value::String(k.clone()), one_line(v)));
            format!("{{{}}}", fields.collect::<Vec<_>>().join(", "))
        }
        scalar => scalar.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the fuzzer (`rdu-fuzz manifest`): a string longer than the inline width reached
    /// an `unreachable!` — a model name or path that long panicked writing the manifest.
    #[test]
    fn a_scalar_longer_than_the_width_stays_one_line() {
        let long = "x".repeat(INLINE_WIDTH * 2);
        let value = serde_json::json!({ "name": long, "list": [{ "a": long }], "s": long });
        let text = pretty(&value);
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value);
        assert!(text.contains(&format!("\"name\": \"{long}\"")));
        assert_eq!(pretty(&Value::String(long.clone())), format!("\"{long}\"\n"));
    }
}
