//! The seed workloads at their published shapes, and the variants of each
//! that a rehearsal compares: the warm strategies, recycling, placement.

use std::fmt;
use std::str::FromStr;

/// One of the shapes platform teams bring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// An evaluation over 500 distinct images, two tasks each: pulls
    /// dominate. Placed by image affinity, so a claim goes where its image's
    /// pool is (a placement blind to pools sends claims away from them).
    Eval500,
    /// RL: 50 problems × 40 rollouts each, fresh and recycled.
    Rl50x40,
    /// 10,000 tasks over 200 images of skewed popularity, on all four
    /// clusters, placed by image affinity and by capacity.
    Mixed10k,
}

/// The workload names, as `--workload` takes them.
pub const WORKLOADS: [(&str, Workload); 3] = [
    ("eval-500", Workload::Eval500),
    ("rl-50x40", Workload::Rl50x40),
    ("mixed-10k", Workload::Mixed10k),
];

impl FromStr for Workload {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        WORKLOADS
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, workload)| *workload)
            .ok_or_else(|| {
                let names: Vec<&str> = WORKLOADS.iter().map(|(n, _)| *n).collect();
                format!("no workload `{name}`: one of {}", names.join(", "))
            })
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = WORKLOADS
            .iter()
            .find(|(_, w)| w == self)
            .map(|(n, _)| *n)
            .expect("every workload is named");
        f.write_str(name)
    }
}

/// A choice the rehearsal compares: one run of the workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    /// Its name in the table and the output directory.
    pub name: String,
    /// `[fleet] strategy`.
    pub strategy: &'static str,
    /// `[fleet] recycle`.
    pub recycle: bool,
    /// `[plugins] placement`.
    pub placement: String,
}

impl Variant {
    fn new(name: &str, strategy: &'static str, recycle: bool, placement: &'static str) -> Self {
        Variant {
            name: name.to_string(),
            strategy,
            recycle,
            placement: placement.to_string(),
        }
    }
}

/// One task of a generated dataset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// The task's id.
    pub id: String,
    /// The image it runs in.
    pub image: String,
}

/// Rollouts per problem in `rl-50x40`.
const ROLLOUTS: u32 = 40;

/// Sandboxes a recycled one serves in `rl-50x40` before it is replaced.
pub const MAX_REUSES: u32 = 40;

impl Workload {
    /// The variants the rehearsal runs, in table order.
    pub fn variants(self) -> Vec<Variant> {
        match self {
            Workload::Eval500 => ["none", "naive", "sliding", "pipelined"]
                .into_iter()
                .map(|strategy| Variant::new(strategy, strategy, false, "image-affinity"))
                .collect(),
            Workload::Rl50x40 => vec![
                Variant::new("fresh", "sliding", false, "image-affinity"),
                Variant::new("recycled", "sliding", true, "image-affinity"),
            ],
            Workload::Mixed10k => vec![
                Variant::new("image-affinity", "sliding", false, "image-affinity"),
                Variant::new("capacity-weighted", "sliding", false, "capacity-weighted"),
            ],
        }
    }

    /// Whether its pods must be sandboxes: recycling scrubs every process
    /// in a pod's pid namespace, which a plain process does not have.
    pub fn needs_isolation(self) -> bool {
        self.variants().iter().any(|v| v.recycle)
    }

    /// The dataset at `scale` (1.0: the published size).
    pub fn tasks(self, scale: f64) -> Vec<Task> {
        let scaled = |n: u32| ((f64::from(n) * scale).round() as u32).max(2);
        match self {
            Workload::Eval500 => (0..scaled(500))
                .flat_map(|image| {
                    (0..2).map(move |task| Task {
                        id: format!("eval{image:04}-t{task}"),
                        image: format!("eval{image:04}"),
                    })
                })
                .collect(),
            Workload::Rl50x40 => (0..scaled(50))
                .flat_map(|problem| {
                    (0..ROLLOUTS).map(move |rollout| Task {
                        id: format!("p{problem:03}-r{rollout:02}"),
                        image: format!("problem{problem:03}"),
                    })
                })
                .collect(),
            Workload::Mixed10k => {
                let counts = zipf_counts(scaled(10_000), scaled(200));
                counts
                    .iter()
                    .enumerate()
                    .flat_map(|(image, &count)| {
                        (0..count).map(move |task| Task {
                            id: format!("mix{image:03}-t{task:04}"),
                            image: format!("mix{image:03}"),
                        })
                    })
                    .collect()
            }
        }
    }
}

/// `total` tasks over `images` images, the i-th image's share falling as
/// 1/(i+1), as dataset popularity does; every image gets one task at least.
fn zipf_counts(total: u32, images: u32) -> Vec<u32> {
    let weights: Vec<f64> = (0..images).map(|i| 1.0 / f64::from(i + 1)).collect();
    let sum: f64 = weights.iter().sum();
    let mut counts: Vec<u32> = weights
        .iter()
        .map(|w| ((f64::from(total) * w / sum).floor() as u32).max(1))
        .collect();
    let mut given: u32 = counts.iter().sum();
    let mut image = 0;
    let images = counts.len();
    while given < total {
        counts[image % images] += 1;
        given += 1;
        image += 1;
    }
    counts
}

/// An image's size: spread over 0.5–2.5 GB, as SWE-bench's instance images
/// are, and the same for a name in every run.
pub fn image_bytes(image: &str) -> u64 {
    let hash = image.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (500 + hash % 2001) * 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workloads_have_their_published_shapes() {
        let eval = Workload::Eval500.tasks(1.0);
        assert_eq!(eval.len(), 1000);
        let images: std::collections::BTreeSet<_> = eval.iter().map(|t| &t.image).collect();
        assert_eq!(images.len(), 500);
        assert_eq!(Workload::Rl50x40.tasks(1.0).len(), 2000);
        let mixed = Workload::Mixed10k.tasks(1.0);
        assert_eq!(mixed.len(), 10_000);
        let first = mixed.iter().filter(|t| t.image == "mix000").count();
        let last = mixed.iter().filter(|t| t.image == "mix199").count();
        assert!(first > 20 * last, "{first} vs {last}: not skewed");
        assert_eq!(Workload::Eval500.tasks(0.1).len(), 100);
    }

    #[test]
    fn names_round_trip_and_a_wrong_one_lists_the_right_ones() {
        for (name, workload) in WORKLOADS {
            assert_eq!(name.parse::<Workload>(), Ok(workload));
            assert_eq!(workload.to_string(), name);
        }
        let error = "eval".parse::<Workload>().unwrap_err();
        assert!(error.contains("eval-500, rl-50x40, mixed-10k"), "{error}");
    }

    #[test]
    fn image_sizes_spread_and_repeat() {
        let sizes: Vec<u64> = (0..100)
            .map(|i| image_bytes(&format!("eval{i:04}")))
            .collect();
        assert!(
            sizes
                .iter()
                .all(|s| (500_000_000..=2_500_000_000).contains(s))
        );
        assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() > 1_000_000_000);
        assert_eq!(image_bytes("eval0001"), sizes[1]);
    }
}
