//! `json.loads` as CPython 3.11 runs it (the C scanner, `strict=True`), for
//! the one document R2E-Gym decodes while computing a reward: the row's
//! `expected_output_json`. Where Python accepts what a strict JSON parser
//! would not (`NaN`, `Infinity`, numbers too large for a double, unpaired
//! surrogate escapes) this accepts it too, and where Python raises (a syntax
//! error, an integer of more than 4,300 digits, nesting past the recursion
//! limit) this names the exception Python raises, with Python's message.
//!
//! Strings are kept as Python would see them: a `\ud800` escape with no low
//! surrogate after it is a lone surrogate, which UTF-8 cannot hold, so
//! strings are WTF-8 bytes ([`PyStr`]), whose byte order is code point
//! order, the order Python's `sorted` uses.

/// A Python `str` as WTF-8 bytes: UTF-8, with lone surrogates encoded as
/// UTF-8 would encode their code points.
pub(crate) type PyStr = Vec<u8>;

/// A member's value, as far as a reward looks at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Member {
    /// A string.
    Str(PyStr),
    /// Anything else, as its JSON text (it never equals a status).
    Other(String),
}

/// The decoded document, as far as a reward looks at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Document {
    /// A dict: keys in first-insertion order, each with its last value (what
    /// `dict(pairs)` makes of repeated keys).
    Object(Vec<(PyStr, Member)>),
    /// Any other value, by its Python type name (`list`, `str`, `int`,
    /// `float`, `bool`, `NoneType`).
    NotObject(&'static str),
}

/// An exception `json.loads` raises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Raised {
    /// `JSONDecodeError`, `ValueError` or `RecursionError`.
    pub(crate) kind: &'static str,
    /// Its message, as `str(exception)` prints it.
    pub(crate) message: String,
}

/// Python's default recursion limit less the frames R2E-Gym's own call stack
/// holds when it decodes (the limit counts both): nesting deeper than this
/// raises `RecursionError`. The exact depth varies with the caller's stack
/// by a few dozen; CPython 3.11 alone raises at 998.
const MAX_DEPTH: usize = 970;

/// `sys.get_int_max_str_digits()`'s default: longer integer literals raise
/// `ValueError` when converted.
const MAX_INT_DIGITS: usize = 4300;

/// `json.loads(text)`.
pub(crate) fn loads(text: &str) -> Result<Document, Raised> {
    let chars: Vec<char> = text.chars().collect();
    let mut scanner = Scanner {
        chars: &chars,
        depth: 0,
    };
    if chars.first() == Some(&'\u{feff}') {
        return Err(scanner.decode_error("Unexpected UTF-8 BOM (decode using utf-8-sig)", 0));
    }
    let start = scanner.skip_whitespace(0);
    let (value, end) = scanner.value(start, true)?;
    let end = scanner.skip_whitespace(end);
    if end != chars.len() {
        return Err(scanner.decode_error("Extra data", end));
    }
    Ok(match value {
        Value::Object(members) => Document::Object(members),
        Value::Other(type_name) => Document::NotObject(type_name),
        Value::Str(_) => Document::NotObject("str"),
    })
}

/// A scanned value and the index after it.
type Scanned = Result<(Value, usize), Raised>;

/// A scanned value; only the top level's object keeps its members, and a
/// member's text is taken from the document.
enum Value {
    Object(Vec<(PyStr, Member)>),
    Str(PyStr),
    Other(&'static str),
}

struct Scanner<'a> {
    chars: &'a [char],
    depth: usize,
}

impl Scanner<'_> {
    fn at(&self, index: usize) -> Option<char> {
        self.chars.get(index).copied()
    }

    fn starts_with(&self, index: usize, word: &str) -> bool {
        (index..)
            .zip(word.chars())
            .all(|(at, expected)| self.at(at) == Some(expected))
    }

    fn text(&self, start: usize, end: usize) -> String {
        self.chars[start..end].iter().collect()
    }

    /// `_w(s, index).end()`: JSON whitespace only.
    fn skip_whitespace(&self, mut index: usize) -> usize {
        while matches!(self.at(index), Some(' ' | '\t' | '\n' | '\r')) {
            index += 1;
        }
        index
    }

    /// `JSONDecodeError(message, doc, pos)`, whose text adds line, column
    /// and position (in characters).
    fn decode_error(&self, message: &str, position: usize) -> Raised {
        let before = &self.chars[..position.min(self.chars.len())];
        let line = before.iter().filter(|&&c| c == '\n').count() + 1;
        let column = match before.iter().rposition(|&c| c == '\n') {
            Some(newline) => position - newline,
            None => position + 1,
        };
        Raised {
            kind: "JSONDecodeError",
            message: format!("{message}: line {line} column {column} (char {position})"),
        }
    }

    /// `scan_once(s, index)`; `keep` keeps an object's members (the top
    /// level's only). `StopIteration` becomes "Expecting value".
    fn value(&mut self, index: usize, keep: bool) -> Scanned {
        match self.at(index) {
            Some('"') => {
                let (string, end) = self.string(index + 1)?;
                Ok((Value::Str(string), end))
            }
            Some('{') => self.nested(index, keep, Self::object),
            Some('[') => self.nested(index, keep, Self::array),
            _ => {
                let constant = [
                    ("null", "NoneType"),
                    ("true", "bool"),
                    ("false", "bool"),
                    ("NaN", "float"),
                    ("Infinity", "float"),
                    ("-Infinity", "float"),
                ]
                .into_iter()
                .find(|(word, _)| self.starts_with(index, word));
                match constant {
                    Some((word, type_name)) => Ok((Value::Other(type_name), index + word.len())),
                    None => self.number(index),
                }
            }
        }
    }

    /// An object or array, counted against the recursion limit as
    /// `Py_EnterRecursiveCall` counts it.
    fn nested(
        &mut self,
        index: usize,
        keep: bool,
        scan: fn(&mut Self, usize, bool) -> Scanned,
    ) -> Scanned {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            let what = if self.at(index) == Some('{') {
                "object"
            } else {
                "array"
            };
            return Err(Raised {
                kind: "RecursionError",
                message: format!(
                    "maximum recursion depth exceeded while decoding a JSON {what} from a unicode string"
                ),
            });
        }
        let scanned = scan(self, index + 1, keep);
        self.depth -= 1;
        scanned
    }

    /// `_parse_object_unicode`, after the `{`.
    fn object(&mut self, start: usize, keep: bool) -> Scanned {
        let mut members: Vec<(PyStr, Member)> = Vec::new();
        let mut index = self.skip_whitespace(start);
        if self.at(index) == Some('}') {
            return Ok((object_value(members, keep), index + 1));
        }
        loop {
            if self.at(index) != Some('"') {
                return Err(
                    self.decode_error("Expecting property name enclosed in double quotes", index)
                );
            }
            let (key, after_key) = self.string(index + 1)?;
            index = self.skip_whitespace(after_key);
            if self.at(index) != Some(':') {
                return Err(self.decode_error("Expecting ':' delimiter", index));
            }
            index = self.skip_whitespace(index + 1);
            let value_start = index;
            let (value, after_value) = self.value(index, false)?;
            if keep {
                let member = match value {
                    Value::Str(text) => Member::Str(text),
                    Value::Object(_) | Value::Other(..) => {
                        Member::Other(self.text(value_start, after_value))
                    }
                };
                match members.iter_mut().find(|(known, _)| *known == key) {
                    Some((_, old)) => *old = member,
                    None => members.push((key, member)),
                }
            }
            index = self.skip_whitespace(after_value);
            match self.at(index) {
                Some('}') => return Ok((object_value(members, keep), index + 1)),
                Some(',') => index = self.skip_whitespace(index + 1),
                _ => return Err(self.decode_error("Expecting ',' delimiter", index)),
            }
        }
    }

    /// `_parse_array_unicode`, after the `[`.
    fn array(&mut self, start: usize, _keep: bool) -> Scanned {
        let mut index = self.skip_whitespace(start);
        if self.at(index) == Some(']') {
            return Ok((Value::Other("list"), index + 1));
        }
        loop {
            let (_, after_value) = self.value(index, false)?;
            index = self.skip_whitespace(after_value);
            match self.at(index) {
                Some(']') => return Ok((Value::Other("list"), index + 1)),
                Some(',') => index = self.skip_whitespace(index + 1),
                _ => return Err(self.decode_error("Expecting ',' delimiter", index)),
            }
        }
    }

    /// `_match_number_unicode`: ASCII digits only; an integer literal is
    /// converted with `int()`, which refuses more than 4,300 digits; a float
    /// with `float()`, which never raises (too large is `inf`).
    fn number(&self, start: usize) -> Scanned {
        let digit = |index: usize| self.at(index).is_some_and(|c| c.is_ascii_digit());
        let mut index = start;
        if self.at(index) == Some('-') {
            index += 1;
        }
        match self.at(index) {
            Some('0') => index += 1,
            Some('1'..='9') => {
                while digit(index) {
                    index += 1;
                }
            }
            _ => return Err(self.decode_error("Expecting value", start)),
        }
        let integer_end = index;
        if self.at(index) == Some('.') && digit(index + 1) {
            index += 2;
            while digit(index) {
                index += 1;
            }
        }
        if matches!(self.at(index), Some('e' | 'E')) {
            let mut exponent = index + 1;
            if matches!(self.at(exponent), Some('+' | '-')) {
                exponent += 1;
            }
            if digit(exponent) {
                while digit(exponent) {
                    exponent += 1;
                }
                index = exponent;
            }
        }
        if index == integer_end {
            let digits = index - start - usize::from(self.at(start) == Some('-'));
            if digits > MAX_INT_DIGITS {
                return Err(Raised {
                    kind: "ValueError",
                    message: format!(
                        "Exceeds the limit ({MAX_INT_DIGITS} digits) for integer string conversion: \
                         value has {digits} digits; use sys.set_int_max_str_digits() to increase the limit"
                    ),
                });
            }
            return Ok((Value::Other("int"), index));
        }
        Ok((Value::Other("float"), index))
    }

    /// `scanstring_unicode(s, end, strict=True)` after the opening quote: the
    /// string and the index after its closing quote.
    fn string(&self, start: usize) -> Result<(PyStr, usize), Raised> {
        let unterminated = || self.decode_error("Unterminated string starting at", start - 1);
        let mut text = PyStr::new();
        let mut index = start;
        loop {
            let Some(c) = self.at(index) else {
                return Err(unterminated());
            };
            match c {
                '"' => return Ok((text, index + 1)),
                '\\' => {
                    let Some(escape) = self.at(index + 1) else {
                        return Err(unterminated());
                    };
                    index += 2;
                    let plain = match escape {
                        '"' => '"',
                        '\\' => '\\',
                        '/' => '/',
                        'b' => '\u{8}',
                        'f' => '\u{c}',
                        'n' => '\n',
                        'r' => '\r',
                        't' => '\t',
                        'u' => {
                            let (code, after) = self.unicode_escape(index)?;
                            index = after;
                            push_code_point(&mut text, code);
                            continue;
                        }
                        _ => return Err(self.decode_error("Invalid \\escape", index - 2)),
                    };
                    push_code_point(&mut text, u32::from(plain));
                }
                c if u32::from(c) < 0x20 => {
                    return Err(self.decode_error("Invalid control character at", index));
                }
                c => {
                    push_code_point(&mut text, u32::from(c));
                    index += 1;
                }
            }
        }
    }

    /// The code point of `\uXXXX` (the `u` already read), joined with a
    /// following `\uXXXX` low surrogate when it is a high one.
    fn unicode_escape(&self, index: usize) -> Result<(u32, usize), Raised> {
        let code = self
            .hex4(index)
            .ok_or_else(|| self.decode_error("Invalid \\uXXXX escape", index - 1))?;
        let after = index + 4;
        if (0xd800..0xdc00).contains(&code)
            && self.at(after) == Some('\\')
            && self.at(after + 1) == Some('u')
        {
            let low = self
                .hex4(after + 2)
                .ok_or_else(|| self.decode_error("Invalid \\uXXXX escape", after + 1))?;
            if (0xdc00..0xe000).contains(&low) {
                let joined = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
                return Ok((joined, after + 6));
            }
        }
        Ok((code, after))
    }

    fn hex4(&self, index: usize) -> Option<u32> {
        (0..4).try_fold(0u32, |code, offset| {
            let digit = self.at(index + offset)?.to_digit(16)?;
            Some(code * 16 + digit)
        })
    }
}

/// An object's value: its members at the top level, else just a dict.
fn object_value(members: Vec<(PyStr, Member)>, keep: bool) -> Value {
    if keep {
        Value::Object(members)
    } else {
        Value::Other("dict")
    }
}

/// Appends `code` in UTF-8, or, for a surrogate, as UTF-8 would encode it.
fn push_code_point(text: &mut PyStr, code: u32) {
    match char::from_u32(code) {
        Some(c) => {
            let mut buffer = [0; 4];
            text.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
        }
        None => text.extend_from_slice(&[
            0xe0 | (code >> 12) as u8,
            0x80 | ((code >> 6) & 0x3f) as u8,
            0x80 | (code & 0x3f) as u8,
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(text: &str) -> Vec<(PyStr, Member)> {
        match loads(text) {
            Ok(Document::Object(members)) => members,
            other => panic!("{text}: {other:?}"),
        }
    }

    fn raised(text: &str) -> (&'static str, String) {
        let error = loads(text).unwrap_err();
        (error.kind, error.message)
    }

    #[test]
    fn members_keep_their_first_place_and_last_value() {
        let members = object(r#" {"b": "PASSED", "a": 1, "b": "FAILED", "c": NaN} "#);
        assert_eq!(
            members,
            [
                (b"b".to_vec(), Member::Str(b"FAILED".to_vec())),
                (b"a".to_vec(), Member::Other("1".into())),
                (b"c".to_vec(), Member::Other("NaN".into())),
            ]
        );
    }

    #[test]
    fn python_only_values_are_accepted() {
        let members =
            object(r#"{"a": Infinity, "b": -Infinity, "c": 1e400, "d": [1, {"e": null}]}"#);
        assert_eq!(members.len(), 4);
        assert_eq!(members[3].1, Member::Other(r#"[1, {"e": null}]"#.into()));
        // Only integer literals are limited; a float of any length is not.
        let long_float = format!(r#"{{"a": {}.5}}"#, "1".repeat(5000));
        assert_eq!(object(&long_float).len(), 1);
    }

    #[test]
    fn lone_surrogates_are_kept_in_code_point_order() {
        let members = object(r#"{"a\ud800": "x", "a\ud83d\ude00": "y", "a\uffff": "z"}"#);
        let keys: Vec<&[u8]> = members.iter().map(|(key, _)| key.as_slice()).collect();
        assert_eq!(keys[0], b"a\xed\xa0\x80");
        assert_eq!(keys[1], "a\u{1f600}".as_bytes());
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(sorted, [keys[0], keys[2], keys[1]]);
    }

    #[test]
    fn other_documents_are_named_by_python_type() {
        assert_eq!(loads("[]"), Ok(Document::NotObject("list")));
        assert_eq!(loads(r#""{}""#), Ok(Document::NotObject("str")));
        assert_eq!(loads("null"), Ok(Document::NotObject("NoneType")));
        assert_eq!(loads("-0.5e3"), Ok(Document::NotObject("float")));
        assert_eq!(loads("7"), Ok(Document::NotObject("int")));
        assert_eq!(loads("true"), Ok(Document::NotObject("bool")));
    }

    /// Messages as CPython 3.11.7 prints them for the same documents.
    #[test]
    fn syntax_errors_read_as_pythons() {
        let cases = [
            ("", "Expecting value: line 1 column 1 (char 0)"),
            (
                "{'a': 1}",
                "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
            ),
            (
                r#"{"a": 1,}"#,
                "Expecting property name enclosed in double quotes: line 1 column 9 (char 8)",
            ),
            (
                r#"{"a" 1}"#,
                "Expecting ':' delimiter: line 1 column 6 (char 5)",
            ),
            (
                r#"{"a": 1 "b": 2}"#,
                "Expecting ',' delimiter: line 1 column 9 (char 8)",
            ),
            (
                "{\"a\":\n \"x\ty\"}",
                "Invalid control character at: line 2 column 4 (char 9)",
            ),
            (
                r#"{"a": "x\qy"}"#,
                "Invalid \\escape: line 1 column 9 (char 8)",
            ),
            (
                r#"{"a": "\u12"}"#,
                "Invalid \\uXXXX escape: line 1 column 9 (char 8)",
            ),
            (
                r#"{"a": "x"#,
                "Unterminated string starting at: line 1 column 7 (char 6)",
            ),
            ("{} x", "Extra data: line 1 column 4 (char 3)"),
            ("[1,]", "Expecting value: line 1 column 4 (char 3)"),
            (
                "\u{feff}{}",
                "Unexpected UTF-8 BOM (decode using utf-8-sig): line 1 column 1 (char 0)",
            ),
            (
                "{\"\u{e9}\": 01}",
                "Expecting ',' delimiter: line 1 column 8 (char 7)",
            ),
        ];
        for (text, message) in cases {
            assert_eq!(
                raised(text),
                ("JSONDecodeError", message.to_owned()),
                "{text:?}"
            );
        }
    }

    #[test]
    fn huge_integers_and_deep_nesting_raise_what_python_raises() {
        let digits = format!(r#"{{"a": -{}}}"#, "9".repeat(4301));
        let (kind, message) = raised(&digits);
        assert_eq!(kind, "ValueError");
        assert!(message.contains("value has 4301 digits"), "{message}");
        assert!(loads(&format!(r#"{{"a": {}}}"#, "9".repeat(4300))).is_ok());
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(raised(&deep).0, "RecursionError");
        let fits = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(loads(&fits).is_ok());
    }
}
