//! The deadlock check of job gating, kept incrementally while a new job's edges are
//! admitted. The remaining queries of the running jobs, with every gated group contracted
//! to one node and each job's order as arcs, must stay a directed acyclic graph. It is one
//! already; joining two groups `x` and `y` makes a cycle exactly when one reaches the other
//! (two queries of one job always do, along the job's order).
//!
//! The groups keep a topological order as labels, so only one direction can hold (the
//! earlier group reaching the later one), and only through groups labelled between them. It
//! is searched from both ends at once (forward from the earlier, backward from the later,
//! one group each in turn) and the search stops as soon as either side runs out. Long jobs
//! in step, joined query by query, are then answered in a step or two each, where a
//! one-sided search walked every group after the join: that was two fifths of the time
//! twenty 10 000-query jobs took to declare. The side that ran out is what must move for
//! the joined group to fit the order: it is given labels next to the group it must not
//! pass (Pearce and Kelly's dynamic topological order, with gaps between labels; all are
//! renumbered when a gap is used up).

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::engine::jobs::gating::JobId;
use crate::engine::jobs::partners::Partners;

const NONE: usize = usize::MAX;
/// Labels are this far apart when numbered afresh (in tests, close enough for the gaps
/// to run out often).
const GAP: u64 = if cfg!(test) { 4 } else { 1 << 24 };

/// The contracted graph of the remaining queries.
#[derive(Debug)]
pub struct Contraction {
    /// Per job: its first node, and the range of its queries in the graph.
    jobs: FxHashMap<JobId, (usize, usize, usize)>,
    /// Per node: the node of its job's next query, or `NONE`.
    next: Vec<usize>,
    /// Per node: the node of its job's previous query, or `NONE`.
    prev: Vec<usize>,
    /// Union–find over nodes: each group's root.
    parent: Vec<usize>,
    /// The nodes of each group as a ring: the next member of a node's group.
    ring: Vec<usize>,
    /// Per root: its group's number of members.
    size: Vec<usize>,
    /// Per root: its place in a topological order of the groups.
    label: Vec<u64>,
    /// The roots by label.
    order: BTreeMap<u64, usize>,
    /// Search marks: `2 × epoch` where the search numbered `epoch` saw a group going
    /// forward, `2 × epoch + 1` going backward (no group is seen both ways: they met).
    seen: Vec<u64>,
    epoch: u64,
}

/// One side of a search: forward from the earlier group, or backward from the later.
struct Side {
    forward: bool,
    /// The label the side must not reach (the other end's).
    bound: u64,
    /// This side's mark and the other's.
    mark: u64,
    other: u64,
    stack: Vec<usize>,
    /// The groups it found, its start left out.
    found: Vec<usize>,
}

/// What one step of a side found.
enum Step {
    /// It met the other side: the earlier group reaches the later.
    Met,
    /// It has nothing left to expand.
    Done,
    Going,
}

/// How a search between two groups ended.
enum Search {
    /// The earlier group reaches the later.
    Path,
    /// It does not: the groups between them that the earlier one reaches (`after: true`)
    /// or that reach the later one (`after: false`), whichever was found in full first.
    Apart { between: Vec<usize>, after: bool },
}

impl Contraction {
    /// The graph of `jobs`: per job, its number, its first remaining query and its number
    /// of queries, and its gating edges per query (edges to queries not in the graph are
    /// ignored). The edges must make no cycle.
    pub fn new<'a>(
        jobs: impl Iterator<Item = (JobId, usize, usize, &'a [Partners])> + Clone,
    ) -> Self {
        let mut graph = Self {
            jobs: FxHashMap::default(),
            next: Vec::new(),
            prev: Vec::new(),
            parent: Vec::new(),
            ring: Vec::new(),
            size: Vec::new(),
            label: Vec::new(),
            order: BTreeMap::new(),
            seen: Vec::new(),
            epoch: 0,
        };
        for (id, from, len, _) in jobs.clone() {
            graph.add_queries(id, from, len, false);
        }
        for (id, from, len, edges) in jobs {
            for (index, edges) in edges.iter().enumerate().take(len).skip(from) {
                for (job, theirs) in edges.iter() {
                    if let (Some(x), Some(y)) = (graph.node((id, index)), graph.node((job, theirs)))
                    {
                        graph.join(x, y);
                    }
                }
            }
        }
        graph.renumber();
        graph
    }

    /// Adds the `len` queries of a job with no gating edges yet.
    pub fn add_job(&mut self, id: JobId, len: usize) {
        self.add_queries(id, 0, len, true);
    }

    /// Adds queries `from..len` of job `id` as groups of their own, after every group
    /// (`labelled`; else to be numbered with the rest).
    fn add_queries(&mut self, id: JobId, from: usize, len: usize, labelled: bool) {
        let mut last = self.order.last_key_value().map_or(0, |(&l, _)| l);
        self.jobs.insert(id, (self.next.len(), from, len));
        for index in from..len {
            let x = self.next.len();
            self.next.push(if index + 1 < len { x + 1 } else { NONE });
            self.prev.push(if index > from { x - 1 } else { NONE });
            self.parent.push(x);
            self.ring.push(x);
            self.size.push(1);
            last = last.saturating_add(GAP);
            self.label.push(last);
            if labelled {
                self.order.insert(last, x);
            }
            self.seen.push(0);
        }
        if labelled && last == u64::MAX {
            self.renumber();
        }
    }

    /// The node of query `(job, index)`, if it is in the graph.
    fn node(&self, (job, index): (JobId, usize)) -> Option<usize> {
        let &(first, from, len) = self.jobs.get(&job)?;
        (from..len).contains(&index).then(|| first + index - from)
    }

    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    /// Joins the groups of nodes `x` and `y` (no check, labels not kept): returns the root.
    fn join(&mut self, x: usize, y: usize) -> usize {
        let (mut x, mut y) = (self.find(x), self.find(y));
        if x == y {
            return x;
        }
        if self.size[x] > self.size[y] {
            std::mem::swap(&mut x, &mut y);
        }
        self.parent[x] = y;
        self.size[y] += self.size[x];
        self.ring.swap(x, y); // two rings spliced into one
        y
    }

    /// The groups right after (`forward`) or before group `group`, into `out`.
    fn neighbours(&mut self, group: usize, forward: bool, out: &mut Vec<usize>) {
        out.clear();
        let mut member = group;
        loop {
            let linked = if forward {
                self.next[member]
            } else {
                self.prev[member]
            };
            if linked != NONE {
                out.push(self.find(linked));
            }
            member = self.ring[member];
            if member == group {
                break;
            }
        }
    }

    /// Whether group `early` reaches group `late` (labelled after it), searching from both.
    fn search(&mut self, early: usize, late: usize) -> Search {
        self.epoch += 1;
        let side = |start: usize, forward: bool, bound: u64, mark: u64| Side {
            forward,
            bound,
            mark,
            other: mark ^ 1,
            stack: vec![start],
            found: Vec::new(),
        };
        let mut ahead = side(early, true, self.label[late], 2 * self.epoch);
        let mut behind = side(late, false, self.label[early], 2 * self.epoch + 1);
        self.seen[early] = ahead.mark;
        self.seen[late] = behind.mark;
        let mut linked = Vec::new();
        loop {
            for side in [&mut ahead, &mut behind] {
                match self.step(side, &mut linked) {
                    Step::Met => return Search::Path,
                    Step::Done => {
                        return Search::Apart {
                            between: std::mem::take(&mut side.found),
                            after: side.forward,
                        }
                    }
                    Step::Going => {}
                }
            }
        }
    }

    /// Expands one group of `side`: its neighbours that way, within the labels up to the
    /// other end, join its search.
    fn step(&mut self, side: &mut Side, linked: &mut Vec<usize>) -> Step {
        let Some(group) = side.stack.pop() else {
            return Step::Done;
        };
        self.neighbours(group, side.forward, linked);
        for &h in linked.iter() {
            if self.seen[h] == side.other {
                return Step::Met;
            }
            let within = if side.forward {
                self.label[h] < side.bound
            } else {
                self.label[h] > side.bound
            };
            if self.seen[h] != side.mark && within {
                self.seen[h] = side.mark;
                side.stack.push(h);
                side.found.push(h);
            }
        }
        Step::Going
    }

    /// Whether queries `a` and `b` are gated together already (through others).
    pub fn together(&mut self, a: (JobId, usize), b: (JobId, usize)) -> bool {
        match (self.node(a), self.node(b)) {
            (Some(x), Some(y)) => self.find(x) == self.find(y),
            _ => false,
        }
    }

    /// Gates query `a` with query `b` if that makes no cycle (no deadlock): returns whether
    /// it did. A query not in the graph (done) constrains nothing.
    pub fn try_join(&mut self, a: (JobId, usize), b: (JobId, usize)) -> bool {
        let (Some(x), Some(y)) = (self.node(a), self.node(b)) else {
            return true;
        };
        let (gx, gy) = (self.find(x), self.find(y));
        if gx == gy {
            return true;
        }
        let (early, late) = if self.label[gx] < self.label[gy] {
            (gx, gy)
        } else {
            (gy, gx)
        };
        let Search::Apart { mut between, after } = self.search(early, late) else {
            return false;
        };
        // The joined group takes the label of the group on the side that did not run out;
        // the groups found between move past it, keeping their order, into the gap next to it.
        let (stays, goes) = if after { (late, early) } else { (early, late) };
        let kept = self.label[stays];
        let edge = if after {
            self.order
                .range(kept + 1..)
                .next()
                .map_or(u64::MAX, |(&l, _)| l)
        } else {
            self.order.range(..kept).next_back().map_or(0, |(&l, _)| l)
        };
        for &g in between.iter().chain([&goes]) {
            self.order.remove(&self.label[g]);
        }
        let root = self.join(early, late);
        self.label[root] = kept;
        self.order.insert(kept, root);
        let room = if after { edge - kept } else { kept - edge };
        if room <= between.len() as u64 {
            self.renumber();
            return true;
        }
        between.sort_unstable_by_key(|&g| self.label[g]);
        let (start, count) = (if after { kept } else { edge }, between.len() as u128 + 1);
        for (k, &g) in between.iter().enumerate() {
            let label = start + (u128::from(room) * (k as u128 + 1) / count) as u64;
            self.label[g] = label;
            self.order.insert(label, g);
        }
        true
    }

    /// Numbers every group afresh in a topological order, `GAP` apart.
    fn renumber(&mut self) {
        let nodes = self.parent.len();
        let roots: Vec<usize> = (0..nodes).filter(|&x| self.parent[x] == x).collect();
        let mut waiting = vec![0usize; nodes];
        let mut linked = Vec::new();
        for &g in &roots {
            self.neighbours(g, true, &mut linked);
            linked.iter().for_each(|&h| waiting[h] += 1);
        }
        let mut ready: Vec<usize> = roots.iter().copied().filter(|&g| waiting[g] == 0).collect();
        let mut sorted = Vec::with_capacity(roots.len());
        while let Some(g) = ready.pop() {
            let label = (sorted.len() as u64 + 1) * GAP;
            self.label[g] = label;
            sorted.push((label, g));
            self.neighbours(g, true, &mut linked);
            for &h in &linked {
                waiting[h] -= 1;
                if waiting[h] == 0 {
                    ready.push(h);
                }
            }
        }
        debug_assert_eq!(sorted.len(), roots.len(), "the gated groups make a cycle");
        self.order = sorted.into_iter().collect(); // in key order: built in one pass
    }

    /// Whether the labels are a topological order of the groups (for tests).
    #[cfg(test)]
    fn ordered(&mut self) -> bool {
        let roots: Vec<usize> = (0..self.parent.len())
            .filter(|&x| self.parent[x] == x)
            .collect();
        let mut linked = Vec::new();
        roots.len() == self.order.len()
            && roots.iter().all(|&g| {
                self.neighbours(g, true, &mut linked);
                self.order.get(&self.label[g]) == Some(&g)
                    && linked.iter().all(|&h| self.label[h] > self.label[g])
            })
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

    /// Whether the jobs' orders stay acyclic with the groups that `joins` make: the
    /// definition, checked by sorting the whole contracted graph.
    fn acyclic(jobs: &[usize], joins: &[Edge]) -> bool {
        let base: Vec<usize> = jobs
            .iter()
            .scan(0, |at, &n| {
                *at += n;
                Some(*at - n)
            })
            .collect();
        let id = |(job, index): (JobId, usize)| base[job as usize] + index;
        let total: usize = jobs.iter().sum();
        let mut parent: Vec<usize> = (0..total).collect();
        fn root(parent: &[usize], mut x: usize) -> usize {
            while parent[x] != x {
                x = parent[x];
            }
            x
        }
        for &(a, b) in joins {
            let (x, y) = (root(&parent, id(a)), root(&parent, id(b)));
            parent[x] = y;
        }
        let mut arcs = Vec::new();
        for (job, &n) in jobs.iter().enumerate() {
            for index in 1..n {
                let from = root(&parent, id((job as JobId, index - 1)));
                let to = root(&parent, id((job as JobId, index)));
                if from == to {
                    return false;
                }
                arcs.push((from, to));
            }
        }
        let mut waiting = vec![0; total];
        arcs.iter().for_each(|&(_, to)| waiting[to] += 1);
        let groups: Vec<usize> = (0..total).filter(|&x| root(&parent, x) == x).collect();
        let mut ready: Vec<usize> = groups
            .iter()
            .copied()
            .filter(|&g| waiting[g] == 0)
            .collect();
        let mut sorted = 0;
        while let Some(g) = ready.pop() {
            sorted += 1;
            for &(from, to) in &arcs {
                if from == g {
                    waiting[to] -= 1;
                    if waiting[to] == 0 {
                        ready.push(to);
                    }
                }
            }
        }
        sorted == groups.len()
    }

    proptest::proptest! {
        /// Joins asked in any order: each is admitted exactly when the contracted graph
        /// with it stays acyclic, and the labels stay a topological order of the groups
        /// (also after the gaps between them run out and everything is renumbered).
        #[test]
        fn joins_are_admitted_exactly_when_no_cycle_arises_and_the_order_holds(
            jobs in proptest::collection::vec(1usize..7, 2..6),
            asked in proptest::collection::vec((0usize..64, 0usize..64, 0usize..64, 0usize..64), 1..40),
        ) {
            let mut g = graph(
                &jobs.iter().enumerate().map(|(k, &n)| (k as JobId, n)).collect::<Vec<_>>(),
                &[],
            );
            let mut joins: Vec<Edge> = Vec::new();
            for (ja, ia, jb, ib) in asked {
                let a = ((ja % jobs.len()) as JobId, ia % jobs[ja % jobs.len()]);
                let b = ((jb % jobs.len()) as JobId, ib % jobs[jb % jobs.len()]);
                let mut with = joins.clone();
                with.push((a, b));
                let admitted = g.try_join(a, b);
                proptest::prop_assert_eq!(admitted, acyclic(&jobs, &with));
                if admitted {
                    joins = with;
                }
                proptest::prop_assert!(g.ordered());
            }
        }
    }

    #[test]
    fn jobs_joined_in_step_from_either_end_keep_their_order() {
        let mut g = graph(&[(1, 40), (2, 40), (3, 40)], &[]);
        for index in (0..40).rev() {
            assert!(g.try_join((1, index), (2, index)));
            assert!(g.try_join((3, 39 - index), (2, 39 - index)));
            assert!(g.ordered());
        }
        assert!(!g.try_join((1, 0), (3, 1)));
        assert!(g.try_join((1, 5), (3, 5)));
    }
}
