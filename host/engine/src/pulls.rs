//! Images the clusters must fetch before a run can make sandboxes of them:
//! listed at a run's preflight and by `sandfleet plan`, with the bytes each
//! pull would download, and pulled before the run warms anything.
//!
//! Which images a backend fetches ahead is its own business
//! ([`sandfleet_core::ImagePulls::images_to_pull`]): the local backend lists
//! the OCI images its layer store lacks; a cluster that pulls images by
//! itself lists none. The engine asks every cluster that can make an image,
//! and never branches on the kind of backend.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use sandfleet_core::{BackendError, ImageToPull, Labels};

use crate::fleet::Cluster;
use crate::progress::Progress;

/// What one cluster must fetch.
#[derive(Debug)]
pub struct ClusterPulls {
    /// The cluster's index in configuration order.
    pub cluster: usize,
    /// The images it lacks, in the order asked.
    pub images: Vec<ImageToPull>,
}

/// For each cluster, the images of `images` it can make but must fetch
/// first; clusters with nothing to fetch are left out.
pub async fn images_to_pull(clusters: &[Cluster], images: &[String]) -> Vec<ClusterPulls> {
    let mut out = Vec::new();
    for (index, cluster) in clusters.iter().enumerate() {
        let Some(pulls) = cluster.backend.pulls() else {
            continue;
        };
        let made = cluster.backend.capabilities().images;
        let wanted: Vec<String> = images
            .iter()
            .filter(|image| made.can_make(image))
            .cloned()
            .collect();
        if wanted.is_empty() {
            continue;
        }
        let missing = pulls.images_to_pull(&wanted).await;
        if !missing.is_empty() {
            out.push(ClusterPulls {
                cluster: index,
                images: missing,
            });
        }
    }
    out
}

/// What [`pull`] did.
#[derive(Debug, Default)]
pub struct Pulled {
    /// The images that could not be pulled, each with what was being done
    /// (naming the image and the cluster) and the error.
    pub failed: HashMap<String, (String, BackendError)>,
    /// How long each pull that succeeded took.
    pub took: Vec<Duration>,
}

/// Lists the images of `images` the clusters would fetch, tells `progress`
/// the table, and pulls them one by one, carrying `labels` (the run's).
/// An image that failed on one cluster is not tried on the next.
pub async fn pull(
    clusters: &[Cluster],
    images: &[String],
    labels: &Labels,
    progress: &dyn Progress,
) -> Pulled {
    let wanted = images_to_pull(clusters, images).await;
    for line in render(clusters, &wanted).lines() {
        progress.step(line);
    }
    let mut pulled = Pulled::default();
    for cluster_pulls in wanted {
        let cluster = &clusters[cluster_pulls.cluster];
        // Only clusters that pull images ahead listed any.
        let Some(pulls) = cluster.backend.pulls() else {
            continue;
        };
        for image in cluster_pulls.images {
            let image = image.image;
            if pulled.failed.contains_key(&image) {
                continue;
            }
            progress.step(&format!("pull: {}: pulling {image}", cluster.name));
            let started = Instant::now();
            let sink = progress.pull(&cluster.name, &image);
            let outcome = pulls.pull_image(&image, labels, &*sink).await;
            drop(sink);
            match outcome {
                Ok(()) => {
                    pulled.took.push(started.elapsed());
                    progress.step(&format!(
                        "pull: {}: pulled {image} in {:.1}s",
                        cluster.name,
                        started.elapsed().as_secs_f64()
                    ));
                }
                Err(error) => {
                    tracing::warn!(cluster = %cluster.name, %image, "{error}");
                    progress.step(&format!(
                        "pull: {}: {image}: {error}; its tasks are infra errors",
                        cluster.name
                    ));
                    let what = format!("pulling image `{image}` on cluster `{}`", cluster.name);
                    pulled.failed.insert(image, (what, error));
                }
            }
        }
    }
    pulled
}

/// A table of `pulls`: a line per image (its cluster, the image, the bytes
/// to fetch, or why it cannot be pulled) and, per cluster, a total. Empty
/// when nothing is to be pulled.
pub fn render(clusters: &[Cluster], pulls: &[ClusterPulls]) -> String {
    let mut out = String::new();
    for pulled in pulls {
        let name = &clusters[pulled.cluster].name;
        let width = pulled
            .images
            .iter()
            .map(|i| i.image.chars().count())
            .max()
            .unwrap_or(0);
        let mut total = 0;
        let mut unsized_images = 0;
        let mut failing = 0;
        for image in &pulled.images {
            let what = match &image.bytes {
                Ok(Some(bytes)) => {
                    total += bytes;
                    format!("{:>10} to fetch", human_bytes(*bytes))
                }
                Ok(None) => {
                    unsized_images += 1;
                    format!("{:>10} to fetch on its nodes", "?")
                }
                Err(error) => {
                    failing += 1;
                    format!("cannot be pulled: {error}")
                }
            };
            let _ = writeln!(out, "pull: {name}: {:<width$}  {what}", image.image);
        }
        let _ = write!(
            out,
            "pull: {name}: {} image(s) missing, {} to fetch",
            pulled.images.len(),
            human_bytes(total)
        );
        if unsized_images > 0 {
            let _ = write!(out, " and {unsized_images} of unknown size");
        }
        if failing > 0 {
            let _ = write!(out, " ({failing} cannot be pulled)");
        }
        out.push('\n');
    }
    out
}

/// `bytes` in powers of 1024, as `sandfleet images` shows sizes.
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_powers_of_1024() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(5 << 30), "5.00 GiB");
    }
}
