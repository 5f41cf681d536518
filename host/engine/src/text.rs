//! Text from tasks, made safe to keep and to show: bounded in length, and
//! with control characters escaped for terminals.

use std::borrow::Cow;

/// `text` cut to at most `max` bytes (on a character boundary), with a note
/// of how much was cut.
pub(crate) fn truncated(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let end = (0..=max)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}… [{} more bytes]", &text[..end], text.len() - end)
}

/// The last `max` bytes or fewer of `text` (from a character boundary),
/// marked when cut: where a failing command's output says why.
pub(crate) fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let start = (text.len() - max..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    format!("[{start} bytes before] …{}", &text[start..])
}

/// `text` with control characters (newlines, escape sequences) escaped, so
/// a task id or message cannot rewrite a terminal or forge console lines.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_on_a_character_boundary_and_says_so() {
        assert_eq!(truncated("short", 10), "short");
        assert_eq!(truncated("abcdef", 3), "abc… [3 more bytes]");
        // "é" is two bytes: cutting inside it backs up.
        assert_eq!(truncated("aé", 2), "a… [2 more bytes]");
        let huge = "x".repeat(10 << 20);
        assert!(truncated(&huge, 4096).len() < 4200);
    }

    #[test]
    fn a_tail_keeps_the_end_on_a_character_boundary_and_says_so() {
        assert_eq!(tail("short", 10), "short");
        assert_eq!(tail("abcdef", 3), "[3 bytes before] …def");
        // "é" is two bytes: a start inside it moves on.
        assert_eq!(tail("éa", 2), "[2 bytes before] …a");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(printable("calc-add"), "calc-add");
        assert!(matches!(printable("calc-add"), Cow::Borrowed(_)));
        assert_eq!(printable("a\nb"), "a\\nb");
        assert_eq!(printable("\u{1b}[2Jgone"), "\\u{1b}[2Jgone");
    }
}
