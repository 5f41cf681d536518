//! `json.dumps(value, indent=4)`, byte for byte, so reports read like the
//! files the harness writes: four-space indents, `", "`-free separators
//! (indentation puts each item on its own line), `[]`/`{}` for empty
//! containers, and every character outside printable ASCII escaped.

use std::fmt::Write;

use serde_json::Value;

/// The text `json.dumps(value, indent=4)` returns.
pub(crate) fn dumps_indent4(value: &Value) -> String {
    let mut out = String::new();
    write_value(value, 0, &mut out);
    out
}

fn write_value(value: &Value, depth: usize, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(number) => out.push_str(&number.to_string()),
        Value::String(text) => write_string(text, out),
        Value::Array(items) => write_container(
            ('[', ']'),
            items.iter().map(|item| (None, item)),
            depth,
            out,
        ),
        Value::Object(entries) => {
            write_container(
                ('{', '}'),
                entries.iter().map(|(key, item)| (Some(key), item)),
                depth,
                out,
            );
        }
    }
}

fn write_container<'a>(
    (open, close): (char, char),
    items: impl ExactSizeIterator<Item = (Option<&'a String>, &'a Value)>,
    depth: usize,
    out: &mut String,
) {
    out.push(open);
    if items.len() == 0 {
        out.push(close);
        return;
    }
    for (position, (key, item)) in items.enumerate() {
        out.push_str(if position == 0 { "\n" } else { ",\n" });
        out.push_str(&"    ".repeat(depth + 1));
        if let Some(key) = key {
            write_string(key, out);
            out.push_str(": ");
        }
        write_value(item, depth + 1, out);
    }
    out.push('\n');
    out.push_str(&"    ".repeat(depth));
    out.push(close);
}

/// `ensure_ascii=True` escaping: short escapes where JSON has them, `\uXXXX`
/// (UTF-16, lowercase hex) for everything else outside `' '..='~'`.
fn write_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    write!(out, "\\u{unit:04x}").expect("writing to a String cannot fail");
                }
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matches_python_indent_4() {
        let value = json!({"a": [], "b": {"c": [1, true, null]}, "d": {}});
        let expected = "{\n    \"a\": [],\n    \"b\": {\n        \"c\": [\n            1,\n            true,\n            null\n        ]\n    },\n    \"d\": {}\n}";
        assert_eq!(dumps_indent4(&value), expected);
    }

    #[test]
    fn escapes_like_ensure_ascii() {
        assert_eq!(
            dumps_indent4(&json!("é\u{7f}\u{1}😀\"/")),
            r#""\u00e9\u007f\u0001\ud83d\ude00\"/""#
        );
    }
}
