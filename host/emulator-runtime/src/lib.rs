//! What sandfleet's two emulators share, so that neither depends on the
//! other: the images they can run (`images`: names mapped to directories or
//! OCI references), the one typed reader of `--images-from FLEET.toml`
//! (`fleet_file`), the local backend their pods and sandboxes run on
//! (`host`), and the count of creates under way that teardown waits for
//! (`gate`).

mod fleet_file;
mod gate;
mod host;
mod images;

pub use fleet_file::images_from_fleet;
pub use gate::{CreateGate, Creating};
pub use host::{CREATE_TIMEOUT, Isolation, Resolved, SandboxHost, Shape};
pub use images::{FleetImages, ImageMap, OciMap, parse_image_arg};

/// The environment variable whose value marks a client's logical command:
/// both emulators count starts per marker, so a command a client retried
/// shows up as a count of 2.
pub const MARKER_ENV: &str = "SANDFLEET_COMMAND_ID";
