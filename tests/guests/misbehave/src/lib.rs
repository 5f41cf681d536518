//! A placement policy that misbehaves on request, to test the host's limits.
//! The demanded image index picks the behaviour (see the constants); any other
//! index gets a correct answer (cluster 0), so tests can show that the host
//! keeps serving after a failure.

#![allow(missing_docs, reason = "test guest")]
#![allow(unsafe_code, reason = "wit-bindgen generates the canonical ABI glue")]

wit_bindgen::generate!({
    world: "placement-policy",
    path: "../../../wit/since_v0.1.0",
});

use exports::sandfleet::plugin::placement::{Clusters, Demand, Guest};
use sandfleet::plugin::types::{Failure, FailureKind};

/// Spins forever: the deadline must stop it.
pub const SPIN: u32 = 1;
/// Allocates 256 MiB, 1 MiB at a time: the memory cap must stop it.
pub const HOG: u32 = 2;
/// Panics, which traps as `unreachable`.
pub const TRAP: u32 = 3;
/// Answers with an index one past the last cluster.
pub const OUT_OF_RANGE: u32 = 4;
/// Returns the plugin's own `failure`.
pub const REFUSE: u32 = 5;
/// Writes to stdout, stderr and the host log, then answers 0.
pub const TALK: u32 = 6;
/// Computes for `demand.sequence` rounds, then answers 0: work that ends.
pub const WORK: u32 = 7;

struct Misbehave;

impl Guest for Misbehave {
    fn place(demand: Demand, clusters: Clusters) -> Result<u32, Failure> {
        match demand.image {
            SPIN => {
                let mut n: u64 = demand.sequence;
                loop {
                    n = std::hint::black_box(n.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
            HOG => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                for _ in 0..256 {
                    // Reserving grows linear memory without writing every
                    // page, so the cap is reached well within the deadline.
                    let mut block = Vec::<u8>::with_capacity(1 << 20);
                    block.push(1);
                    hoard.push(block);
                }
                Ok(std::hint::black_box(hoard).len() as u32)
            }
            TRAP => panic!("deliberate trap"),
            OUT_OF_RANGE => Ok(clusters.free_slots.len() as u32),
            REFUSE => Err(Failure {
                kind: FailureKind::Unsatisfiable,
                message: "refused on request".to_string(),
            }),
            TALK => {
                println!("said on stdout");
                eprintln!("said on stderr");
                sandfleet::plugin::host::log(
                    sandfleet::plugin::host::LogLevel::Warn,
                    "said through the host log",
                );
                Ok(0)
            }
            WORK => {
                let mut n: u64 = 1;
                for _ in 0..demand.sequence {
                    n = std::hint::black_box(n.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
                std::hint::black_box(n);
                Ok(0)
            }
            _ => Ok(0),
        }
    }
}

// Natively (cargo test and clippy build every crate for the host) the
// export names, which contain `:`, cannot be linked into a shared library.
#[cfg(target_arch = "wasm32")]
export!(Misbehave);
