//! Python `str` semantics the harness relies on.
//!
//! The parsers split and strip with Python's notion of whitespace, which is
//! Rust's `char::is_whitespace` plus the four ASCII separators U+001C..U+001F.
//! The harness also reads logs in text mode, which folds `\r\n` and `\r` into
//! `\n` before anything else sees them.

use std::borrow::Cow;

/// `str.isspace()` for one character.
pub(crate) fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's whitespace as a regex character class, for patterns ported from
/// `re`, where `\s` also matches U+001C..U+001F.
pub(crate) const SPACE_CLASS: &str = r"[\s\x1C-\x1F]";

/// `s.split()`: the runs of non-whitespace.
pub(crate) fn split(s: &str) -> impl Iterator<Item = &str> {
    s.split(is_space).filter(|token| !token.is_empty())
}

/// `s.strip()`.
pub(crate) fn strip(s: &str) -> &str {
    s.trim_matches(is_space)
}

/// `s.lstrip()`.
pub(crate) fn lstrip(s: &str) -> &str {
    s.trim_start_matches(is_space)
}

/// The text as `open(path).read()` returns it: universal newlines turn `\r\n`
/// and a lone `\r` into `\n`.
pub(crate) fn universal_newlines(text: &str) -> Cow<'_, str> {
    if !text.contains('\r') {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.replace("\r\n", "\n").replace('\r', "\n"))
}

/// Whether a decimal digit (`\d`) has the value 0, as Python's `int()` reads
/// it. Unicode lays out each script's digits as ten consecutive code points
/// from 0 to 9, and where runs of digits touch they are whole runs of ten, so
/// a digit's value is its distance from the start of its run, modulo 10.
pub(crate) fn is_zero_digit(digit: char) -> bool {
    if digit.is_ascii() {
        return digit == '0';
    }
    let is_digit = |c: char| crate::lazy_regex!(r"^\d$").is_match(c.encode_utf8(&mut [0; 4]));
    let mut run_start = digit;
    while let Some(previous) = char::from_u32(u32::from(run_start) - 1).filter(|&c| is_digit(c)) {
        run_start = previous;
    }
    (u32::from(digit) - u32::from(run_start)) % 10 == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_includes_the_ascii_separators() {
        assert_eq!(
            split("a\u{1c}b \u{a0}c\t").collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(strip("\u{1f} x \r"), "x");
        assert_eq!(lstrip("\u{3000}ok "), "ok ");
        assert!(!is_space('\u{0}'));
    }

    #[test]
    fn zero_digits_in_any_script() {
        assert!(is_zero_digit('0') && !is_zero_digit('7'));
        assert!(is_zero_digit('\u{660}') && !is_zero_digit('\u{661}'));
        // Mathematical digits: five runs of ten back to back, from U+1D7CE.
        assert!(is_zero_digit('\u{1d7d8}') && !is_zero_digit('\u{1d7d9}'));
    }

    #[test]
    fn universal_newlines_folds_crlf_and_lone_cr() {
        assert_eq!(universal_newlines("a\r\nb\rc\n"), "a\nb\nc\n");
        assert_eq!(universal_newlines("a\r\r\nb"), "a\n\nb");
        assert!(matches!(universal_newlines("plain\n"), Cow::Borrowed(_)));
    }
}
