//! The plan: the run's image table and what the sizing policy makes of it.

use sandfleet_plugin::CallError;
use sandfleet_plugin::sizing::{DiskBudget, Limits, SizingPolicy, Strategy as WitStrategy};

use crate::settings::{FleetSettings, Strategy};

/// Which images a run needs and how their pools are sized and ordered.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Plan {
    /// Image names, in order of first appearance in the dataset.
    pub images: Vec<String>,
    /// Tasks per image (one epoch).
    pub tasks: Vec<u32>,
    /// Warm replicas per image.
    pub replicas: Vec<u32>,
    /// Windows of image indices, in the order they run.
    pub windows: Vec<Vec<usize>>,
    /// Most warm sandboxes held at once.
    pub peak_warm: u32,
}

/// The image table of `task_images` (one entry per task): names in order of
/// first appearance, and the tasks of each.
pub fn image_table<'a>(task_images: impl IntoIterator<Item = &'a str>) -> (Vec<String>, Vec<u32>) {
    let mut images: Vec<String> = Vec::new();
    let mut tasks: Vec<u32> = Vec::new();
    for image in task_images {
        match images.iter().position(|known| known == image) {
            Some(index) => tasks[index] += 1,
            None => {
                images.push(image.to_string());
                tasks.push(1);
            }
        }
    }
    (images, tasks)
}

/// The sizing contract's limits for `settings`; `disk_per_node_mib` and
/// `nodes` come from the backends' capacity.
pub fn limits(settings: &FleetSettings, disk_per_node_mib: u64, nodes: u32) -> Limits {
    Limits {
        strategy: match settings.strategy {
            Strategy::None => WitStrategy::None,
            Strategy::Naive => WitStrategy::Naive,
            Strategy::Sliding => WitStrategy::Sliding,
            Strategy::Pipelined => WitStrategy::Pipelined,
        },
        max_concurrent: settings.max_concurrent,
        max_warmpool_size: settings.max_warmpool_size,
        warm_per_task: settings.warm_per_task,
        disk: settings.disk.map(|disk| DiskBudget {
            avg_image_mib: disk.avg_image_mib,
            node_disk_mib: disk_per_node_mib,
            nodes,
            headroom_percent: disk.headroom_percent,
        }),
    }
}

/// Asks the sizing policy for the plan of `images` with `tasks` each.
///
/// # Errors
///
/// When the policy fails or declines.
pub fn plan(
    sizing: &SizingPolicy,
    images: Vec<String>,
    tasks: Vec<u32>,
    limits: &Limits,
) -> Result<Plan, CallError> {
    let fleet = sizing.plan(&tasks, limits)?;
    Ok(Plan {
        images,
        tasks,
        replicas: fleet.replicas,
        windows: fleet
            .windows
            .into_iter()
            .map(|w| w.images.into_iter().map(|i| i as usize).collect())
            .collect(),
        peak_warm: fleet.peak_warm,
    })
}

impl Plan {
    /// Warm replicas over all images.
    pub fn total_warm(&self) -> u32 {
        self.replicas.iter().sum()
    }

    /// Sandboxes the run expects to exist at once: the warm peak plus one
    /// claimed sandbox per concurrent task. The breaker compares live
    /// sandboxes with this.
    pub fn expected_live(&self, max_concurrent: u32) -> u32 {
        self.peak_warm + max_concurrent
    }

    /// A human-readable summary, one image per line.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let width = self
            .images
            .iter()
            .map(String::len)
            .max()
            .unwrap_or(5)
            .max(5);
        writeln!(
            out,
            "{:<width$}  {:>5}  {:>8}  window",
            "image", "tasks", "replicas"
        )
        .expect("write to String");
        for (window_index, window) in self.windows.iter().enumerate() {
            for &image in window {
                writeln!(
                    out,
                    "{:<width$}  {:>5}  {:>8}  {}",
                    self.images[image],
                    self.tasks[image],
                    self.replicas[image],
                    window_index + 1
                )
                .expect("write to String");
            }
        }
        let tasks: u32 = self.tasks.iter().sum();
        writeln!(
            out,
            "{} tasks over {} images in {} window(s); {} warm replicas in all, at most {} warm at once",
            tasks,
            self.images.len(),
            self.windows.len(),
            self.total_warm(),
            self.peak_warm
        )
        .expect("write to String");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_table_keeps_first_appearance_order() {
        let (images, tasks) = image_table(["b", "a", "b", "c", "a", "b"]);
        assert_eq!(images, ["b", "a", "c"]);
        assert_eq!(tasks, [3, 2, 1]);
    }
}
