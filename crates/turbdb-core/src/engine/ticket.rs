//! What a caller holds for a query submitted to the node engine: a ticket to wait on (the
//! thread sleeps, holding nothing), to cancel, or to be told about through a completion
//! queue — the way an event loop learns that a query is done without a thread per query.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::error::Error;

/// What the engine found out about a query, apart from its values.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct QueryStats {
    /// Sub-queries served (atoms × time levels).
    pub atoms: u64,
    /// Of those, atoms found in the cache.
    pub cache_hits: u64,
    /// Of its sub-queries, those whose atom was read from the store, not found in the cache
    /// (an atom read once for several queries of a batch counts for each of them).
    pub atoms_read: u64,
    /// Batches it took part in.
    pub batches: u64,
    /// Partial sums added for it (point–atom pairs; nodes for a cutout).
    pub contributions: u64,
    /// Seconds held at a job's gate.
    pub gated_seconds: f64,
    /// Seconds from submission to completion.
    pub response_seconds: f64,
}

/// A query's values.
#[derive(Debug)]
pub enum Values {
    /// Partial sums of a point query in the engine's order: `order[i]` is the caller's
    /// number of row `i`; `out_len` values per row.
    Sums {
        /// The sums, `N × out_len`.
        sums: Vec<f64>,
        /// The caller's number of each row.
        order: Vec<u32>,
        /// Values per point.
        out_len: usize,
    },
    /// Point-query values in the caller's order, `N × out_len` (a query served alone).
    Answer(Vec<f64>),
    /// A cutout's values, `(z, y, x, c)`.
    Cutout(Vec<f32>),
}

impl Values {
    /// Point-query values in the caller's order, `N × out_len`.
    pub fn into_sums(self) -> Vec<f64> {
        match self {
            Values::Sums {
                sums,
                order,
                out_len,
            } => {
                let mut out = vec![0.0; sums.len()];
                for (row, &p) in sums.chunks_exact(out_len.max(1)).zip(&order) {
                    out[p as usize * out_len..][..out_len].copy_from_slice(row);
                }
                out
            }
            Values::Answer(values) => values,
            Values::Cutout(v) => v.into_iter().map(f64::from).collect(),
        }
    }

    /// Cutout values (point-query sums are narrowed).
    pub fn into_cutout(self) -> Vec<f32> {
        match self {
            Values::Cutout(v) => v,
            sums => sums.into_sums().into_iter().map(|v| v as f32).collect(),
        }
    }
}

/// How a query ended.
#[derive(Debug)]
pub enum Outcome {
    /// Its values and what it cost.
    Done(Values, QueryStats),
    /// It failed (a corrupt atom it needed, a step not stored, …).
    Failed(Error),
    /// It was cancelled before it completed.
    Cancelled,
}

/// The shared state of one ticket.
#[derive(Debug)]
pub(crate) struct TicketState {
    pub(crate) id: u64,
    outcome: Mutex<Option<Outcome>>,
    ready: Condvar,
    notify: Option<Arc<Completions>>,
}

impl TicketState {
    pub(crate) fn new(id: u64, notify: Option<Arc<Completions>>) -> Arc<Self> {
        Arc::new(Self {
            id,
            outcome: Mutex::new(None),
            ready: Condvar::new(),
            notify,
        })
    }

    /// Ends the query (the first outcome wins).
    pub(crate) fn finish(&self, outcome: Outcome) {
        let mut slot = self.outcome.lock().expect("ticket");
        if slot.is_some() {
            return;
        }
        *slot = Some(outcome);
        drop(slot);
        self.ready.notify_all();
        if let Some(queue) = &self.notify {
            queue.push(self.id);
        }
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.outcome.lock().expect("ticket").is_some()
    }
}

/// Something that can cancel a query (the engine).
pub(crate) trait Canceller: Send + Sync {
    fn cancel(&self, id: u64);
}

/// A submitted query. Dropping a ticket whose query has not ended cancels it.
pub struct Ticket {
    state: Arc<TicketState>,
    engine: Weak<dyn Canceller>,
    taken: bool,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("id", &self.state.id)
            .finish()
    }
}

impl Ticket {
    pub(crate) fn new(state: Arc<TicketState>, engine: Weak<dyn Canceller>) -> Self {
        Self {
            state,
            engine,
            taken: false,
        }
    }

    /// The query's number in the engine (what a completion queue reports).
    pub fn id(&self) -> u64 {
        self.state.id
    }

    /// Whether the query has ended.
    pub fn is_done(&self) -> bool {
        self.state.is_finished()
    }

    /// Waits up to `timeout` (forever if `None`) for the query to end; whether it did.
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut slot = self.state.outcome.lock().expect("ticket");
        while slot.is_none() {
            match deadline {
                None => slot = self.state.ready.wait(slot).expect("ticket"),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    slot = self
                        .state
                        .ready
                        .wait_timeout(slot, deadline - now)
                        .expect("ticket")
                        .0;
                }
            }
        }
        true
    }

    /// The outcome, if the query has ended; it can be taken once.
    pub fn take(&mut self) -> Option<Outcome> {
        let outcome = self.state.outcome.lock().expect("ticket").take();
        if outcome.is_some() {
            self.taken = true;
            // Keep "finished" true for a later look.
            *self.state.outcome.lock().expect("ticket") = Some(Outcome::Cancelled);
        }
        outcome
    }

    /// Waits for the query to end and returns how.
    pub fn outcome(mut self) -> Outcome {
        self.wait(None);
        self.take().unwrap_or(Outcome::Cancelled)
    }

    /// Cancels the query: its pending sub-queries are dropped; waiters see `Cancelled`.
    pub fn cancel(&self) {
        if !self.state.is_finished() {
            if let Some(engine) = self.engine.upgrade() {
                engine.cancel(self.state.id);
            }
            self.state.finish(Outcome::Cancelled);
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.taken {
            self.cancel();
        }
    }
}

/// A queue of the ids of queries that ended, for a caller that waits on many at once.
#[derive(Debug, Default)]
pub struct Completions {
    queue: Mutex<(VecDeque<u64>, bool)>,
    ready: Condvar,
}

impl Completions {
    /// An empty, open queue.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn push(&self, id: u64) {
        self.queue.lock().expect("completions").0.push_back(id);
        self.ready.notify_all();
    }

    /// Waits up to `timeout` for ids; returns those there (possibly none), or `None` once
    /// the queue is closed and empty.
    pub fn wait(&self, timeout: Duration) -> Option<Vec<u64>> {
        let deadline = Instant::now() + timeout;
        let mut queue = self.queue.lock().expect("completions");
        loop {
            if !queue.0.is_empty() {
                return Some(queue.0.drain(..).collect());
            }
            if queue.1 {
                return None;
            }
            let now = Instant::now();
            if now >= deadline {
                return Some(Vec::new());
            }
            queue = self
                .ready
                .wait_timeout(queue, deadline - now)
                .expect("completions")
                .0;
        }
    }

    /// Closes the queue: waiters return once it is empty.
    pub fn close(&self) {
        self.queue.lock().expect("completions").1 = true;
        self.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Counting(AtomicU64);
    impl Canceller for Counting {
        fn cancel(&self, _: u64) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_finished_ticket_wakes_its_waiter_and_its_completion_queue() {
        let queue = Completions::new();
        let state = TicketState::new(7, Some(Arc::clone(&queue)));
        let engine: Arc<dyn Canceller> = Arc::new(Counting(AtomicU64::new(0)));
        let ticket = Ticket::new(Arc::clone(&state), Arc::downgrade(&engine));
        assert!(!ticket.wait(Some(Duration::from_millis(1))));
        let finisher = std::thread::spawn(move || {
            state.finish(Outcome::Done(
                Values::Cutout(vec![1.0]),
                QueryStats::default(),
            ))
        });
        assert!(matches!(ticket.outcome(), Outcome::Done(Values::Cutout(v), _) if v == vec![1.0]));
        finisher.join().unwrap();
        assert_eq!(queue.wait(Duration::from_secs(1)), Some(vec![7]));
        queue.close();
        assert_eq!(queue.wait(Duration::from_secs(1)), None);
    }

    #[test]
    fn dropping_an_unfinished_ticket_cancels_its_query() {
        let counting = Arc::new(Counting(AtomicU64::new(0)));
        let engine: Arc<dyn Canceller> = counting.clone();
        let state = TicketState::new(1, None);
        drop(Ticket::new(Arc::clone(&state), Arc::downgrade(&engine)));
        assert_eq!(counting.0.load(Ordering::Relaxed), 1);
        assert!(matches!(
            *state.outcome.lock().unwrap(),
            Some(Outcome::Cancelled)
        ));
        // A ticket whose outcome was taken does not cancel.
        let state = TicketState::new(2, None);
        state.finish(Outcome::Cancelled);
        let mut ticket = Ticket::new(state, Arc::downgrade(&engine));
        assert!(ticket.take().is_some());
        drop(ticket);
        assert_eq!(counting.0.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn sums_come_back_in_the_callers_order() {
        let values = Values::Sums {
            sums: vec![10.0, 11.0, 20.0, 21.0],
            order: vec![1, 0],
            out_len: 2,
        };
        assert_eq!(values.into_sums(), vec![20.0, 21.0, 10.0, 11.0]);
    }
}
