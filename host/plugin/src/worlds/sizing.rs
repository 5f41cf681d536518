//! The `sizing-policy` world.

use super::off_runtime;
use crate::error::CallError;

pub use crate::bindings::latest::sizing::exports::sandfleet::plugin::sizing::{
    DiskBudget, FleetPlan, Limits, Strategy, Window,
};

super::typed_world!(
    /// A sizing policy: plans warm pool sizes and the order images are warmed in.
    SizingPolicy,
    SizingWorld,
    Sizing,
    sizing::{SizingPolicyPre, SizingPolicy},
    SizingPre,
    SizingInstance
);

impl SizingPolicy {
    /// [`SizingPolicy::plan_blocking`] on tokio's blocking pool; the form to
    /// call from async code (see [`SizingPolicy`]).
    ///
    /// # Errors
    ///
    /// As [`SizingPolicy::plan_blocking`]; [`CallErrorKind::HostPanic`]
    /// when the host panicked during the call.
    ///
    /// [`CallErrorKind::HostPanic`]: crate::CallErrorKind::HostPanic
    pub fn plan(
        &self,
        tasks: &[u32],
        limits: &Limits,
    ) -> impl Future<Output = Result<FleetPlan, CallError>> + Send + 'static + use<> {
        let (this, tasks, limits) = (self.clone(), tasks.to_vec(), *limits);
        off_runtime(self.0.plugin(), "plan", move || {
            this.plan_blocking(&tasks, &limits)
        })
    }

    /// Plans the warm fleet under `limits`; `tasks` holds the number of
    /// tasks per image. Runs on the calling thread, which must not be an
    /// async runtime's worker.
    ///
    /// # Errors
    ///
    /// When the plugin declines, traps, overruns a limit, or returns a plan
    /// that does not fit the images (see [`check_plan`]).
    pub fn plan_blocking(&self, tasks: &[u32], limits: &Limits) -> Result<FleetPlan, CallError> {
        self.0.call(
            "plan",
            |instance, store| match instance {
                SizingInstance::V0_1_0(old) => old
                    .sandfleet_plugin_sizing()
                    .call_plan(store, tasks, limits.into())
                    .map(|answer| answer.map(FleetPlan::from)),
                SizingInstance::V0_2_0(latest) => latest
                    .sandfleet_plugin_sizing()
                    .call_plan(store, tasks, *limits),
            },
            |plan| check_plan(plan, tasks),
        )
    }
}

/// A plan fits its images when it sizes every image, and every image with
/// tasks appears in exactly one window.
pub fn check_plan(plan: &FleetPlan, tasks: &[u32]) -> Result<(), String> {
    if plan.replicas.len() != tasks.len() {
        return Err(format!(
            "{} replica counts for {} images",
            plan.replicas.len(),
            tasks.len()
        ));
    }
    let mut seen = vec![0u32; tasks.len()];
    for (window_index, window) in plan.windows.iter().enumerate() {
        for &image in &window.images {
            let Some(count) = seen.get_mut(image as usize) else {
                return Err(format!(
                    "window {window_index} names image {image}, but there are {} images",
                    tasks.len()
                ));
            };
            *count += 1;
        }
    }
    for (image, (&tasks, count)) in tasks.iter().zip(&seen).enumerate() {
        if tasks > 0 && *count != 1 {
            return Err(format!(
                "image {image} has {tasks} tasks but appears in {count} windows (must be 1)"
            ));
        }
    }
    Ok(())
}
