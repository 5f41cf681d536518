//! A pull's layers as `docker pull` shows them, one line per layer:
//! `<short digest>: Downloading [===>   ] 12 MiB/40 MiB`, then
//! `Already exists` or `Pull complete`. Drawn as bars on a terminal; where
//! nothing is drawn (a pipe, a log), each layer's end is a plain line.
//! `sandfleet images pull` and `import` and a run's pulls share it.

use std::collections::HashMap;
use std::sync::Mutex;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use sandfleet_core::PullEvent;

/// Where a layer's end goes when no bar is drawn.
#[derive(Clone, Copy)]
pub(crate) enum Output {
    /// Standard output (`sandfleet images`, whose output it is).
    Stdout,
    /// Standard error (a run, whose output is its results).
    Stderr,
}

/// The layers of one pull.
pub(crate) struct LayerBars {
    bars: MultiProgress,
    lines: Output,
    layers: Mutex<HashMap<String, ProgressBar>>,
}

impl LayerBars {
    /// Bars of their own, drawn on standard error when it is a terminal.
    pub(crate) fn new(lines: Output) -> Self {
        Self::within(MultiProgress::new(), lines)
    }

    /// Bars drawn among `bars` (beside a run's own bar).
    pub(crate) fn within(bars: MultiProgress, lines: Output) -> Self {
        LayerBars {
            bars,
            lines,
            layers: Mutex::new(HashMap::new()),
        }
    }

    fn bar(&self, layer: &str) -> ProgressBar {
        let mut layers = self.layers.lock().unwrap_or_else(|e| e.into_inner());
        layers
            .entry(layer.to_string())
            .or_insert_with(|| {
                let bar = self.bars.add(ProgressBar::new(0));
                bar.set_style(
                    ProgressStyle::with_template(
                        "{prefix}: {msg:16} {wide_bar} {bytes}/{total_bytes}",
                    )
                    .expect("a valid template")
                    .progress_chars("=> "),
                );
                bar.set_prefix(short(layer).to_string());
                bar.set_message("Waiting");
                bar
            })
            .clone()
    }

    /// Shows one event of the pull.
    pub(crate) fn show(&self, event: PullEvent) {
        match event {
            PullEvent::Resolved { layers } => {
                for (layer, total) in layers {
                    self.bar(&layer).set_length(total);
                }
            }
            PullEvent::LayerExists { layer } => self.done(&layer, "Already exists"),
            PullEvent::LayerWaiting { layer } => self.bar(&layer).set_message("Waiting"),
            PullEvent::LayerProgress { layer, done, total } => {
                let bar = self.bar(&layer);
                bar.set_length(total);
                bar.set_position(done);
                bar.set_message("Downloading");
            }
            PullEvent::LayerRetrying { layer, reason } => {
                let bar = self.bar(&layer);
                bar.set_message("Retrying");
                let line = format!("{}: retrying: {reason}", short(&layer));
                if self.bars.is_hidden() {
                    self.print(&line);
                } else {
                    let _ = self.bars.println(line);
                }
            }
            PullEvent::LayerDone { layer } => self.done(&layer, "Pull complete"),
        }
    }

    fn done(&self, layer: &str, message: &'static str) {
        let bar = self.bar(layer);
        bar.set_style(ProgressStyle::with_template("{prefix}: {msg}").expect("a valid template"));
        bar.finish_with_message(message);
        if self.bars.is_hidden() {
            self.print(&format!("{}: {message}", short(layer)));
        }
    }

    fn print(&self, line: &str) {
        match self.lines {
            Output::Stdout => println!("{line}"),
            Output::Stderr => eprintln!("{line}"),
        }
    }

    /// Leaves the bars of layers that did not finish (a failed pull) as
    /// they are.
    pub(crate) fn finish(&self) {
        let layers = self.layers.lock().unwrap_or_else(|e| e.into_inner());
        for bar in layers.values() {
            if !bar.is_finished() {
                bar.abandon();
            }
        }
    }
}

impl Drop for LayerBars {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A layer's digest as `docker pull` shows it: 12 hex digits.
fn short(layer: &str) -> &str {
    let hex = layer.split_once(':').map_or(layer, |(_, hex)| hex);
    hex.get(..12).unwrap_or(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_is_shown_by_12_hex_digits() {
        assert_eq!(
            short(&format!("sha256:{}", "ab".repeat(32))),
            "abababababab"
        );
        assert_eq!(short("sha256:abc"), "abc");
    }
}
