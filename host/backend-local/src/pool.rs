//! Warm pool bookkeeping: how many sandboxes a template should have ready,
//! which are ready, and how many are being made. No I/O: the backend makes
//! and destroys sandboxes and tells the pool.

use std::collections::VecDeque;

use sandfleet_core::PoolStatus;

/// One template's warm pool of `T`s (sandboxes, in the backend).
#[derive(Debug)]
pub(crate) struct Pool<T> {
    desired: u32,
    ready: VecDeque<T>,
    creating: u32,
}

impl<T> Default for Pool<T> {
    fn default() -> Self {
        Pool {
            desired: 0,
            ready: VecDeque::new(),
            creating: 0,
        }
    }
}

impl<T> Pool<T> {
    /// Sets the size; returns ready items above it, to be destroyed.
    pub(crate) fn set_desired(&mut self, desired: u32) -> Vec<T> {
        self.desired = desired;
        let keep = self.ready.len().min(desired as usize);
        self.ready.drain(keep..).collect()
    }

    /// How many more to start making to reach the desired size.
    pub(crate) fn shortfall(&self) -> u32 {
        self.desired
            .saturating_sub(self.ready.len() as u32 + self.creating)
    }

    /// Records that one is being made.
    pub(crate) fn creation_started(&mut self) {
        self.creating += 1;
    }

    /// Records that making one finished, with the result if it succeeded.
    /// Returns the result back when the pool no longer wants it (it shrank
    /// meanwhile), to be destroyed.
    pub(crate) fn creation_finished(&mut self, made: Option<T>) -> Option<T> {
        self.creating = self.creating.saturating_sub(1);
        let made = made?;
        if self.ready.len() < self.desired as usize {
            self.ready.push_back(made);
            None
        } else {
            Some(made)
        }
    }

    /// Takes the oldest ready one.
    pub(crate) fn take(&mut self) -> Option<T> {
        self.ready.pop_front()
    }

    /// Desired and ready counts.
    pub(crate) fn status(&self) -> PoolStatus {
        PoolStatus {
            desired: self.desired,
            ready: self.ready.len() as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_fills_to_its_size_and_hands_back_surplus() {
        let mut pool = Pool::default();
        assert!(pool.set_desired(2).is_empty());
        assert_eq!(pool.shortfall(), 2);
        pool.creation_started();
        pool.creation_started();
        assert_eq!(pool.shortfall(), 0);
        assert_eq!(pool.creation_finished(Some(1)), None);
        // A failed creation frees its place for a later refill.
        assert_eq!(pool.creation_finished(None), None);
        assert_eq!(pool.shortfall(), 1);
        assert_eq!(
            pool.status(),
            PoolStatus {
                desired: 2,
                ready: 1
            }
        );

        pool.creation_started();
        assert_eq!(pool.set_desired(0), vec![1]);
        // Finished after the pool shrank: surplus.
        assert_eq!(pool.creation_finished(Some(2)), Some(2));
        assert_eq!(
            pool.status(),
            PoolStatus {
                desired: 0,
                ready: 0
            }
        );
        assert_eq!(pool.take(), None);
    }

    #[test]
    fn claims_take_the_oldest_first() {
        let mut pool = Pool::default();
        pool.set_desired(3);
        for item in [7, 8, 9] {
            pool.creation_started();
            pool.creation_finished(Some(item));
        }
        assert_eq!(pool.take(), Some(7));
        assert_eq!(pool.shortfall(), 1);
        assert_eq!(pool.set_desired(1), vec![9]);
        assert_eq!(pool.take(), Some(8));
    }
}
