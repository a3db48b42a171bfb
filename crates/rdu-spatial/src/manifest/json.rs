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
    if scalars || line.len() <= INLINE_WIDTH {
        out.push_str(&line);
        return;
    }
    let (open, close, entries): (char, char, Vec<(Option<&String>, &Value)>) = match value {
        Value::Array(items) => ('[', ']', items.iter().map(|v| (None, v)).collect()),
        Value::Object(map) => ('{', '}', map.iter().map(|(k, v)| (Some(k), v)).collect()),
        _ => unreachable!("a scalar is always one line"),
    };
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
