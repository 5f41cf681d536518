//! execd's command stream: events as bare JSON followed by a blank line
//! (what execd sends), or as `data:` lines (server-sent events, what a proxy
//! or a newer execd may send). Both are read; comments, `event:`, `id:` and
//! `retry:` lines are skipped.

use serde::Deserialize;

/// One event of a command's stream.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct Event {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) text: Option<String>,
    #[serde(default)]
    pub(crate) error: Option<EventError>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct EventError {
    #[serde(default)]
    pub(crate) ename: String,
    #[serde(default)]
    pub(crate) evalue: String,
}

/// Splits a byte stream into events, whatever the chunk boundaries.
#[derive(Debug, Default)]
pub(crate) struct EventReader {
    pending: Vec<u8>,
    data: Vec<String>,
}

impl EventReader {
    /// Feeds `bytes`; returns the events they completed. A line that is
    /// not JSON is an error naming it.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Result<Vec<Event>, String> {
        self.pending.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..line.len() - 1]);
            let line = line.strip_suffix('\r').unwrap_or(&line);
            if line.is_empty() {
                if let Some(event) = self.dispatch()? {
                    events.push(event);
                }
            } else if let Some(data) = line.strip_prefix("data:") {
                self.data
                    .push(data.strip_prefix(' ').unwrap_or(data).to_string());
            } else if line.starts_with('{') {
                self.data.push(line.to_string());
            }
            // Anything else is an SSE field we do not use, or a comment.
        }
        Ok(events)
    }

    fn dispatch(&mut self) -> Result<Option<Event>, String> {
        if self.data.is_empty() {
            return Ok(None);
        }
        let json = std::mem::take(&mut self.data).join("\n");
        serde_json::from_str(&json)
            .map(Some)
            .map_err(|e| format!("execd sent an event that is not one: {e}: {}", cut(&json)))
    }
}

fn cut(text: &str) -> String {
    text.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = concat!(
        "{\"type\":\"init\",\"text\":\"c1\",\"timestamp\":1}\n\n",
        "{\"type\":\"stdout\",\"text\":\"hi\",\"timestamp\":2}\n\n",
        "{\"type\":\"error\",\"error\":{\"ename\":\"CommandExecError\",\"evalue\":\"3\",\"traceback\":[]},\"timestamp\":3}\n\n",
    );

    fn kinds(events: &[Event]) -> Vec<&str> {
        events.iter().map(|e| e.kind.as_str()).collect()
    }

    #[test]
    fn bare_json_events_are_read_across_any_chunk_boundaries() {
        for size in [1, 2, 7, 64, STREAM.len()] {
            let mut reader = EventReader::default();
            let mut events = Vec::new();
            for chunk in STREAM.as_bytes().chunks(size) {
                events.extend(reader.feed(chunk).unwrap());
            }
            assert_eq!(
                kinds(&events),
                ["init", "stdout", "error"],
                "chunks of {size}"
            );
            assert_eq!(events[2].error.as_ref().unwrap().evalue, "3");
        }
    }

    #[test]
    fn server_sent_events_and_their_other_fields_are_read_too() {
        let sse = ": comment\r\nevent: message\r\nid: 7\r\ndata: {\"type\":\"stdout\",\r\ndata: \"text\":\"a\"}\r\n\r\ndata:{\"type\":\"execution_complete\"}\n\n";
        let events = EventReader::default().feed(sse.as_bytes()).unwrap();
        assert_eq!(kinds(&events), ["stdout", "execution_complete"]);
        assert_eq!(events[0].text.as_deref(), Some("a"));
    }

    #[test]
    fn an_unfinished_event_waits_and_garbage_is_named() {
        let mut reader = EventReader::default();
        assert!(reader.feed(b"{\"type\":\"init\"}\n").unwrap().is_empty());
        assert_eq!(kinds(&reader.feed(b"\n").unwrap()), ["init"]);
        let error = reader.feed(b"{not json\n\n").unwrap_err();
        assert!(error.contains("{not json"), "{error}");
    }
}
