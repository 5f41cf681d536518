//! The images a fleet serves, by index. A run knows all of its images from
//! its dataset; a long-running session learns them as clients ask, so the
//! table only grows, and an index once given always names the same image.
//!
//! Entries live in segments that are allocated once and never move, so a
//! reader gets `&String` without holding a lock while another caller adds.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Entries in the first segment; each next segment is twice as large.
const FIRST_SEGMENT: usize = 64;
/// Segments: room for `FIRST_SEGMENT * (2^SEGMENTS - 1)` images.
const SEGMENTS: usize = 26;

/// An append-only table of image names.
pub(crate) struct ImageTable {
    segments: [OnceLock<Box<[OnceLock<String>]>>; SEGMENTS],
    /// Name → index, and the number of entries; adding takes this lock.
    index: Mutex<HashMap<String, usize>>,
}

impl ImageTable {
    /// A table holding `images` at indices 0, 1, …
    pub(crate) fn new(images: Vec<String>) -> Self {
        let table = ImageTable {
            segments: std::array::from_fn(|_| OnceLock::new()),
            index: Mutex::new(HashMap::new()),
        };
        for image in images {
            table.intern(&image);
        }
        table
    }

    /// The index of `name`, added at the end when it is new.
    pub(crate) fn intern(&self, name: &str) -> usize {
        let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&known) = index.get(name) {
            return known;
        }
        let next = index.len();
        let (segment, offset) = locate(next);
        let slots = self.segments[segment]
            .get_or_init(|| (0..segment_len(segment)).map(|_| OnceLock::new()).collect());
        slots[offset]
            .set(name.to_string())
            .expect("a slot is filled once, under the lock");
        index.insert(name.to_string(), next);
        next
    }

    /// The index of `name`, when it is in the table.
    pub(crate) fn lookup(&self, name: &str) -> Option<usize> {
        self.index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .copied()
    }

    /// The images in index order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &String> {
        let len = self.index.lock().unwrap_or_else(|e| e.into_inner()).len();
        (0..len).map(move |i| &self[i])
    }
}

impl std::ops::Index<usize> for ImageTable {
    type Output = String;

    fn index(&self, index: usize) -> &String {
        let (segment, offset) = locate(index);
        self.segments[segment]
            .get()
            .and_then(|slots| slots.get(offset))
            .and_then(OnceLock::get)
            .unwrap_or_else(|| panic!("no image at index {index}"))
    }
}

fn segment_len(segment: usize) -> usize {
    FIRST_SEGMENT << segment
}

/// The segment and offset of entry `index`.
fn locate(index: usize) -> (usize, usize) {
    // Segment s starts at FIRST_SEGMENT * (2^s - 1).
    let scaled = index / FIRST_SEGMENT + 1;
    let segment = (usize::BITS - 1 - scaled.leading_zeros()) as usize;
    let start = FIRST_SEGMENT * ((1 << segment) - 1);
    (segment, index - start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_stable_across_segments_and_names_are_interned_once() {
        let table = ImageTable::new(vec!["a".into(), "b".into()]);
        assert_eq!((table.intern("b"), table.intern("c")), (1, 2));
        for i in 3..1000 {
            assert_eq!(table.intern(&format!("img{i}")), i);
        }
        assert_eq!(table[0], "a");
        assert_eq!(table[63], "img63");
        assert_eq!(table[64], "img64");
        assert_eq!(table[999], "img999");
        assert_eq!(table.iter().count(), 1000);
        assert_eq!(table.iter().position(|i| *i == "c"), Some(2));
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(64), (1, 0));
        assert_eq!(locate(191), (1, 127));
        assert_eq!(locate(192), (2, 0));
    }
}
