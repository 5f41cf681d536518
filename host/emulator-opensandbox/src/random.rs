//! Randomness for ids, the generated API key and the `flaky` fault: a
//! splitmix64 generator, seeded from the kernel for ids and from the fault's
//! seed for injected failures, so a test run is reproducible.

use std::io::Read;

/// A small, fast, seedable generator (splitmix64). Not for secrets beyond a
/// loopback emulator's API key.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator that yields the same sequence for the same seed.
    pub(crate) fn seeded(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator seeded from `/dev/urandom` (the clock and pid if that
    /// cannot be read).
    pub(crate) fn from_entropy() -> Rng {
        let mut bytes = [0u8; 8];
        let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
        if read.is_ok() {
            return Rng(u64::from_le_bytes(bytes));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Rng(now.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `bytes` random bytes as lowercase hex.
    pub(crate) fn hex(&mut self, bytes: usize) -> String {
        let mut out = String::with_capacity(bytes * 2);
        while out.len() < bytes * 2 {
            out.push_str(&format!("{:016x}", self.next_u64()));
        }
        out.truncate(bytes * 2);
        out
    }

    /// A version-4 UUID in its usual text form, as the real server's ids
    /// and execd's command ids are.
    pub(crate) fn uuid(&mut self) -> String {
        let (a, b) = (self.next_u64(), self.next_u64());
        let a = (a & 0xFFFF_FFFF_FFFF_0FFF) | 0x0000_0000_0000_4000;
        let b = (b & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000;
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xFFFF,
            a & 0xFFFF,
            b >> 48,
            b & 0xFFFF_FFFF_FFFF
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_sequence() {
        let (mut a, mut b) = (Rng::seeded(7), Rng::seeded(7));
        let xs: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..5).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs[0], Rng::seeded(8).next_u64());
    }

    #[test]
    fn uuids_have_the_v4_shape() {
        let id = Rng::seeded(1).uuid();
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "{id}");
        assert!("89ab".contains(&parts[3][..1]), "{id}");
    }

    #[test]
    fn units_stay_in_range() {
        let mut rng = Rng::seeded(3);
        assert!(
            (0..1000)
                .map(|_| rng.unit())
                .all(|u| (0.0..1.0).contains(&u))
        );
    }
}
