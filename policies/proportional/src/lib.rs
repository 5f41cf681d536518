//! `proportional`: the default sizing policy.
//!
//! - Replicas per image: `clamp(round(max_concurrent × tasks_image / tasks_total),
//!   1, min(tasks_image, max_warmpool_size))`, rounding half to even as
//!   Python's `round` does; with `warm_per_task`,
//!   `min(tasks_image, max_warmpool_size)`. Images without tasks get 0.
//! - `none`: no replicas, one window holding every image.
//! - `naive`: one window holding every image.
//! - `sliding`: windows take images in table order until the next image's
//!   replicas would push the window past `max_concurrent` (at least one image
//!   per window).
//! - `pipelined`: like sliding with half the budget (at least 1), because the
//!   next window warms while the current one runs.
//! - An optional disk budget caps the warm sandboxes held at once at what fits
//!   on the nodes' ephemeral disk after headroom; the window budget shrinks
//!   to fit, and single images are trimmed to it.

use sandfleet_plugin_sdk::Failure;
use sandfleet_plugin_sdk::sizing::{DiskBudget, FleetPlan, Limits, SizingPolicy, Strategy, Window};

struct Proportional;

impl SizingPolicy for Proportional {
    fn plan(tasks: Vec<u32>, limits: Limits) -> Result<FleetPlan, Failure> {
        plan(&tasks, &limits)
    }
}

sandfleet_plugin_sdk::sizing_policy!(Proportional);

/// `tasks` holds the number of tasks per image.
fn plan(tasks: &[u32], limits: &Limits) -> Result<FleetPlan, Failure> {
    if limits.max_concurrent == 0 {
        return Err(Failure::invalid_input("max-concurrent must be at least 1"));
    }
    if limits.max_warmpool_size == 0 {
        return Err(Failure::invalid_input(
            "max-warmpool-size must be at least 1",
        ));
    }
    let disk_cap = limits.disk.map(disk_capacity).transpose()?;
    let total: u64 = tasks.iter().map(|&n| u64::from(n)).sum();
    let mut replicas: Vec<u32> = tasks
        .iter()
        .map(|&n| replicas_for(n, total, limits))
        .collect();
    if let Some(cap) = disk_cap {
        for r in &mut replicas {
            *r = (*r).min(cap);
        }
    }
    let with_tasks: Vec<u32> = (0..tasks.len() as u32)
        .filter(|&i| tasks[i as usize] > 0)
        .collect();

    let (windows, replicas) = match limits.strategy {
        Strategy::None => (vec![with_tasks], vec![0; tasks.len()]),
        Strategy::Naive => {
            let held: u32 = replicas.iter().sum();
            if let Some(cap) = disk_cap
                && held > cap
            {
                return Err(Failure::unsatisfiable(format!(
                    "the naive strategy holds {held} warm sandboxes at once but the disk fits {cap}; use sliding or pipelined"
                )));
            }
            (vec![with_tasks], replicas)
        }
        Strategy::Sliding | Strategy::Pipelined => {
            let mut budget = limits.max_concurrent;
            if let Some(cap) = disk_cap {
                budget = budget.min(cap);
            }
            if limits.strategy == Strategy::Pipelined {
                budget = (budget / 2).max(1);
            }
            (windows_within(&with_tasks, &replicas, budget), replicas)
        }
    };
    let windows: Vec<Window> = windows
        .into_iter()
        .filter(|images| !images.is_empty())
        .map(|images| Window { images })
        .collect();
    let peak_warm = peak(&windows, &replicas, limits.strategy);
    Ok(FleetPlan {
        replicas,
        windows,
        peak_warm,
    })
}

fn replicas_for(tasks: u32, total: u64, limits: &Limits) -> u32 {
    if tasks == 0 {
        return 0;
    }
    let upper = tasks.min(limits.max_warmpool_size);
    if limits.warm_per_task {
        return upper;
    }
    let share = f64::from(limits.max_concurrent) * f64::from(tasks) / total as f64;
    (share.round_ties_even() as u32).clamp(1, upper)
}

/// Sandboxes the nodes' ephemeral disk holds after headroom.
fn disk_capacity(disk: DiskBudget) -> Result<u32, Failure> {
    if disk.avg_image_mib == 0 {
        return Err(Failure::invalid_input("avg-image-mib must be at least 1"));
    }
    if disk.headroom_percent > 100 {
        return Err(Failure::invalid_input(
            "headroom-percent must be between 0 and 100",
        ));
    }
    let usable = u128::from(disk.node_disk_mib)
        * u128::from(disk.nodes)
        * u128::from(100 - disk.headroom_percent)
        / 100;
    let fits = usable / u128::from(disk.avg_image_mib);
    if fits == 0 {
        return Err(Failure::unsatisfiable(
            "not one sandbox fits on the nodes' ephemeral disk",
        ));
    }
    Ok(fits.min(u128::from(u32::MAX)) as u32)
}

fn windows_within(order: &[u32], replicas: &[u32], budget: u32) -> Vec<Vec<u32>> {
    let mut windows = vec![Vec::new()];
    let mut held = 0u32;
    for &image in order {
        let need = replicas[image as usize];
        let current = windows.last_mut().expect("never empty");
        if !current.is_empty() && held.saturating_add(need) > budget {
            windows.push(vec![image]);
            held = need;
        } else {
            current.push(image);
            held = held.saturating_add(need);
        }
    }
    windows
}

fn peak(windows: &[Window], replicas: &[u32], strategy: Strategy) -> u32 {
    let held: Vec<u32> = windows
        .iter()
        .map(|w| w.images.iter().map(|&i| replicas[i as usize]).sum())
        .collect();
    match strategy {
        Strategy::None => 0,
        Strategy::Naive | Strategy::Sliding => held.iter().copied().max().unwrap_or(0),
        // The next window warms while the current one runs.
        Strategy::Pipelined => held
            .windows(2)
            .map(|pair| pair[0] + pair[1])
            .chain(held.first().copied())
            .max()
            .unwrap_or(0),
    }
}
