//! Running a window's tasks: `max_concurrent` workers take tasks from a
//! queue (the image of the sandbox a worker holds first, so a recycled
//! sandbox is reused), and every record is appended to the results as soon
//! as its task is done — before its sandbox is released.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::UnboundedSender;
use tracing::Instrument;

use crate::error::RunError;
use crate::recycle::Held;
use crate::results::TaskRecord;
use crate::run::Engine;
use crate::task::{TaskRunner, WorkItem};

impl Engine {
    /// Runs `items` with at most `concurrent` at once.
    pub(crate) async fn process(
        &self,
        runner: &Arc<TaskRunner>,
        items: Vec<WorkItem>,
        concurrent: u32,
    ) -> Result<(), RunError> {
        if items.is_empty() {
            return Ok(());
        }
        let workers = (concurrent as usize).min(items.len()).max(1);
        let queue = Arc::new(Mutex::new(Queue::new(items)));
        // One channel carries both, so a sandbox is released only after
        // the record of its last task is written.
        let (events, mut received) = tokio::sync::mpsc::unbounded_channel::<Event>();
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..workers {
            let (runner, queue, events) = (runner.clone(), queue.clone(), events.clone());
            // Workers' spans (tasks, claims, commands) belong to the run's.
            set.spawn(
                async move {
                    let mut held: Option<Held> = None;
                    loop {
                        let holding = held.as_ref().map(|h| h.claimed.image);
                        let next = queue
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .next(holding, &runner);
                        let Some(item) = next else { break };
                        let record = runner.run(&item, &mut held).await;
                        if events.send(Event::Finished(Box::new(record))).is_err() {
                            break;
                        }
                        // Without recycling a sandbox serves one task.
                        if !runner.recycler.recycles()
                            && let Some(done) = held.take()
                        {
                            hand_back(&events, &runner, done);
                        }
                    }
                    if let Some(done) = held {
                        hand_back(&events, &runner, done);
                    }
                }
                .in_current_span(),
            );
        }
        drop(events);
        let mut recorded = Ok(());
        while let Some(event) = received.recv().await {
            match event {
                Event::Finished(record) if recorded.is_ok() => {
                    recorded = self.record(*record);
                    if recorded.is_err() {
                        // Workers stop at their next task; what they hand
                        // back until then is still released.
                        received.close();
                    }
                }
                Event::Finished(_) => {}
                Event::Done(held) => runner.recycler.release(*held),
            }
        }
        while let Some(joined) = set.join_next().await {
            joined.map_err(|e| RunError::Internal(format!("a worker failed: {e}")))?;
        }
        recorded?;
        Ok(())
    }
}

/// What a worker tells the engine, in order.
enum Event {
    /// A task's record, to append.
    Finished(Box<TaskRecord>),
    /// A sandbox the worker is done with, to release.
    Done(Box<Held>),
}

/// Gives the engine a sandbox to release, or releases it here when the
/// engine has stopped listening.
fn hand_back(events: &UnboundedSender<Event>, runner: &TaskRunner, held: Held) {
    if let Err(unsent) = events.send(Event::Done(Box::new(held)))
        && let Event::Done(held) = unsent.0
    {
        runner.recycler.release(*held);
    }
}

/// The tasks of a window, by image, handed to workers one at a time.
struct Queue {
    by_image: BTreeMap<String, VecDeque<WorkItem>>,
}

impl Queue {
    fn new(items: Vec<WorkItem>) -> Self {
        let mut by_image: BTreeMap<String, VecDeque<WorkItem>> = BTreeMap::new();
        for item in items {
            by_image
                .entry(item.task.image.clone())
                .or_default()
                .push_back(item);
        }
        Queue { by_image }
    }

    /// The next task: of the held sandbox's image when there is one (so a
    /// recycled sandbox is reused), else from the image with most tasks left.
    fn next(&mut self, held_image: Option<usize>, runner: &TaskRunner) -> Option<WorkItem> {
        let held = held_image.map(|index| runner.fleet().images[index].as_str());
        let image = held
            .filter(|image| self.by_image.get(*image).is_some_and(|q| !q.is_empty()))
            .map(str::to_string)
            .or_else(|| {
                self.by_image
                    .iter()
                    .filter(|(_, q)| !q.is_empty())
                    .max_by_key(|(_, q)| q.len())
                    .map(|(image, _)| image.clone())
            })?;
        self.by_image.get_mut(&image)?.pop_front()
    }
}
