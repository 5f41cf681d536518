//! The few Python string semantics R2E-Gym's code relies on, so the Rust
//! port gives byte-identical keys and messages.

/// `str.isspace()`: Rust's `char::is_whitespace` plus the four ASCII
/// information separators (U+001C..U+001F) that Python also counts.
fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `text.strip()` with no argument.
pub(crate) fn strip(text: &str) -> &str {
    text.trim_matches(is_space)
}

/// `text.split(separator)[0]`.
pub(crate) fn before<'a>(text: &'a str, separator: &str) -> &'a str {
    text.split_once(separator).map_or(text, |(head, _)| head)
}

/// `repr(text)`, as a `KeyError` message shows a missing key.
pub(crate) fn repr(text: &str) -> String {
    // Python prefers single quotes and switches to double quotes only when
    // that avoids escaping.
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut repr = String::with_capacity(text.len() + 2);
    repr.push(quote);
    for c in text.chars() {
        match c {
            '\\' => repr.push_str("\\\\"),
            '\n' => repr.push_str("\\n"),
            '\r' => repr.push_str("\\r"),
            '\t' => repr.push_str("\\t"),
            c if c == quote => {
                repr.push('\\');
                repr.push(c);
            }
            c if u32::from(c) < 0x20 || ('\u{7f}'..='\u{a0}').contains(&c) => {
                repr.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c => repr.push(c),
        }
    }
    repr.push(quote);
    repr
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_removes_python_whitespace_including_separators() {
        assert_eq!(strip("\u{1c}\t a b \r\n\u{1f}"), "a b");
        assert_eq!(strip("\u{85}x\u{3000}"), "x");
        assert_eq!(
            strip("\u{200b}x"),
            "\u{200b}x",
            "zero-width space is not whitespace"
        );
    }

    #[test]
    fn before_is_the_first_split_piece() {
        assert_eq!(before("test_a[x - y] - boom", " - "), "test_a[x");
        assert_eq!(before("test_a", " - "), "test_a");
        assert_eq!(before(" - x", " - "), "");
    }

    #[test]
    fn repr_quotes_like_python() {
        assert_eq!(repr("test_renamed"), "'test_renamed'");
        assert_eq!(repr("it's"), "\"it's\"");
        assert_eq!(repr("both ' and \""), "'both \\' and \"'");
        assert_eq!(repr("\u{1b}[1;31mx\\"), "'\\x1b[1;31mx\\\\'");
    }
}
