//! What the eval script learns from the test patch: the files it modifies
//! (reset before and after the tests) and the test directives (passed to the
//! test command).

use crate::error::InvalidInput;

/// Endings of files that are not tests (`NON_TEST_EXTS`; `csv` has no dot there).
const NON_TEST_EXTS: [&str; 11] = [
    ".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml",
];

/// `get_modified_files(patch)`: the `a/` paths of every file the patch
/// changes or deletes (not the ones it creates), in patch order, as unidiff's
/// `PatchSet` reads them.
///
/// # Errors
///
/// Where unidiff raises: a hunk longer or shorter than its header says, a
/// stray hunk or marker, a `+++` line without its `---`.
pub(crate) fn modified_files(patch: &str) -> Result<Vec<String>, InvalidInput> {
    let files = unidiff::patched_files(patch)
        .map_err(|reason| InvalidInput::new(format!("unidiff cannot parse it: {reason}")))?;
    Ok(files
        .into_iter()
        .filter(|file| file.source != unidiff::DEV_NULL)
        .filter_map(|file| file.source.strip_prefix("a/").map(str::to_owned))
        .collect())
}

/// `get_test_directives(instance)`: the `b/` path of every `diff --git` line
/// in the test patch that names a test file; for Django, as a dotted module
/// below `tests/` (`tests/a/b.py` becomes `a.b`).
pub(crate) fn test_directives(repo: &str, test_patch: &str) -> Vec<String> {
    let header = crate::lazy_regex!(r"diff --git a/.* b/(.*)");
    header
        .captures_iter(test_patch)
        .map(|captures| captures.get(1).map_or("", |path| path.as_str()))
        .filter(|path| !NON_TEST_EXTS.iter().any(|ext| path.ends_with(ext)))
        .map(|path| {
            if repo == "django/django" {
                django_module(path)
            } else {
                path.to_owned()
            }
        })
        .collect()
}

fn django_module(path: &str) -> String {
    let path = path.strip_suffix(".py").unwrap_or(path);
    let path = path.strip_prefix("tests/").unwrap_or(path);
    path.replace('/', ".")
}

/// The slice of unidiff 1.0's `PatchSet` parser that decides which files a
/// patch touches: file headers (git and plain), and hunks, whose line counts
/// decide where a hunk ends and so whether a `--- ` line is a header or a
/// removed line.
mod unidiff {
    pub(super) const DEV_NULL: &str = "/dev/null";

    /// A `PatchedFile`, reduced to its names.
    pub(super) struct PatchedFile {
        pub(super) source: String,
        target: String,
        has_hunks: bool,
    }

    /// Parser state between lines. `in_header` is unidiff's `patch_info`
    /// being open: after `diff --git` or other info lines, until a hunk, a
    /// plain `+++` header or a binary marker closes it. `pending_source` is
    /// the last source name seen, which a plain `+++` header pairs with.
    /// Python's `$` also matches before a final `\n`, hence `\n?$` below.
    #[derive(Default)]
    struct Parser {
        files: Vec<PatchedFile>,
        current: Option<usize>,
        in_header: bool,
        pending_source: Option<String>,
    }

    pub(super) fn patched_files(patch: &str) -> Result<Vec<PatchedFile>, String> {
        let mut parser = Parser::default();
        // StringIO iterates lines split at `\n` only, each keeping its `\n`.
        let mut lines = patch.split_inclusive('\n');
        while let Some(line) = lines.next() {
            parser.line(line, &mut lines)?;
        }
        Ok(parser.files)
    }

    impl Parser {
        fn current(&mut self) -> Option<&mut PatchedFile> {
            self.current.map(|index| &mut self.files[index])
        }

        fn start_file(&mut self, source: &str, target: &str) {
            self.files.push(PatchedFile {
                source: source.to_owned(),
                target: target.to_owned(),
                has_hunks: false,
            });
            self.current = Some(self.files.len() - 1);
        }

        fn line<'a>(
            &mut self,
            line: &'a str,
            rest: &mut impl Iterator<Item = &'a str>,
        ) -> Result<(), String> {
            let git_header = [
                crate::lazy_regex!(r#"^diff --git ("?a/[^\t\n]+"?) ("?b/[^\t\n]+"?)"#),
                crate::lazy_regex!(r"^diff --git (.*://[^\t\n]+) (.*://[^\t\n]+)"),
                crate::lazy_regex!(r"^diff --git ([^\t\n]+) ([^\t\n]+)"),
            ]
            .into_iter()
            .find_map(|header| header.captures(line));
            if let Some(names) = git_header {
                // unidiff also keeps the source as the pending `--- ` name.
                self.pending_source = Some(names[1].to_owned());
                self.start_file(&names[1], &names[2]);
                self.in_header = true;
                return Ok(());
            }
            if crate::lazy_regex!(r"^new file mode \d+\n?$").is_match(line) {
                DEV_NULL.clone_into(&mut self.header_file(line)?.source);
                return Ok(());
            }
            if crate::lazy_regex!(r"^deleted file mode \d+\n?$").is_match(line) {
                DEV_NULL.clone_into(&mut self.header_file(line)?.target);
                return Ok(());
            }
            let mode_line = [
                crate::lazy_regex!(r"^old mode \d+\n?$"),
                crate::lazy_regex!(r"^new mode \d+\n?$"),
                crate::lazy_regex!(r"^index [0-9a-f]+\.\.[0-9a-f]+ \d+\n?$"),
            ];
            if self.current.is_some()
                && self.in_header
                && mode_line.iter().any(|mode| mode.is_match(line))
            {
                return Ok(());
            }
            if let Some(name) = crate::lazy_regex!(r#"^--- ("?[^\t\n]*"?)"#).captures(line) {
                self.pending_source = Some(name[1].to_owned());
                if !self.in_header {
                    self.current = None;
                }
                return Ok(());
            }
            if let Some(name) = crate::lazy_regex!(r#"^\+\+\+ ("?[^\t\n]*"?)"#).captures(line) {
                return self.target_header(&name[1], line);
            }
            if let Some(header) =
                crate::lazy_regex!(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@").captures(line)
            {
                self.in_header = false;
                // A length left out is 1.
                let length = |group: usize| header.get(group).map_or(Ok(1), |n| n.as_str().parse());
                let (Ok(source_length), Ok(target_length)) = (length(2), length(4)) else {
                    return Err(format!("Unexpected hunk header: {line}"));
                };
                let file = self
                    .current()
                    .ok_or_else(|| format!("Unexpected hunk found: {line}"))?;
                file.has_hunks = true;
                return skip_hunk_body(source_length, target_length, rest);
            }
            if crate::lazy_regex!(r"^\\ No newline at end of file").is_match(line) {
                return match self.current() {
                    Some(file) if file.has_hunks => Ok(()),
                    Some(_) => Err("Unexpected marker: No newline at end of file".to_owned()),
                    None => Err(format!("Unexpected marker: {line}")),
                };
            }
            if line == "\n" && self.current().is_some_and(|file| file.has_hunks) {
                return Ok(());
            }
            self.patch_info(line)
        }

        /// The file a `new file mode` / `deleted file mode` line belongs to.
        fn header_file(&mut self, line: &str) -> Result<&mut PatchedFile, String> {
            let index = self
                .current
                .filter(|_| self.in_header)
                .ok_or_else(|| format!("Unexpected file mode line found: {line}"))?;
            Ok(&mut self.files[index])
        }

        fn target_header(&mut self, target: &str, line: &str) -> Result<(), String> {
            match self.current() {
                Some(file) if file.target != target => {
                    Err(format!("Target without source: {line}"))
                }
                Some(_) => Ok(()),
                None => {
                    let source = self
                        .pending_source
                        .take()
                        .ok_or_else(|| format!("Target without source: {line}"))?;
                    self.start_file(&source, target);
                    self.in_header = false;
                    Ok(())
                }
            }
        }

        /// Any other line is extended patch info; binary markers end a file.
        fn patch_info(&mut self, line: &str) -> Result<(), String> {
            if !self.in_header {
                self.current = None;
                self.in_header = true;
            }
            let binary = crate::lazy_regex!(
                r"^Binary files? ([^\t]+?)(?:\t[\s0-9:+-]+)?(?: and ([^\t]+?)(?:\t[\s0-9:+-]+)?)? (?:differ|has changed)"
            );
            if let Some(names) = binary.captures(line) {
                self.pending_source = Some(names[1].to_owned());
                if self.current.is_none() {
                    let target = names
                        .get(2)
                        .unwrap_or_else(|| names.get(1).expect("group 1 always matches"));
                    self.start_file(&names[1], target.as_str());
                }
                self.in_header = false;
                self.current = None;
            } else if line == "GIT binary patch\n" {
                if self.current.is_none() {
                    return Err(format!("Unexpected binary patch marker: {line}"));
                }
                self.in_header = false;
                self.current = None;
            }
            Ok(())
        }
    }

    /// `PatchedFile._parse_hunk`, keeping only the line accounting: the hunk
    /// ends once both sides reached their lengths, checked after each line.
    fn skip_hunk_body<'a>(
        source_length: u64,
        target_length: u64,
        lines: &mut impl Iterator<Item = &'a str>,
    ) -> Result<(), String> {
        let (mut source, mut target) = (0, 0);
        for line in lines.by_ref() {
            match line.chars().next() {
                Some('+') => target += 1,
                Some('-') => source += 1,
                Some(' ' | '\r' | '\n') => {
                    source += 1;
                    target += 1;
                }
                Some('\\') => {}
                _ => return Err(format!("Hunk diff line expected: {line}")),
            }
            if source > source_length || target > target_length {
                return Err("Hunk is longer than expected".to_owned());
            }
            if source == source_length && target == target_length {
                break;
            }
        }
        if source < source_length || target < target_length {
            return Err("Hunk is shorter than expected".to_owned());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "diff --git a/tests/test_a.py b/tests/test_a.py\n\
        index 1111111..2222222 100644\n\
        --- a/tests/test_a.py\n\
        +++ b/tests/test_a.py\n\
        @@ -1,2 +1,2 @@\n\
        --- not a header\n\
        +++ not a header either\n \n\
        diff --git a/tests/new.py b/tests/new.py\n\
        new file mode 100644\n\
        --- /dev/null\n\
        +++ b/tests/new.py\n\
        @@ -0,0 +1 @@\n\
        +x\n\
        diff --git a/tests/data.json b/tests/data.json\n\
        deleted file mode 100644\n\
        --- a/tests/data.json\n\
        +++ /dev/null\n\
        @@ -1 +0,0 @@\n\
        -{}\n";

    #[test]
    fn modified_files_skip_created_files_and_hunk_bodies() {
        assert_eq!(
            modified_files(PATCH).unwrap(),
            ["tests/test_a.py", "tests/data.json"]
        );
    }

    #[test]
    fn malformed_hunks_are_rejected_like_unidiff() {
        let short = "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n x\n";
        assert!(
            modified_files(short)
                .unwrap_err()
                .0
                .contains("shorter than expected")
        );
        let stray = "@@ -1 +1 @@\n";
        assert!(
            modified_files(stray)
                .unwrap_err()
                .0
                .contains("Unexpected hunk")
        );
    }

    #[test]
    fn directives_drop_non_test_files_and_django_uses_modules() {
        assert_eq!(
            test_directives("pallets/flask", PATCH),
            ["tests/test_a.py", "tests/new.py"]
        );
        assert_eq!(test_directives("django/django", PATCH), ["test_a", "new"]);
    }
}
