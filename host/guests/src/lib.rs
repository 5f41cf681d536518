//! sandfleet's guest components, built for `wasm32-wasip2` by this crate's build
//! script: the built-in plugins (embedded) and the test guests (by path).

/// A plugin compiled into the host binary.
#[derive(Debug, Clone, Copy)]
pub struct Builtin {
    /// The plugin's name; a file `<name>.wasm` in the plugin directory overrides it.
    pub name: &'static str,
    /// The component's bytes.
    pub wasm: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/guests.rs"));

/// The component of the built-in plugin `name`, if there is one.
pub fn builtin(name: &str) -> Option<&'static [u8]> {
    BUILTINS.iter().find(|b| b.name == name).map(|b| b.wasm)
}
