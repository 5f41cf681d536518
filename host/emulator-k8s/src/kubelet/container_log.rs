//! A container's log as the container runtime keeps it (containerd's CRI log file): the
//! main process's output (stdout and stderr through one pipe, so interleaved exactly as
//! written) cut into lines, each stamped when it was received. As containerd does, a
//! line longer than [`MAX_LINE`] is cut into partial lines, a `\r` before a newline is
//! dropped, and what the process leaves unterminated at its end is a partial line (no
//! newline is added). [`ReadOptions`] and [`Writer`] read it as the kubelet reads that
//! file for `pods/log` and for a termination message.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::SystemTime;

use bytes::Bytes;
use tokio::sync::watch;

/// The most of one container's log kept in memory: the newest 2 MiB of lines, counting
/// each line's bytes plus [`ENTRY_COST`] (so a flood of one-byte lines is bounded too);
/// older lines are dropped, as the kubelet's log rotation drops old files. 2 MiB is the
/// memory the kubelet already kept per pod for its main command's result (1 MiB of
/// stdout and 1 MiB of stderr), now spent on the newest output instead of the oldest —
/// enough for any log a test or a person reads through `kubectl logs`, and at the
/// default cluster's 330 pods (3 nodes × 110) still under a gigabyte in the worst case.
const MAX_KEPT: usize = 2 * 1024 * 1024;

/// The longest line kept whole: containerd's default `max_container_log_line_size`.
const MAX_LINE: usize = 16 * 1024;

/// What a kept line costs beyond its bytes.
const ENTRY_COST: usize = std::mem::size_of::<Entry>();

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// When the runtime received its end.
    pub(crate) received: SystemTime,
    /// The line, ending in a newline unless it is partial.
    pub(crate) text: Bytes,
}

/// The lines kept and the line being written.
#[derive(Debug, Default)]
struct Kept {
    entries: VecDeque<Entry>,
    /// The position (count of lines ever logged before it) of `entries[0]`: readers
    /// that follow keep their place by position, across dropped lines.
    first: u64,
    /// What `entries` costs against [`MAX_KEPT`].
    cost: usize,
    /// Bytes written since the last newline.
    unfinished: Vec<u8>,
    /// The process has ended: no line will come.
    ended: bool,
}

impl Kept {
    fn push(&mut self, received: SystemTime, text: Vec<u8>) {
        self.cost += text.len() + ENTRY_COST;
        self.entries.push_back(Entry {
            received,
            text: Bytes::from(text),
        });
        while self.cost > MAX_KEPT {
            let Some(oldest) = self.entries.pop_front() else {
                break;
            };
            self.cost -= oldest.text.len() + ENTRY_COST;
            self.first += 1;
        }
    }

    fn next_position(&self) -> u64 {
        self.first + self.entries.len() as u64
    }

    fn batch_from(&self, index: usize) -> Batch {
        Batch {
            entries: self.entries.iter().skip(index).cloned().collect(),
            next: self.next_position(),
            ended: self.ended,
        }
    }
}

/// Lines read from a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Batch {
    /// The lines, oldest first.
    pub(crate) entries: Vec<Entry>,
    /// The position to read on from.
    pub(crate) next: u64,
    /// The process had ended when this was read: nothing comes after these lines.
    pub(crate) ended: bool,
}

/// One container's log, written by the runtime and read by any number of readers.
#[derive(Debug)]
pub(crate) struct ContainerLog {
    kept: Mutex<Kept>,
    /// Told of every new line and of the end.
    changed: watch::Sender<()>,
}

impl Default for ContainerLog {
    fn default() -> Self {
        Self {
            kept: Mutex::default(),
            changed: watch::Sender::new(()),
        }
    }
}

impl ContainerLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Log what the process wrote: every line it completes, stamped now.
    pub(crate) fn write(&self, mut bytes: &[u8]) {
        let now = SystemTime::now();
        let mut kept = self.lock();
        if kept.ended {
            return;
        }
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|b| *b == b'\n');
            let segment = &bytes[..newline.unwrap_or(bytes.len())];
            kept.unfinished.extend_from_slice(segment);
            while kept.unfinished.len() > MAX_LINE {
                let rest = kept.unfinished.split_off(MAX_LINE);
                let partial = std::mem::replace(&mut kept.unfinished, rest);
                kept.push(now, partial);
            }
            match newline {
                Some(at) => {
                    let mut line = std::mem::take(&mut kept.unfinished);
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    line.push(b'\n');
                    kept.push(now, line);
                    bytes = &bytes[at + 1..];
                }
                None => bytes = &[],
            }
        }
        drop(kept);
        self.changed.send_replace(());
    }

    /// The process has ended: log what it left unterminated as a partial line, and let
    /// followers finish. Idempotent.
    pub(crate) fn end(&self) {
        let mut kept = self.lock();
        if kept.ended {
            return;
        }
        let unfinished = std::mem::take(&mut kept.unfinished);
        if !unfinished.is_empty() {
            kept.push(SystemTime::now(), unfinished);
        }
        kept.ended = true;
        drop(kept);
        self.changed.send_replace(());
    }

    /// Told of every change after it is made; `borrow_and_update` before reading so
    /// that `changed` wakes for anything logged after the read.
    pub(crate) fn subscribe(&self) -> watch::Receiver<()> {
        self.changed.subscribe()
    }

    /// The last `tail` lines kept (every line kept: None).
    pub(crate) fn read_tail(&self, tail: Option<u64>) -> Batch {
        let kept = self.lock();
        let len = kept.entries.len();
        let skip = tail.map_or(0, |n| {
            len.saturating_sub(usize::try_from(n).unwrap_or(usize::MAX))
        });
        kept.batch_from(skip)
    }

    /// The lines from position `from` on (from the oldest kept, if older lines were
    /// dropped meanwhile).
    pub(crate) fn read_from(&self, from: u64) -> Batch {
        let kept = self.lock();
        let skip = usize::try_from(from.saturating_sub(kept.first)).unwrap_or(usize::MAX);
        kept.batch_from(skip)
    }

    /// What `options` select of the log now, rendered (a read that does not follow).
    pub(crate) fn read(&self, options: &ReadOptions) -> Vec<u8> {
        Writer::new(options).render(&self.read_tail(options.tail_lines).entries)
    }
}

/// How to read a log: the kubelet's `PodLogOptions`, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ReadOptions {
    /// Start this many lines before the end (None: at the oldest line kept).
    pub(crate) tail_lines: Option<u64>,
    /// Stop after this many bytes, timestamps included, even mid-line.
    pub(crate) limit_bytes: Option<u64>,
    /// Skip lines received before this.
    pub(crate) since: Option<SystemTime>,
    /// Prefix each line with when it was received (RFC 3339, nanoseconds, UTC) and a
    /// space.
    pub(crate) timestamps: bool,
}

/// Renders lines as the kubelet writes them out, keeping count of the byte limit
/// across calls (a following reader renders many batches).
#[derive(Debug)]
pub(crate) struct Writer {
    since: Option<SystemTime>,
    timestamps: bool,
    remaining: Option<u64>,
}

impl Writer {
    pub(crate) fn new(options: &ReadOptions) -> Self {
        Self {
            since: options.since,
            timestamps: options.timestamps,
            remaining: options.limit_bytes,
        }
    }

    /// The byte limit is reached: nothing more will be written.
    pub(crate) fn exhausted(&self) -> bool {
        self.remaining == Some(0)
    }

    /// The bytes `entries` come out as, up to the byte limit.
    pub(crate) fn render(&mut self, entries: &[Entry]) -> Vec<u8> {
        let mut out = Vec::new();
        for entry in entries {
            if self.exhausted() {
                break;
            }
            if self.since.is_some_and(|since| entry.received < since) {
                continue;
            }
            let stamp = if self.timestamps {
                format!("{} ", humantime::format_rfc3339_nanos(entry.received))
            } else {
                String::new()
            };
            let line = stamp.as_bytes().iter().chain(entry.text.iter());
            match &mut self.remaining {
                Some(remaining) => {
                    let before = out.len();
                    out.extend(line.take(usize::try_from(*remaining).unwrap_or(usize::MAX)));
                    *remaining -= (out.len() - before) as u64;
                }
                None => out.extend(line),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn texts(batch: &Batch) -> Vec<&[u8]> {
        batch.entries.iter().map(|e| &e.text[..]).collect()
    }

    #[test]
    fn output_is_cut_into_lines_as_containerd_cuts_it() {
        let log = ContainerLog::default();
        log.write(b"one\ntw");
        log.write(b"o\r\nthree");
        let long = vec![b'x'; MAX_LINE * 2 + 5];
        log.write(&long);
        log.write(b"\n");
        log.write(b"left");
        let before_end = log.read_tail(None);
        assert!(!before_end.ended);
        log.end();
        log.end();
        log.write(b"after the end\n");
        let all = log.read_tail(None);
        let mut expected: Vec<Vec<u8>> = vec![b"one\n".to_vec(), b"two\n".to_vec()];
        let mut first = b"three".to_vec();
        first.extend(vec![b'x'; MAX_LINE - 5]);
        expected.push(first);
        expected.push(vec![b'x'; MAX_LINE]);
        expected.push([vec![b'x'; 10], b"\n".to_vec()].concat());
        expected.push(b"left".to_vec());
        assert_eq!(texts(&all), expected);
        assert!(all.ended);
        assert_eq!(all.next, 6);
        assert_eq!(texts(&log.read_tail(Some(2))), &expected[4..]);
        assert_eq!(texts(&log.read_from(5)), &expected[5..]);
        assert!(log.read_from(6).entries.is_empty());
    }

    #[test]
    fn the_oldest_lines_go_once_the_log_passes_its_cap_and_readers_keep_their_place() {
        let log = ContainerLog::default();
        let line = [vec![b'y'; 1023], b"\n".to_vec()].concat();
        let per_line = line.len() + ENTRY_COST;
        let fits = MAX_KEPT / per_line;
        for _ in 0..fits + 10 {
            log.write(&line);
        }
        let all = log.read_tail(None);
        assert_eq!(all.entries.len(), fits);
        assert_eq!(all.next, (fits + 10) as u64);
        // A follower left at position 3 resumes at the oldest line kept.
        assert_eq!(log.read_from(3).entries.len(), fits);
        assert!(all.entries.len() * per_line <= MAX_KEPT);
    }

    #[test]
    fn the_writer_cuts_at_the_byte_limit_across_batches_and_skips_older_lines() {
        let received = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_500_000_000_000_000_007);
        let entry = |text: &str, received| Entry {
            received,
            text: Bytes::from(text.to_string()),
        };
        let options = ReadOptions {
            limit_bytes: Some(7),
            ..ReadOptions::default()
        };
        let mut writer = Writer::new(&options);
        assert_eq!(writer.render(&[entry("abcd\n", received)]), b"abcd\n");
        assert!(!writer.exhausted());
        assert_eq!(
            writer.render(&[entry("efgh\n", received), entry("ij\n", received)]),
            b"ef"
        );
        assert!(writer.exhausted());
        let mut stamped = Writer::new(&ReadOptions {
            timestamps: true,
            since: Some(received),
            ..ReadOptions::default()
        });
        let older = received - Duration::from_secs(1);
        assert_eq!(
            stamped.render(&[entry("old\n", older), entry("new\n", received)]),
            b"2017-07-14T02:40:00.000000007Z new\n"
        );
    }
}
