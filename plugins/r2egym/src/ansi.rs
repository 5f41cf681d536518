//! Removing ANSI colour codes the two ways R2E-Gym does. Both are hand-written
//! scanners for R2E-Gym's regular expressions, which keeps the component free
//! of a regex engine.

use std::borrow::Cow;

/// Which parameter bytes a colour code may carry between `ESC [` and `m`.
#[derive(Clone, Copy)]
enum Parameters {
    /// `[0-9;]*`: any number, including none, of digits and semicolons.
    DigitsAndSemicolons,
    /// `\d+`: at least one digit and no semicolon, so compound codes such as
    /// `ESC[1;31m` survive.
    Digits,
}

/// What `DockerRuntime.run_tests` removes from the test output: the regular
/// expression `\x1b\[[0-9;]*m|\r`.
pub(crate) fn strip_output_codes(output: &str) -> Cow<'_, str> {
    strip(output, Parameters::DigitsAndSemicolons, true)
}

/// What `decolor_dict_keys` removes from each test name: `\x1b\[\d+m`.
///
/// Python's `\d` also matches non-ASCII decimal digits; only ASCII digits are
/// recognised here, which differs only for codes no terminal emits.
pub(crate) fn strip_key_codes(key: &str) -> Cow<'_, str> {
    strip(key, Parameters::Digits, false)
}

/// The byte offset of the next ESC or carriage return: both are ASCII, so a
/// byte scan finds them without decoding (logs run to megabytes).
fn next_special(text: &str) -> Option<usize> {
    text.bytes().position(|byte| byte == 0x1b || byte == b'\r')
}

fn strip(text: &str, parameters: Parameters, drop_carriage_returns: bool) -> Cow<'_, str> {
    if next_special(text).is_none() {
        return Cow::Borrowed(text);
    }
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = next_special(rest) {
        kept.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix('\r') {
            if !drop_carriage_returns {
                kept.push('\r');
            }
            rest = after;
        } else if let Some(length) = colour_code_length(tail, parameters) {
            rest = &tail[length..];
        } else {
            // A lone ESC (one byte) that starts no colour code is kept.
            kept.push('\u{1b}');
            rest = &tail[1..];
        }
    }
    kept.push_str(rest);
    Cow::Owned(kept)
}

/// The byte length of the colour code at the start of `text` (which starts
/// with ESC), or `None` when no code starts there.
fn colour_code_length(text: &str, parameters: Parameters) -> Option<usize> {
    let body = text.strip_prefix("\u{1b}[")?;
    let allowed = |byte: &u8| match parameters {
        Parameters::DigitsAndSemicolons => byte.is_ascii_digit() || *byte == b';',
        Parameters::Digits => byte.is_ascii_digit(),
    };
    let digits = body.bytes().take_while(allowed).count();
    let needs_digit = matches!(parameters, Parameters::Digits);
    if (needs_digit && digits == 0) || body.as_bytes().get(digits) != Some(&b'm') {
        return None;
    }
    Some("\u{1b}[".len() + digits + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_codes_include_compound_and_empty_codes_and_carriage_returns() {
        assert_eq!(
            strip_output_codes("\u{1b}[1;31mFAILED\u{1b}[0m x\r\n\u{1b}[m."),
            "FAILED x\n."
        );
    }

    #[test]
    fn key_codes_are_single_numbers_only() {
        assert_eq!(strip_key_codes("\u{1b}[32mtest_a\u{1b}[0m"), "test_a");
        assert_eq!(
            strip_key_codes("\u{1b}[1;31mtest_a\u{1b}[0m"),
            "\u{1b}[1;31mtest_a"
        );
        assert_eq!(strip_key_codes("\u{1b}[mtest_a\r"), "\u{1b}[mtest_a\r");
    }

    #[test]
    fn text_without_a_complete_code_is_kept() {
        assert_eq!(strip_output_codes("a\u{1b}[12"), "a\u{1b}[12");
        assert_eq!(strip_output_codes("\u{1b}\u{1b}[0mb"), "\u{1b}b");
        assert_eq!(strip_output_codes("ü\u{1b}[0mé"), "üé");
    }
}
