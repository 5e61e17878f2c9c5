//! A query's gating edges: for each other job it is gated with, that job's query.

use crate::engine::jobs::gating::JobId;

/// A query's gating edges, `(job, query index)`, sorted by job: at most one per other job,
/// so a map. A sorted list rather than a tree: the deadlock check walks every running
/// job's edges, which a list's contiguous pairs make fast (a `BTreeMap`'s nodes made that
/// walk cost more than its lookups saved), while a new job's aligned pairs look up one
/// job at a time, which a scan of the list made half of `declare_all`'s time with 2 400
/// jobs in the trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Partners(Vec<(JobId, usize)>);

impl Partners {
    /// No edges.
    pub fn new() -> Self {
        Self::default()
    }

    fn find(&self, job: JobId) -> Result<usize, usize> {
        self.0.binary_search_by_key(&job, |&(j, _)| j)
    }

    /// `job`'s query this one is gated with, if any.
    pub fn get(&self, job: JobId) -> Option<usize> {
        self.find(job).ok().map(|at| self.0[at].1)
    }

    /// Whether this query is gated with a query of `job`.
    pub fn contains(&self, job: JobId) -> bool {
        self.find(job).is_ok()
    }

    /// Gates this query with `job`'s query `index`; returns the one of `job` it replaced.
    pub fn insert(&mut self, job: JobId, index: usize) -> Option<usize> {
        match self.find(job) {
            Ok(at) => Some(std::mem::replace(&mut self.0[at].1, index)),
            Err(at) => {
                self.0.insert(at, (job, index));
                None
            }
        }
    }

    /// Cuts the edge to `job`; returns its query, if there was one.
    pub fn remove(&mut self, job: JobId) -> Option<usize> {
        self.find(job).ok().map(|at| self.0.remove(at).1)
    }

    /// The edges, `(job, query index)`, by job.
    pub fn iter(&self) -> impl Iterator<Item = (JobId, usize)> + '_ {
        self.0.iter().copied()
    }

    /// The jobs this query is gated with.
    pub fn jobs(&self) -> impl Iterator<Item = JobId> + '_ {
        self.0.iter().map(|&(j, _)| j)
    }

    /// Edges (one per job).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the query is gated with nothing.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl IntoIterator for Partners {
    type Item = (JobId, usize);
    type IntoIter = std::vec::IntoIter<(JobId, usize)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_edge_per_job_kept_in_job_order() {
        let mut p = Partners::new();
        assert_eq!(p.insert(7, 2), None);
        assert_eq!(p.insert(3, 0), None);
        assert_eq!(p.insert(5, 4), None);
        assert_eq!(
            p.insert(3, 1),
            Some(0),
            "a second edge to job 3 replaces the first"
        );
        assert_eq!(p.iter().collect::<Vec<_>>(), [(3, 1), (5, 4), (7, 2)]);
        assert_eq!((p.get(5), p.get(4)), (Some(4), None));
        assert!(p.contains(7) && !p.contains(8));
        assert_eq!(p.remove(5), Some(4));
        assert_eq!(p.remove(5), None);
        assert_eq!(p.jobs().collect::<Vec<_>>(), [3, 7]);
        assert_eq!(p.len(), 2);
        assert_eq!(p.into_iter().collect::<Vec<_>>(), [(3, 1), (7, 2)]);
    }

    proptest::proptest! {
        /// Against a `BTreeMap` under any sequence of inserts and removals.
        #[test]
        fn behaves_as_a_sorted_map(ops in proptest::collection::vec((0u64..12, 0usize..5, proptest::bool::ANY), 0..60)) {
            let mut p = Partners::new();
            let mut model = std::collections::BTreeMap::new();
            for (job, index, add) in ops {
                if add {
                    proptest::prop_assert_eq!(p.insert(job, index), model.insert(job, index));
                } else {
                    proptest::prop_assert_eq!(p.remove(job), model.remove(&job));
                }
                proptest::prop_assert_eq!(p.iter().collect::<Vec<_>>(), model.iter().map(|(&j, &i)| (j, i)).collect::<Vec<_>>());
                proptest::prop_assert_eq!(p.is_empty(), model.is_empty());
            }
        }
    }
}
