//! The collector behind [`Store::prune`] and [`Store::remove`]: what
//! killed pulls left, records no reference names, layers no image uses,
//! and, over a budget, the least recently used images that are not
//! pinned. It runs with the store's gc lock held alone, and removes an
//! image or a layer only while it holds that image's pin or that layer's
//! lock exclusively, so pinned images and layers being unpacked (here or
//! in another process) stay.

use std::collections::BTreeSet;
use std::time::SystemTime;

use crate::digest::Digest;
use crate::error::Error;
use crate::fsx;
use crate::lock::{self, Lock, Mode};
use crate::reference::Reference;

use super::records::{LayerMeta, Record, read_dir, read_json};
use super::{STORE, Store};

/// What [`Store::prune`] removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Images removed to get under the budget (their references).
    pub images: Vec<String>,
    /// Layer directories removed.
    pub layers: usize,
    /// Bytes of file content those layers held.
    pub bytes: u64,
    /// Leftovers of killed pulls removed.
    pub temporaries: usize,
    /// Bytes of layer content left in the store.
    pub remaining: u64,
}

/// The collector of one store, run with the gc lock held alone.
pub(super) struct Collector<'s> {
    pub(super) store: &'s Store,
}

impl Collector<'_> {
    /// One pass, run with the gc lock held alone.
    pub(super) fn run(&self, report: &mut PruneReport, budget: Option<u64>) -> Result<(), Error> {
        report.temporaries += self.store.clean_temporaries(None)?;
        let records = self.store.read_records()?;
        let named: BTreeSet<Digest> = self
            .store
            .read_refs()?
            .into_iter()
            .map(|r| r.manifest)
            .collect();
        // Records no reference names are pulls that never finished; they
        // go unless a pull still holds them.
        let mut live: Vec<(Record, Option<Lock>)> = Vec::new();
        for record in records {
            let pin_path = self.store.pin_path(&record.manifest);
            let free = lock::try_lock(&pin_path, Mode::Exclusive)
                .map_err(|e| Error::io(STORE, "locking", &pin_path, e))?;
            match free {
                Some(held) if !named.contains(&record.manifest) => {
                    self.store.delete_image(&record.manifest)?;
                    let _ = std::fs::remove_file(&pin_path);
                    drop(held);
                }
                held => live.push((record, held)),
            }
        }
        let mut layers = self.scan_layers()?;
        let used = |live: &[(Record, Option<Lock>)]| -> BTreeSet<String> {
            live.iter()
                .flat_map(|(r, _)| r.layers.iter().map(|l| l.diff_id.hex().to_string()))
                .collect()
        };
        let in_use = used(&live);
        let mut unused: Vec<&ScannedLayer> =
            layers.iter().filter(|l| !in_use.contains(&l.hex)).collect();
        unused.sort_by_key(|l| l.last_used);
        let mut total: u64 = layers.iter().map(|l| l.bytes).sum();
        let mut removed = BTreeSet::new();
        for layer in unused {
            if budget.is_some_and(|b| total <= b) {
                break;
            }
            if self.remove_layer(layer)? {
                total -= layer.bytes;
                report.layers += 1;
                report.bytes += layer.bytes;
                removed.insert((layer.key.clone(), layer.hex.clone()));
            }
        }
        layers.retain(|l| !removed.contains(&(l.key.clone(), l.hex.clone())));
        if let Some(budget) = budget {
            // Unpinned images, least recently used first.
            let mut order: Vec<usize> = (0..live.len()).filter(|&i| live[i].1.is_some()).collect();
            order.sort_by_key(|&i| self.store.record_used(&live[i].0.manifest));
            for i in order {
                if total <= budget {
                    break;
                }
                let manifest = live[i].0.manifest.clone();
                let names: Vec<String> = self
                    .store
                    .read_refs()?
                    .into_iter()
                    .filter(|r| r.manifest == manifest)
                    .map(|r| r.reference)
                    .collect();
                for found in &names {
                    if let Ok(reference) = Reference::parse(found) {
                        self.store.delete_file(&self.store.ref_path(&reference))?;
                    }
                }
                self.store.delete_image(&manifest)?;
                let _ = std::fs::remove_file(self.store.pin_path(&manifest));
                live[i].0.layers.clear();
                report.images.push(names.join(", "));
                let in_use = used(&live);
                for layer in layers.iter().filter(|l| !in_use.contains(&l.hex)) {
                    if removed.contains(&(layer.key.clone(), layer.hex.clone())) {
                        continue;
                    }
                    if self.remove_layer(layer)? {
                        total -= layer.bytes;
                        report.layers += 1;
                        report.bytes += layer.bytes;
                        removed.insert((layer.key.clone(), layer.hex.clone()));
                    }
                }
            }
        }
        self.collect_blobs()?;
        report.remaining = total;
        Ok(())
    }

    /// Removes a layer directory unless someone is unpacking it; whether
    /// it went.
    fn remove_layer(&self, layer: &ScannedLayer) -> Result<bool, Error> {
        let dir = self.store.layer_root_for(&layer.key);
        let lock_path = dir.join(format!("{}.lock", layer.hex));
        let Some(_held) = lock::try_lock(&lock_path, Mode::Exclusive)
            .map_err(|e| Error::io(STORE, "locking", &lock_path, e))?
        else {
            return Ok(false);
        };
        let path = dir.join(&layer.hex);
        fsx::remove_tree(&path).map_err(|e| Error::io(STORE, "removing", &path, e))?;
        let _ = std::fs::remove_file(&lock_path);
        Ok(true)
    }

    /// Removes blobs no record or reference points at.
    fn collect_blobs(&self) -> Result<(), Error> {
        let mut kept = BTreeSet::new();
        for record in self.store.read_records()? {
            kept.insert(record.manifest.hex().to_string());
            kept.insert(record.config.hex().to_string());
        }
        for found in self.store.read_refs()? {
            kept.extend(found.index.map(|d| d.hex().to_string()));
        }
        let blobs = self.store.blobs_dir();
        for name in read_dir(&blobs)? {
            if !kept.contains(&*name.to_string_lossy()) {
                self.store.delete_file(&blobs.join(name))?;
            }
        }
        Ok(())
    }

    fn scan_layers(&self) -> Result<Vec<ScannedLayer>, Error> {
        let mut layers = Vec::new();
        let root = self.store.inner.root.join("layers");
        for key in read_dir(&root)? {
            let key = key.to_string_lossy().into_owned();
            let dir = root.join(&key);
            for name in read_dir(&dir)? {
                let name = name.to_string_lossy().into_owned();
                if Digest::from_hex(&name).is_none() {
                    continue;
                }
                let meta_path = dir.join(&name).join("layer.json");
                let (bytes, last_used) = match std::fs::metadata(&meta_path) {
                    Ok(stat) => {
                        let meta: Option<LayerMeta> = read_json(&meta_path)?;
                        (
                            meta.map_or(0, |m| m.bytes),
                            stat.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                        )
                    }
                    // A directory without its meta is not a layer the
                    // store made; treat it as unused since forever.
                    Err(_) => (0, SystemTime::UNIX_EPOCH),
                };
                layers.push(ScannedLayer {
                    key: key.clone(),
                    hex: name,
                    bytes,
                    last_used,
                });
            }
        }
        Ok(layers)
    }
}

struct ScannedLayer {
    key: String,
    hex: String,
    bytes: u64,
    last_used: SystemTime,
}
