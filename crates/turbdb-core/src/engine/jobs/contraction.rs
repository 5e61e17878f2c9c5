//! The deadlock check of job gating, kept incrementally while a new job's edges are
//! admitted. The remaining queries of the running jobs, with every gated group contracted
//! to one node and each job's order as arcs, must stay a directed acyclic graph. It is one
//! already; joining two groups `x` and `y` makes a cycle exactly when one reaches the other
//! (two queries of one job always do, along the job's order). So an edge is checked by two
//! searches from the groups it joins, instead of rebuilding and sorting the whole graph for
//! every candidate edge — which, with hundreds of jobs declared at once, cost the engine's
//! thread seconds per declaration and starved the batches.

use rustc_hash::FxHashMap;

use crate::engine::jobs::gating::JobId;
use crate::engine::jobs::partners::Partners;

const NONE: usize = usize::MAX;

/// The contracted graph of the remaining queries.
#[derive(Debug)]
pub struct Contraction {
    node: FxHashMap<(JobId, usize), usize>,
    /// Per node: the node of its job's next query, or `NONE`.
    next: Vec<usize>,
    /// Union–find over nodes: each group's root.
    parent: Vec<usize>,
    /// Per root: the nodes of its group.
    members: Vec<Vec<usize>>,
    /// Search marks: a node was seen in the search numbered `epoch`.
    seen: Vec<u32>,
    epoch: u32,
}

impl Contraction {
    /// The graph of `jobs`: per job, its number, its first remaining query and its number
    /// of queries, and its gating edges per query (edges to queries not in the graph are
    /// ignored).
    pub fn new<'a>(
        jobs: impl Iterator<Item = (JobId, usize, usize, &'a [Partners])> + Clone,
    ) -> Self {
        let mut node = FxHashMap::default();
        let mut next = Vec::new();
        for (id, from, len, _) in jobs.clone() {
            for index in from..len {
                node.insert((id, index), next.len());
                next.push(if index + 1 < len {
                    next.len() + 1
                } else {
                    NONE
                });
            }
        }
        let n = next.len();
        let mut graph = Self {
            node,
            next,
            parent: (0..n).collect(),
            members: (0..n).map(|x| vec![x]).collect(),
            seen: vec![0; n],
            epoch: 0,
        };
        for (id, from, len, edges) in jobs {
            for (index, edges) in edges.iter().enumerate().take(len).skip(from) {
                for (job, theirs) in edges.iter() {
                    if let (Some(&x), Some(&y)) =
                        (graph.node.get(&(id, index)), graph.node.get(&(job, theirs)))
                    {
                        graph.join(x, y);
                    }
                }
            }
        }
        graph
    }

    /// Adds the `len` queries of a job with no gating edges yet.
    pub fn add_job(&mut self, id: JobId, len: usize) {
        for index in 0..len {
            let x = self.next.len();
            self.node.insert((id, index), x);
            self.next.push(if index + 1 < len { x + 1 } else { NONE });
            self.parent.push(x);
            self.members.push(vec![x]);
            self.seen.push(0);
        }
    }

    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    /// Joins the groups of nodes `x` and `y` (no check).
    fn join(&mut self, x: usize, y: usize) {
        let (mut x, mut y) = (self.find(x), self.find(y));
        if x == y {
            return;
        }
        if self.members[x].len() > self.members[y].len() {
            std::mem::swap(&mut x, &mut y);
        }
        self.parent[x] = y;
        let moved = std::mem::take(&mut self.members[x]);
        self.members[y].extend(moved);
    }

    /// Whether group `from` reaches group `to` along the jobs' orders.
    fn reaches(&mut self, from: usize, to: usize) -> bool {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.seen.fill(0);
            self.epoch = 1;
        }
        let mut stack = vec![from];
        self.seen[from] = self.epoch;
        while let Some(group) = stack.pop() {
            for k in 0..self.members[group].len() {
                let succ = self.next[self.members[group][k]];
                if succ == NONE {
                    continue;
                }
                let h = self.find(succ);
                if h == to {
                    return true;
                }
                if self.seen[h] != self.epoch {
                    self.seen[h] = self.epoch;
                    stack.push(h);
                }
            }
        }
        false
    }

    /// Gates query `a` with query `b` if that makes no cycle (no deadlock): returns whether
    /// it did. A query not in the graph (done) constrains nothing.
    pub fn try_join(&mut self, a: (JobId, usize), b: (JobId, usize)) -> bool {
        let (Some(&x), Some(&y)) = (self.node.get(&a), self.node.get(&b)) else {
            return true;
        };
        let (gx, gy) = (self.find(x), self.find(y));
        if gx == gy {
            return true;
        }
        if self.reaches(gx, gy) || self.reaches(gy, gx) {
            return false;
        }
        self.join(gx, gy);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gating edge between two queries, `(job, index)` each.
    type Edge = ((JobId, usize), (JobId, usize));

    fn graph(jobs: &[(JobId, usize)], edges: &[Edge]) -> Contraction {
        let mut lists: Vec<Vec<Partners>> = jobs
            .iter()
            .map(|&(_, n)| vec![Partners::new(); n])
            .collect();
        for &(a, b) in edges {
            let ja = jobs.iter().position(|j| j.0 == a.0).unwrap();
            let jb = jobs.iter().position(|j| j.0 == b.0).unwrap();
            lists[ja][a.1].insert(b.0, b.1);
            lists[jb][b.1].insert(a.0, a.1);
        }
        Contraction::new(
            jobs.iter()
                .zip(&lists)
                .map(|(&(id, n), e)| (id, 0, n, e.as_slice())),
        )
    }

    #[test]
    fn crossing_edges_between_two_jobs_are_refused() {
        // j1 = a b, j2 = c d with a–d: then b–c would close a cycle (b after a = d after c).
        let mut g = graph(&[(1, 2), (2, 2)], &[((1, 0), (2, 1))]);
        assert!(!g.try_join((1, 1), (2, 0)));
        // In step is fine.
        let mut g = graph(&[(1, 2), (2, 2)], &[((1, 0), (2, 0))]);
        assert!(g.try_join((1, 1), (2, 1)));
    }

    #[test]
    fn two_queries_of_one_job_never_share_a_group() {
        let mut g = graph(&[(1, 3), (2, 1)], &[((1, 0), (2, 0))]);
        assert!(!g.try_join((2, 0), (1, 2)));
        assert!(!g.try_join((1, 0), (1, 1)));
    }

    #[test]
    fn a_cycle_through_a_third_job_is_found() {
        // j1 = a b, j2 = c d, j3 = e f; a–d, f–c: then b–e closes b→…: e→f=c→d=a→b.
        let mut g = graph(
            &[(1, 2), (2, 2), (3, 2)],
            &[((1, 0), (2, 1)), ((3, 1), (2, 0))],
        );
        assert!(!g.try_join((1, 1), (3, 0)));
        assert!(!g.try_join((1, 1), (3, 1)));
        // Without the edge f–c, b–e is in step.
        let mut g = graph(&[(1, 2), (2, 2), (3, 2)], &[((1, 0), (2, 1))]);
        assert!(g.try_join((1, 1), (3, 0)));
    }

    #[test]
    fn a_done_query_constrains_nothing() {
        let mut g = graph(&[(1, 1)], &[]);
        assert!(g.try_join((1, 0), (9, 4)));
    }
}
