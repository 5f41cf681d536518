//! How a command is framed inside a pod's shell, so that one websocket can
//! carry many commands without mixing up their output or exit codes.
//!
//! Each command gets a marker of 128 random bits that the command itself
//! never sees. The shell prints, around the command's own output, a start
//! frame `\n<marker> S <pid>\n` (from the command's process, before it
//! becomes the command, so nothing the command writes can precede it) and an
//! end frame `\n<marker> E <exit code>\n`; stderr gets `\n<marker> S\n` and
//! `\n<marker> E\n`. Output from earlier commands' leftover processes falls
//! before the start frame and is dropped. The command runs in its own
//! process group (`setsid`, when the image has it), whose id is the pid in
//! the start frame: a timeout kills that group.

use sandfleet_core::ExecRequest;

/// The shell text that runs `request`, framed by `marker`. Ends with
/// `exit <code>` when `last` (a one-shot exec, whose status channel then
/// carries the exit code too).
pub(crate) fn script(request: &ExecRequest, marker: &str, last: bool) -> String {
    // The child, a subshell (a fork of the shell, no new program to load):
    // its own pid (`$$` is the parent's; the one entry a glob finds in
    // `/proc/self/task` is the subshell's only thread, whose id is its pid:
    // one directory read, where a builtin `read` of `/proc/self/stat` took a
    // system call per byte, 0.38 ms a command here; where there is no /proc
    // a program started from it names it as its parent), frames, then
    // workdir, then the program looked up on PATH by builtins, then the
    // command in its own group. The lookup is the shell's own rather than
    // `setsid`'s: a toolbox's busybox may prefer its applets to the image's
    // programs of the same name.
    const CHILD: &str = r#"m=$1; d=$2; e=$3; shift 3; p=; for t in /proc/self/task/[0-9]*; do p=${t##*/}; done; case $p in ''|*[!0-9]*) p=$(exec sh -c 'echo "$PPID"');; esac; if [ "$e" = 1 ]; then exec 2>&1; else printf '\n%s S\n' "$m" >&2; fi; printf '\n%s S %s\n' "$m" "$p"; if [ -n "$d" ]; then cd -- "$d" || exit 126; fi; case $1 in */*) ;; *) o=$IFS; IFS=:; for x in $PATH; do case $x in /*) if [ -f "$x/$1" ] && [ -x "$x/$1" ]; then x=$x/$1; shift; set -- "$x" "$@"; break; fi;; esac; done; IFS=$o;; esac; if command -v setsid >/dev/null 2>&1; then exec setsid "$@"; else exec "$@"; fi"#;
    let mut words: Vec<String> = vec![
        marker.into(),
        request.workdir.clone().unwrap_or_default(),
        if request.merge_stderr { "1" } else { "0" }.into(),
    ];
    words.extend(request.argv.iter().cloned());
    // The request's environment is exported by the subshell, before the
    // lookup, so a PATH of its own is the one searched.
    let exports = if request.env.is_empty() {
        String::new()
    } else {
        let assignments: Vec<String> = request
            .env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("export {}; ", shell_words::join(&assignments))
    };
    let command = format!("( {exports}set -- {}; {CHILD} )", shell_words::join(&words));
    let input = match &request.stdin {
        Some(bytes) => format!("printf '{}' | ", octal(bytes)),
        None => String::new(),
    };
    let redirect = if request.stdin.is_some() {
        ""
    } else {
        " </dev/null"
    };
    let ending = if last { " exit \"$sf_c\";" } else { "" };
    format!(
        "{{ {input}{command}{redirect} & sf_p=$!; wait \"$sf_p\"; sf_c=$?; printf '\\n%s E %s\\n' '{marker}' \"$sf_c\"; printf '\\n%s E\\n' '{marker}' >&2;{ending} }}\n"
    )
}

/// Whether `name` is a variable name a POSIX shell exports: the command's
/// environment is set by the shell (`export`), which refuses any other,
/// and by refusing would end the command before it starts.
pub(crate) fn is_shell_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `bytes` as a printf format that prints exactly them: letters and digits
/// as they are, every other byte as an octal escape (binary-safe, NUL
/// included, and nothing the shell or printf would interpret).
fn octal(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    for &byte in bytes {
        if byte.is_ascii_alphanumeric() {
            text.push(byte as char);
        } else {
            text.push_str(&format!("\\{byte:03o}"));
        }
    }
    text
}

/// The shell text that kills process group `$1` (or the process, where
/// the command could not get its own group). No `--`: dash's kill takes it
/// for a pid and kills nothing.
pub(crate) const KILL_GROUP: &str = r#"kill -KILL "-$1" 2>/dev/null || kill -KILL "$1""#;

/// What a stream has shown of one command so far.
#[derive(Debug)]
pub(crate) struct Stream {
    /// `\n<marker> S`, then ` <pid>` on stdout.
    start: Vec<u8>,
    /// `\n<marker> E`, then ` <code>` on stdout.
    end: Vec<u8>,
    /// Bytes not yet judged (a frame may be arriving).
    pending: Vec<u8>,
    started: bool,
    /// The start frame's argument (stdout's pid).
    pub(crate) pid: Option<u32>,
    /// The end frame's argument (stdout's exit code); `Some` once ended.
    pub(crate) ended: Option<Option<i32>>,
}

impl Stream {
    /// A stream of the command marked `marker`. Without a start frame to
    /// wait for (stderr merged into stdout), output counts from the first
    /// byte.
    pub(crate) fn new(marker: &str, expect_start: bool) -> Self {
        Stream {
            start: format!("\n{marker} S").into_bytes(),
            end: format!("\n{marker} E").into_bytes(),
            pending: Vec::new(),
            started: !expect_start,
            pid: None,
            ended: None,
        }
    }

    /// Whether the start frame has been seen.
    pub(crate) fn started(&self) -> bool {
        self.started
    }

    /// Takes `bytes` from the wire and returns the command's output among
    /// them; frames and what came before the start frame are dropped. Bytes
    /// that may begin a frame are held until they can be judged. Bytes
    /// after the end frame are not the command's and are dropped.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut output = Vec::new();
        if self.ended.is_some() {
            return output;
        }
        self.pending.extend_from_slice(bytes);
        loop {
            let frame = if self.started { &self.end } else { &self.start };
            match find(&self.pending, frame) {
                Some(at) => {
                    // A frame is its marker, an optional argument, and `\n`.
                    let after = at + frame.len();
                    let Some(newline) = self.pending[after..].iter().position(|&b| b == b'\n')
                    else {
                        // The rest of the frame has not arrived.
                        if self.started {
                            output.extend(self.pending.drain(..at));
                        } else {
                            self.pending.drain(..at);
                        }
                        return output;
                    };
                    let argument = String::from_utf8_lossy(&self.pending[after..after + newline])
                        .trim()
                        .to_string();
                    if self.started {
                        output.extend_from_slice(&self.pending[..at]);
                        self.ended = Some(argument.parse().ok());
                        self.pending.clear();
                        return output;
                    }
                    self.pid = argument.parse().ok();
                    self.started = true;
                    self.pending.drain(..after + newline + 1);
                }
                None => {
                    let keep = held_back(&self.pending, frame);
                    let ready = self.pending.len() - keep;
                    if self.started {
                        output.extend(self.pending.drain(..ready));
                    } else {
                        self.pending.drain(..ready);
                    }
                    return output;
                }
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// How many bytes at the end of `bytes` may be the start of `frame`.
fn held_back(bytes: &[u8], frame: &[u8]) -> usize {
    (1..frame.len().min(bytes.len() + 1))
        .rev()
        .find(|&n| bytes.ends_with(&frame[..n]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: &str = "0123456789abcdef0123456789abcdef";

    fn feed_all(stream: &mut Stream, wire: &[u8], piece: usize) -> Vec<u8> {
        wire.chunks(piece).flat_map(|c| stream.feed(c)).collect()
    }

    #[test]
    fn only_names_a_shell_exports_are_environment_names() {
        for good in ["PATH", "_x", "a1_B"] {
            assert!(is_shell_name(good), "{good}");
        }
        for bad in ["", "1A", "A-B", "A B", "A=B", "ü"] {
            assert!(!is_shell_name(bad), "{bad}");
        }
    }

    #[test]
    fn output_between_frames_is_the_commands_whatever_the_pieces() {
        let wire =
            format!("stray from before\n{M} S 42\nhello\nno newline at end\n{M} E 3\nlater stray");
        for piece in [1, 2, 5, 7, 64, 1000] {
            let mut stream = Stream::new(M, true);
            let output = feed_all(&mut stream, wire.as_bytes(), piece);
            assert_eq!(
                String::from_utf8(output).unwrap(),
                "hello\nno newline at end",
                "piece {piece}"
            );
            assert_eq!(stream.pid, Some(42));
            assert_eq!(stream.ended, Some(Some(3)));
        }
    }

    #[test]
    fn another_commands_marker_or_a_partial_one_is_output() {
        let other = "ffffffffffffffffffffffffffffffff";
        let wire = format!("\n{M} S 7\n\n{other} E 0\n\n{}\n{M} E 0\n", &M[..10]);
        let mut stream = Stream::new(M, true);
        let output = feed_all(&mut stream, wire.as_bytes(), 3);
        assert_eq!(
            String::from_utf8(output).unwrap(),
            format!("\n{other} E 0\n\n{}", &M[..10])
        );
        assert_eq!(stream.ended, Some(Some(0)));
    }

    #[test]
    fn binary_output_and_merged_streams_need_no_start_frame() {
        let mut wire = vec![0u8, 255, 10, 13];
        wire.extend_from_slice(format!("\n{M} E 0\n").as_bytes());
        let mut stream = Stream::new(M, false);
        assert_eq!(feed_all(&mut stream, &wire, 1), vec![0u8, 255, 10, 13]);
        let mut stderr = Stream::new(M, true);
        assert!(stderr.feed(format!("x\n{M} S\nerr\n{M} E\n").as_bytes()) == b"err");
        assert_eq!(stderr.ended, Some(None));
    }

    #[test]
    fn stdin_is_encoded_so_the_shell_and_printf_leave_it_alone() {
        assert_eq!(octal(b"a1%\\'\n\0"), "a1\\045\\134\\047\\012\\000");
        let request = ExecRequest {
            argv: vec!["cat".into()],
            stdin: Some(b"x y".to_vec()),
            ..ExecRequest::default()
        };
        let text = script(&request, M, true);
        assert!(text.starts_with("{ printf 'x\\040y' | ( set -- "), "{text}");
        assert!(text.trim_end().ends_with("exit \"$sf_c\"; }"), "{text}");
    }
}
