//! `{{name}}`: a sandfleet sizing policy. Warms one sandbox per task of each
//! image, at most `max-warmpool-size`, all images in one window (none with
//! the `none` strategy).

use sandfleet_plugin_sdk::Failure;
use sandfleet_plugin_sdk::sizing::{FleetPlan, Limits, SizingPolicy, Strategy, Window};

struct Policy;

impl SizingPolicy for Policy {
    fn plan(tasks: Vec<u32>, limits: Limits) -> Result<FleetPlan, Failure> {
        if limits.max_concurrent == 0 {
            return Err(Failure::invalid_input("max-concurrent must be at least 1"));
        }
        let replicas: Vec<u32> = tasks
            .iter()
            .map(|&count| match limits.strategy {
                Strategy::None => 0,
                _ => count.min(limits.max_warmpool_size),
            })
            .collect();
        let images: Vec<u32> = (0..tasks.len() as u32)
            .filter(|&image| tasks[image as usize] > 0)
            .collect();
        let windows = if images.is_empty() {
            Vec::new()
        } else {
            vec![Window { images }]
        };
        let peak_warm = replicas.iter().sum();
        Ok(FleetPlan {
            replicas,
            windows,
            peak_warm,
        })
    }
}

sandfleet_plugin_sdk::sizing_policy!(Policy);
