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
    match strip(output.as_bytes(), Parameters::DigitsAndSemicolons, true) {
        Cow::Borrowed(_) => Cow::Borrowed(output),
        // Only ASCII bytes were removed, so the rest is still UTF-8.
        Cow::Owned(kept) => Cow::Owned(String::from_utf8(kept).expect("UTF-8 minus ASCII codes")),
    }
}

/// What `decolor_dict_keys` removes from each test name: `\x1b\[\d+m`. Names
/// are Python strings as WTF-8 bytes ([`crate::pyjson::PyStr`]); a code is
/// ASCII, so removing it leaves the rest as it was.
///
/// Python's `\d` also matches non-ASCII decimal digits; only ASCII digits are
/// recognised here, which differs only for codes no terminal emits.
pub(crate) fn strip_key_codes(key: &[u8]) -> Cow<'_, [u8]> {
    strip(key, Parameters::Digits, false)
}

/// The offset of the next ESC or carriage return.
fn next_special(text: &[u8]) -> Option<usize> {
    text.iter().position(|&byte| byte == 0x1b || byte == b'\r')
}

fn strip(text: &[u8], parameters: Parameters, drop_carriage_returns: bool) -> Cow<'_, [u8]> {
    if next_special(text).is_none() {
        return Cow::Borrowed(text);
    }
    let mut kept = Vec::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = next_special(rest) {
        kept.extend_from_slice(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix(b"\r") {
            if !drop_carriage_returns {
                kept.push(b'\r');
            }
            rest = after;
        } else if let Some(length) = colour_code_length(tail, parameters) {
            rest = &tail[length..];
        } else {
            // A lone ESC (one byte) that starts no colour code is kept.
            kept.push(0x1b);
            rest = &tail[1..];
        }
    }
    kept.extend_from_slice(rest);
    Cow::Owned(kept)
}

/// The byte length of the colour code at the start of `text` (which starts
/// with ESC), or `None` when no code starts there.
fn colour_code_length(text: &[u8], parameters: Parameters) -> Option<usize> {
    let body = text.strip_prefix(b"\x1b[")?;
    let allowed = |byte: &u8| match parameters {
        Parameters::DigitsAndSemicolons => byte.is_ascii_digit() || *byte == b';',
        Parameters::Digits => byte.is_ascii_digit(),
    };
    let digits = body.iter().take_while(|byte| allowed(byte)).count();
    let needs_digit = matches!(parameters, Parameters::Digits);
    if (needs_digit && digits == 0) || body.get(digits) != Some(&b'm') {
        return None;
    }
    Some(2 + digits + 1)
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
        assert_eq!(&*strip_key_codes(b"\x1b[32mtest_a\x1b[0m"), b"test_a");
        assert_eq!(
            &*strip_key_codes(b"\x1b[1;31mtest_a\x1b[0m"),
            b"\x1b[1;31mtest_a"
        );
        assert_eq!(&*strip_key_codes(b"\x1b[mtest_a\r"), b"\x1b[mtest_a\r");
        // A lone surrogate (WTF-8) next to a code is kept as it was.
        assert_eq!(&*strip_key_codes(b"\xed\xa0\x80\x1b[1mx"), b"\xed\xa0\x80x");
    }

    #[test]
    fn text_without_a_complete_code_is_kept() {
        assert_eq!(strip_output_codes("a\u{1b}[12"), "a\u{1b}[12");
        assert_eq!(strip_output_codes("\u{1b}\u{1b}[0mb"), "\u{1b}b");
        assert_eq!(strip_output_codes("ü\u{1b}[0mé"), "üé");
    }
}
