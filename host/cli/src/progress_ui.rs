//! Run progress on the terminal: a bar when stderr is a terminal, plain
//! lines otherwise (CI logs, pipes).

use std::io::IsTerminal;
use std::sync::Arc;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use sandfleet_engine::{Progress, PullSink, TaskRecord, TaskStatus, printable};

use crate::layer_bars::{LayerBars, Output};

/// Characters of a task's error or grade detail shown on its line; the
/// whole (bounded) message is in results.jsonl.
const CONSOLE_DETAIL: usize = 300;

/// The progress display for this process's stderr.
pub(crate) fn for_stderr() -> Arc<dyn Progress> {
    if std::io::stderr().is_terminal() {
        Arc::new(Bar::new())
    } else {
        Arc::new(Lines)
    }
}

struct Bar {
    /// The run's bar and, while an image is pulled, its layers'.
    bars: MultiProgress,
    bar: ProgressBar,
}

impl Bar {
    fn new() -> Self {
        let bars = MultiProgress::new();
        let bar = bars.add(ProgressBar::new(0));
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
            )
            .expect("a valid template"),
        );
        Bar { bars, bar }
    }
}

impl Progress for Bar {
    fn started(&self, total: usize, skipped: usize) {
        self.bar.set_length(total as u64);
        if skipped > 0 {
            self.bar.println(format!(
                "{skipped} task(s) already finished in this output directory; skipping them"
            ));
        }
    }

    fn step(&self, message: &str) {
        self.bar.set_message(message.to_string());
    }

    fn pull(&self, _cluster: &str, _image: &str) -> PullSink {
        let layers = LayerBars::within(self.bars.clone(), Output::Stderr);
        Box::new(move |event| layers.show(event))
    }

    fn finished(&self, record: &TaskRecord, done: usize, _total: usize) {
        self.bar.set_position(done as u64);
        if record.status != TaskStatus::Ok {
            self.bar.println(line(record));
        }
    }

    fn done(&self) {
        self.bar.finish_and_clear();
    }
}

struct Lines;

impl Progress for Lines {
    fn started(&self, total: usize, skipped: usize) {
        eprintln!("running {total} task(s); {skipped} already finished");
    }

    fn step(&self, message: &str) {
        eprintln!("{message}");
    }

    fn pull(&self, _cluster: &str, _image: &str) -> PullSink {
        let layers = LayerBars::new(Output::Stderr);
        Box::new(move |event| layers.show(event))
    }

    fn finished(&self, record: &TaskRecord, done: usize, total: usize) {
        eprintln!("[{done}/{total}] {}", line(record));
    }

    fn done(&self) {}
}

fn line(record: &TaskRecord) -> String {
    let status = match record.status {
        TaskStatus::Ok => "ok",
        TaskStatus::Failed => "failed",
        TaskStatus::InfraError => "infra_error",
    };
    let detail = record
        .error
        .as_deref()
        .or(record.grade.as_ref().map(|g| g.detail.as_str()))
        .unwrap_or("");
    // Ids and messages come from tasks: escaped, and the detail short.
    let detail = printable(detail);
    let shown: String = detail.chars().take(CONSOLE_DETAIL).collect();
    let cut = if shown.len() < detail.len() {
        "…"
    } else {
        ""
    };
    format!(
        "{} {status} ({:.1}s) {shown}{cut}",
        printable(&record.task_id),
        record.timings.total_s
    )
}
