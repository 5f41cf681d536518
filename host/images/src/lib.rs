//! OCI images for sandfleet's sandboxes: references, registry pulls,
//! imports of `docker save` tarballs and OCI layouts, and the
//! content-addressed layer store whose unpacked layers a sandbox runtime
//! mounts as overlay lower layers.
//!
//! ```no_run
//! # async fn demo() -> Result<(), sandfleet_images::Error> {
//! use sandfleet_images::{Ownership, PullOptions, Reference, Store};
//!
//! let store = Store::open("/var/lib/sandfleet".as_ref(), Ownership::Caller)?;
//! let reference = Reference::parse("python:3.11")?;
//! let image = store
//!     .pull(&reference, &PullOptions::default(), &|event| println!("{event:?}"))
//!     .await?;
//! let _pin = store.pin(&image)?; // while a sandbox uses it
//! let mut lowers = image.layer_dirs(); // lowest first
//! lowers.reverse(); // overlayfs wants the topmost first
//! # Ok(()) }
//! ```
//!
//! The store's layout and guarantees are described in [`Store`]'s module
//! (`store`); how a layer is unpacked safely, in `unpack`.

mod auth;
mod digest;
mod error;
mod fsx;
mod import;
mod layer;
mod lock;
mod ownership;
mod platform;
mod pull;
mod reference;
mod registry;
mod retry;
pub mod spec;
mod store;
mod unpack;

pub use auth::CredentialSource;
pub use digest::Digest;
pub use error::Error;
pub use import::ImportOptions;
pub use ownership::Ownership;
pub use platform::Platform;
pub use pull::{Missing, Progress, ProgressEvent, PullOptions, PullPolicy};
pub use reference::{Reference, Rewrites};
pub use retry::RetryPolicy;
pub use spec::{Compression, RunConfig};
pub use store::{Image, LayerInfo, Pin, PruneReport, Store};
pub use unpack::UnpackLimits;
