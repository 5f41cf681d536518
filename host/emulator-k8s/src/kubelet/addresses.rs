//! Pod IPs, handed out and given back as pods come and go.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// Pod IPs: 127.42.0.0/16 (loopback only), not `.0`, `.1` (the nodes') or `.255`.
pub(super) struct Addresses {
    used: BTreeSet<u16>,
    next: u16,
}

impl Addresses {
    /// `.0` and `.1` are never handed out, so the search starts past them.
    pub(super) fn new() -> Self {
        Self {
            used: BTreeSet::new(),
            next: 2,
        }
    }

    pub(super) fn take(&mut self) -> Option<Ipv4Addr> {
        for _ in 0..=u16::MAX {
            let n = self.next;
            self.next = self.next.wrapping_add(1);
            if matches!(n & 0xff, 0 | 1 | 255) || self.used.contains(&n) {
                continue;
            }
            self.used.insert(n);
            return Some(Ipv4Addr::new(127, 42, (n >> 8) as u8, (n & 0xff) as u8));
        }
        None
    }

    pub(super) fn give_back(&mut self, ip: &str) {
        if let Ok(ip) = ip.parse::<Ipv4Addr>() {
            let o = ip.octets();
            self.used.remove(&(u16::from(o[2]) << 8 | u16::from(o[3])));
        }
    }
}
