//! Components as reload tests and benches handle them: other versions of
//! one component, and plugin files put in place as a deploy does.

use std::path::Path;

/// `base` with a custom section holding `salt` appended, padded to
/// `padding` bytes: the same code under a new hash, so a registry takes it
/// for a new version and a compiled cache has never seen it.
pub fn salted(base: &[u8], salt: u64, padding: usize) -> Vec<u8> {
    let name = b"sandfleet-salt";
    let mut payload = vec![name.len() as u8];
    payload.extend_from_slice(name);
    payload.extend_from_slice(&salt.to_le_bytes());
    payload.resize(payload.len().max(padding), 0xa5);
    let mut component = base.to_vec();
    component.push(0); // custom section id
    let mut size = payload.len();
    loop {
        let low = (size & 0x7f) as u8;
        size >>= 7;
        if size == 0 {
            component.push(low);
            break;
        }
        component.push(low | 0x80);
    }
    component.extend_from_slice(&payload);
    component
}

/// Writes `bytes` as the plugin file `dir/name.wasm` the way a deploy does:
/// to a hidden temporary file, then renamed over the old one.
pub fn install_plugin(dir: &Path, name: &str, bytes: &[u8]) {
    let hidden = dir.join(format!(".{name}.wasm.tmp"));
    std::fs::write(&hidden, bytes).unwrap();
    std::fs::rename(&hidden, dir.join(format!("{name}.wasm"))).unwrap();
}
