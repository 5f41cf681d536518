//! The registry's table: one slot per plugin name for the registry's
//! life (so handles taken before a reload or a removal see what serves
//! the name now), the built-ins kept as fallbacks, and the type erasure
//! that lets one table hold slots and versions of all four worlds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use crate::contract::Kind;
use crate::loaded::{Loaded, VersionInfo, World};
use crate::worlds::Slot;
use crate::worlds::adapter::AdapterWorld;
use crate::worlds::placement::PlacementWorld;
use crate::worlds::reset::ResetWorld;
use crate::worlds::sizing::SizingWorld;

#[derive(Default)]
pub(super) struct State {
    pub(super) builtins: BTreeMap<String, BuiltinEntry>,
    pub(super) entries: BTreeMap<String, Entry>,
}

/// A built-in, compiled once: it serves its name unless a file overrides
/// it (and again when that file goes), and answers for faulting plugins
/// when the fallback is on.
pub(super) struct BuiltinEntry {
    pub(super) loaded: AnyLoaded,
}

#[derive(Default)]
pub(super) struct Entry {
    pub(super) slot: Option<AnySlot>,
    pub(super) last_error: Option<(String, SystemTime)>,
    /// The file was removed and no built-in took the name back.
    pub(super) removed: bool,
}

pub(super) enum AnySlot {
    Placement(Slot<PlacementWorld>),
    Sizing(Slot<SizingWorld>),
    Reset(Slot<ResetWorld>),
    Adapter(Slot<AdapterWorld>),
}

/// One loaded version of any world.
#[derive(Clone)]
pub(super) enum AnyLoaded {
    Placement(Arc<Loaded<PlacementWorld>>),
    Sizing(Arc<Loaded<SizingWorld>>),
    Reset(Arc<Loaded<ResetWorld>>),
    Adapter(Arc<Loaded<AdapterWorld>>),
}

impl AnySlot {
    pub(super) fn info(&self) -> VersionInfo {
        match self {
            AnySlot::Placement(slot) => slot.load().info.clone(),
            AnySlot::Sizing(slot) => slot.load().info.clone(),
            AnySlot::Reset(slot) => slot.load().info.clone(),
            AnySlot::Adapter(slot) => slot.load().info.clone(),
        }
    }

    pub(super) fn fault(&self) -> Option<String> {
        match self {
            AnySlot::Placement(slot) => slot.load().fault().map(str::to_string),
            AnySlot::Sizing(slot) => slot.load().fault().map(str::to_string),
            AnySlot::Reset(slot) => slot.load().fault().map(str::to_string),
            AnySlot::Adapter(slot) => slot.load().fault().map(str::to_string),
        }
    }
}

/// Moves a world's slot and loaded versions in and out of [`AnySlot`] and
/// [`AnyLoaded`].
pub(super) trait Slotted: World {
    const SLOT_KIND: Kind;
    fn wrap(slot: Slot<Self>) -> AnySlot;
    fn unwrap(any: &AnySlot) -> Option<&Slot<Self>>;
    fn wrap_loaded(loaded: Arc<Loaded<Self>>) -> AnyLoaded;
    fn unwrap_loaded(any: &AnyLoaded) -> Option<&Arc<Loaded<Self>>>;
}

macro_rules! slotted {
    ($world:ty, $variant:ident) => {
        impl Slotted for $world {
            const SLOT_KIND: Kind = Kind::$variant;
            fn wrap(slot: Slot<Self>) -> AnySlot {
                AnySlot::$variant(slot)
            }
            fn unwrap(any: &AnySlot) -> Option<&Slot<Self>> {
                match any {
                    AnySlot::$variant(slot) => Some(slot),
                    _ => None,
                }
            }
            fn wrap_loaded(loaded: Arc<Loaded<Self>>) -> AnyLoaded {
                AnyLoaded::$variant(loaded)
            }
            fn unwrap_loaded(any: &AnyLoaded) -> Option<&Arc<Loaded<Self>>> {
                match any {
                    AnyLoaded::$variant(loaded) => Some(loaded),
                    _ => None,
                }
            }
        }
    };
}
slotted!(PlacementWorld, Placement);
slotted!(SizingWorld, Sizing);
slotted!(ResetWorld, Reset);
slotted!(AdapterWorld, Adapter);
