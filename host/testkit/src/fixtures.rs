//! Small constructors for common arguments, with neutral defaults that
//! tests override field by field.

use sandfleet_plugin::adapter::CommandOutput;
use sandfleet_plugin::placement::{ClusterState, Clusters, Demand, DemandKind};
use sandfleet_plugin::reset::Task;
use sandfleet_plugin::sizing::{Limits, Strategy};

/// A healthy cluster with `free_slots` free slots, nothing running, weight 1.
pub fn cluster(free_slots: u32) -> ClusterState {
    ClusterState {
        healthy: true,
        has_image: false,
        free_slots,
        live: 0,
        warm_ready: 0,
        weight: 1,
        cpu_free_milli: 4_000,
        memory_free_mib: 8_192,
    }
}

/// The table `place` takes, from rows.
pub fn clusters(states: &[ClusterState]) -> Clusters {
    Clusters::from_states(states)
}

/// A claim of one sandbox of `image`, as the first decision of a run.
pub fn claim(image: u32) -> Demand {
    Demand {
        kind: DemandKind::Claim,
        image,
        count: 1,
        sequence: 0,
    }
}

/// Sizing limits for `strategy` with no disk budget.
pub fn limits(strategy: Strategy, max_concurrent: u32, max_warmpool_size: u32) -> Limits {
    Limits {
        strategy,
        max_concurrent,
        max_warmpool_size,
        warm_per_task: false,
        disk: None,
    }
}

/// A task in `image` working in `/testbed`, with adapter data `data`.
pub fn task(id: &str, image: &str, data: &str) -> Task {
    Task {
        id: id.to_string(),
        image: image.to_string(),
        workdir: "/testbed".to_string(),
        data: data.to_string(),
    }
}

/// A command that exited with `exit_code` after printing `stdout`.
pub fn output(exit_code: i32, stdout: &str) -> CommandOutput {
    CommandOutput {
        exit_code,
        stdout: stdout.to_string(),
        stderr: String::new(),
        timed_out: false,
        duration_ms: 1,
    }
}
