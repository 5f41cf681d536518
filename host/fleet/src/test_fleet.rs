//! What the crate's unit tests share: the smallest fleet file and a parse
//! of a fleet file as if it were `/cfg/fleet.toml`.

use std::path::Path;

use crate::FleetConfig;

/// A fleet file with only what is required.
pub(crate) const MINIMAL: &str = r#"
[run]
dataset = "tasks.jsonl"

[adapter]
name = "generic"

[[clusters]]
name = "here"
backend = "local"
"#;

/// `text` parsed as `/cfg/fleet.toml`; an error as its message.
pub(crate) fn parse(text: &str) -> Result<FleetConfig, String> {
    FleetConfig::parse(text, Path::new("/cfg/fleet.toml")).map_err(|e| e.to_string())
}
