//! Job-aware gating (Wang et al. §IV-B, Figs. 3–5). A job is an ordered sequence of queries
//! whose data regions (field and time steps) are known ahead; its queries are handed in one
//! after the other. When a job is declared it is aligned with every job still running
//! ([`align_matches`]) and the aligned pairs that share data become *gating edges*: a query with
//! gating edges is held (READY) until every query it is gated with has been handed in too,
//! and then they are released to the workload queues together, so one read of their atoms
//! serves them all.
//!
//! Edges are admitted greedily — the job pairs with the most shared queries first, each new
//! job's queries in order — and only if (a) a query keeps at most one edge to any other job
//! and (b) no deadlock can arise: with every gated group of queries contracted to one node,
//! the jobs' orders must still form a directed acyclic graph (the paper's gating numbers
//! serve the same end; [`JobGraph::gating_number`] computes them). A held query is also let
//! go after a timeout, so a client that declares a job and then stops cannot stall others.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::engine::jobs::alignment::{align_matches, Matches};
use crate::engine::jobs::contraction::Contraction;
use crate::engine::jobs::partners::Partners;

/// A job's number.
pub type JobId = u64;

/// Queries of a job that are aligned with other jobs: each alignment costs `n × m / 64`
/// words on the engine's thread, and each aligned query is a node of the deadlock check,
/// so a longer job is gated over its first queries only and runs the rest ungated.
pub const MAX_ALIGNED_QUERIES: usize = 1024;

/// Edges a new job's query makes to queries it is gated with through others already.
/// One edge joins it to a group as well as many, but spare ones keep the group whole when
/// a member's job closes or lets go. Without a bound n jobs in step had n − 1 edges per
/// query, and the deadlock check, which walks every edge when a job is declared, cost each
/// declaration more with every job: 200 such jobs of 1 024 queries took 87 s to declare.
pub const MAX_PARTNERS: usize = 8;

/// The data a planned query reads: a field and its time steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// The engine's number of the field.
    pub field: u32,
    /// The time indices read, ascending.
    pub steps: Vec<u32>,
    /// Bit `t % 64` for each step `t`: two regions whose masks do not meet share no step.
    mask: u64,
}

impl Region {
    /// A region of `field` at `steps` (any order).
    pub fn new(field: u32, mut steps: Vec<u32>) -> Self {
        steps.sort_unstable();
        steps.dedup();
        let mask = steps.iter().fold(0u64, |m, &t| m | 1 << (t % 64));
        Self { field, steps, mask }
    }

    /// Whether two regions share data: the same field at a common time step.
    pub fn shares(&self, other: &Region) -> bool {
        self.field == other.field
            && self.mask & other.mask != 0
            && self
                .steps
                .iter()
                .any(|t| other.steps.binary_search(t).is_ok())
    }
}

/// Which of `mine` share data with which of `theirs`, each row made from the bitsets of
/// its steps instead of comparing every pair of regions.
fn shared(mine: &[Region], theirs: &[Region]) -> Matches {
    let mut matches = Matches::new(mine.len(), theirs.len());
    let words = matches.words();
    let mut readers: FxHashMap<(u32, u32), Vec<u64>> = FxHashMap::default();
    for (j, region) in theirs.iter().enumerate() {
        for &t in &region.steps {
            readers
                .entry((region.field, t))
                .or_insert_with(|| vec![0; words])[j / 64] |= 1 << (j % 64);
        }
    }
    for (i, region) in mine.iter().enumerate() {
        let row = matches.row_mut(i);
        for found in region
            .steps
            .iter()
            .filter_map(|&t| readers.get(&(region.field, t)))
        {
            row.iter_mut()
                .zip(found)
                .for_each(|(bits, more)| *bits |= more);
        }
    }
    matches
}

/// The union of the regions' masks.
fn plan_mask(plan: &[Region]) -> u64 {
    plan.iter().fold(0, |m, r| m | r.mask)
}

/// Where a job's query stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryState {
    /// Not handed in yet.
    Wait,
    /// Handed in, held until the queries it is gated with are handed in.
    Ready,
    /// Released to the workload queues.
    Queue,
    /// Completed.
    Done,
}

#[derive(Debug)]
struct Job {
    plan: Vec<Region>,
    /// Every step of the plan as [`Region`]'s mask: a new job whose plan's mask does not
    /// meet it shares nothing with this one and is not aligned with it.
    mask: u64,
    /// Queries handed in so far (the next one gets this index).
    submitted: usize,
    /// Queries completed.
    done: usize,
    /// The query held at its gate: (index, engine query id, when it goes alone, ms).
    held: Option<(usize, u64, f64)>,
    /// When the held query was handed in, ms.
    held_since: f64,
    /// Per planned query: its gating edges.
    edges: Vec<Partners>,
    last_activity: f64,
}

impl Job {
    /// The queries the deadlock check needs: those before `max_aligned` past the next to
    /// be handed in. Every edge lies there (a job's alignments start at its next query then,
    /// and that only moves on), and a query after every edge of its job is on no path
    /// between two gated groups, so it cannot close a cycle. A 10 000-query job was 10 000
    /// nodes that every check walked: twenty of them kept the engine's thread busy 17 s,
    /// and a one-point query waited 15.
    fn gated_len(&self, max_aligned: usize) -> usize {
        self.plan.len().min(self.submitted + max_aligned)
    }

    fn state(&self, index: usize) -> QueryState {
        if index < self.done {
            QueryState::Done
        } else if self.held.is_some_and(|(i, _, _)| i == index) {
            QueryState::Ready
        } else if index < self.submitted {
            QueryState::Queue
        } else {
            QueryState::Wait
        }
    }
}

/// Counters of the gating.
#[derive(Debug, Default, Clone, Copy)]
pub struct GatingCounters {
    /// Gating edges admitted.
    pub edges: u64,
    /// Aligned pairs refused (one edge per job pair and query, or a deadlock).
    pub refused: u64,
    /// Queries released because they waited longer than the gate timeout.
    pub timeouts: u64,
    /// Queries released because the engine had nothing else to do ([`JobGraph::release_held`]).
    pub idle_releases: u64,
    /// Queries released together with at least one other.
    pub co_scheduled: u64,
}

/// The running jobs and their gating edges.
#[derive(Debug)]
pub struct JobGraph {
    jobs: BTreeMap<JobId, Job>,
    next: JobId,
    /// Whether edges are made at all (JAWS); other schedulers only count jobs.
    gating: bool,
    /// How long a query may be held, ms.
    timeout: f64,
    counters: GatingCounters,
    /// Queries of a job aligned with another's ([`MAX_ALIGNED_QUERIES`]; fewer in tests).
    max_aligned: usize,
}

impl JobGraph {
    /// No jobs yet. `gating = false` releases every query at once; `timeout_ms` bounds how
    /// long a query may be held.
    pub fn new(gating: bool, timeout_ms: f64) -> Self {
        Self {
            jobs: BTreeMap::new(),
            next: 1,
            gating,
            timeout: timeout_ms,
            counters: GatingCounters::default(),
            max_aligned: MAX_ALIGNED_QUERIES,
        }
    }

    /// The same graph aligning only the first `queries` of each job: the cap's effects at
    /// sizes a test can afford.
    #[cfg(test)]
    fn aligning(mut self, queries: usize) -> Self {
        self.max_aligned = queries;
        self
    }

    /// Jobs running.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether no job runs.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// What the gating has done.
    pub fn counters(&self) -> GatingCounters {
        self.counters
    }

    /// Queries held at their gates.
    pub fn held(&self) -> usize {
        self.jobs.values().filter(|j| j.held.is_some()).count()
    }

    /// Declares a job whose queries will read `plan`, in order; returns its number.
    pub fn declare(&mut self, plan: Vec<Region>, now: f64) -> JobId {
        let id = self.next;
        self.declare_as(id, plan, now);
        id
    }

    /// Declares a job under the number `id` (given out by the engine beforehand).
    pub fn declare_as(&mut self, id: JobId, plan: Vec<Region>, now: f64) {
        self.declare_all(vec![(id, plan)], now);
    }

    /// Declares jobs handed in together, in order, each under its number. One contracted
    /// graph serves them all: nothing completes in between, so each job only adds its
    /// queries to it. Rebuilt for every job, it was a sixth of the engine thread's time
    /// when the saturating trace's hundreds of jobs were declared at once.
    pub fn declare_all(&mut self, jobs: Vec<(JobId, Vec<Region>)>, now: f64) {
        let mut graph: Option<Contraction> = None;
        for (id, plan) in jobs {
            let pairings = self.pairings(&plan);
            let queries = plan.len();
            self.insert(id, plan, now);
            match graph.as_mut() {
                Some(graph) => graph.add_job(id, queries.min(self.max_aligned)),
                None if pairings.is_empty() => continue,
                None => {
                    graph = Some(Contraction::new(self.jobs.iter().map(|(&j, job)| {
                        (
                            j,
                            job.done,
                            job.gated_len(self.max_aligned),
                            job.edges.as_slice(),
                        )
                    })))
                }
            }
            let graph = graph.as_mut().expect("built above");
            for (other, pairs) in pairings {
                for (mine, theirs) in pairs {
                    if self.crowded(id, mine) && graph.together((id, mine), (other, theirs)) {
                        continue;
                    }
                    if self.one_per_pair(id, mine, other, theirs)
                        && graph.try_join((id, mine), (other, theirs))
                    {
                        self.add_edge((id, mine), (other, theirs));
                    } else {
                        self.counters.refused += 1;
                    }
                }
            }
        }
    }

    /// A new job's plan aligned with every running job's queries still to come: per job,
    /// the aligned pairs `(mine, theirs)` that share data, the jobs with most pairs first.
    fn pairings(&self, plan: &[Region]) -> Vec<(JobId, Vec<(usize, usize)>)> {
        let mut pairings: Vec<(JobId, Vec<(usize, usize)>)> = Vec::new();
        if !self.gating {
            return pairings;
        }
        let mine = plan.len().min(self.max_aligned);
        let mask = plan_mask(&plan[..mine]);
        for (&other, job) in &self.jobs {
            // A job on other steps has nothing to align. With 2 400 jobs (1 691 declared,
            // about 700 running at a time) the alignments and their gating took 6.5 % of
            // a saturating jaws run's `perf` samples, 4.9 % with this check (2-core Intel
            // Xeon, fields on AVX2, 2 threads, one run each; load about 2 for the second).
            if job.mask & mask == 0 {
                continue;
            }
            let from = job.submitted;
            let theirs = &job.plan[from.min(job.plan.len())..];
            let theirs = &theirs[..theirs.len().min(self.max_aligned)];
            let pairs: Vec<(usize, usize)> = align_matches(&shared(&plan[..mine], theirs))
                .into_iter()
                .map(|(i, j)| (i, j + from))
                .collect();
            if !pairs.is_empty() {
                pairings.push((other, pairs));
            }
        }
        pairings.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        pairings
    }

    fn insert(&mut self, id: JobId, plan: Vec<Region>, now: f64) {
        self.next = self.next.max(id + 1);
        let n = plan.len();
        self.jobs.insert(
            id,
            Job {
                mask: plan_mask(&plan),
                plan,
                submitted: 0,
                done: 0,
                held: None,
                held_since: now,
                edges: vec![Partners::new(); n],
                last_activity: now,
            },
        );
    }

    fn add_edge(&mut self, (a, i): (JobId, usize), (b, j): (JobId, usize)) {
        let had = self.jobs.get_mut(&a).expect("job").edges[i].insert(b, j);
        let had_too = self.jobs.get_mut(&b).expect("job").edges[j].insert(a, i);
        debug_assert!(
            had.is_none() && had_too.is_none(),
            "one edge per query and job"
        );
        self.counters.edges += 1;
    }

    /// Whether a new job's query has [`MAX_PARTNERS`] edges already: then an edge to a
    /// query it is already gated with through others is not added.
    fn crowded(&self, job: JobId, index: usize) -> bool {
        self.jobs[&job].edges[index].len() >= MAX_PARTNERS
    }

    /// Whether neither query has an edge to the other's job yet (at most one per pair).
    fn one_per_pair(&self, a: JobId, i: usize, b: JobId, j: usize) -> bool {
        let free =
            |job: JobId, index: usize, other: JobId| !self.jobs[&job].edges[index].contains(other);
        free(a, i, b) && free(b, j, a)
    }

    /// Cuts the edge from `other`'s query `index` to `job`'s query `theirs`, if it has it;
    /// returns whether `other` still runs.
    fn cut_partner(&mut self, other: JobId, index: usize, job: JobId, theirs: usize) -> bool {
        let Some(found) = self.jobs.get_mut(&other) else {
            return false;
        };
        if found.edges[index].get(job) == Some(theirs) {
            found.edges[index].remove(job);
        }
        true
    }

    /// The remaining queries with every gated group contracted to one node, with the
    /// extra edge `extra`: per query its group, and the groups in a topological order —
    /// `None` if the jobs' orders make a cycle (a deadlock).
    #[allow(clippy::type_complexity)]
    fn contracted(
        &self,
        extra: Option<((JobId, usize), (JobId, usize))>,
    ) -> Option<(FxHashMap<(JobId, usize), usize>, Vec<usize>)> {
        let mut node: FxHashMap<(JobId, usize), usize> = FxHashMap::default();
        for (&id, job) in &self.jobs {
            for index in job.done..job.plan.len() {
                let next = node.len();
                node.insert((id, index), next);
            }
        }
        let mut parent: Vec<usize> = (0..node.len()).collect();
        fn find(parent: &mut [usize], mut x: usize) -> usize {
            while parent[x] != x {
                parent[x] = parent[parent[x]];
                x = parent[x];
            }
            x
        }
        let union = |a: (JobId, usize), b: (JobId, usize), parent: &mut Vec<usize>| {
            if let (Some(&x), Some(&y)) = (node.get(&a), node.get(&b)) {
                let (x, y) = (find(parent, x), find(parent, y));
                parent[x] = y;
            }
        };
        for (&id, job) in &self.jobs {
            for index in job.done..job.plan.len() {
                for (other, theirs) in job.edges[index].iter() {
                    union((id, index), (other, theirs), &mut parent);
                }
            }
        }
        if let Some((a, b)) = extra {
            union(a, b, &mut parent);
        }
        let groups = node.len();
        let mut indegree = vec![0usize; groups];
        let mut after: Vec<Vec<usize>> = vec![Vec::new(); groups];
        for (&id, job) in &self.jobs {
            for index in job.done..job.plan.len().saturating_sub(1) {
                let x = find(&mut parent, node[&(id, index)]);
                let y = find(&mut parent, node[&(id, index + 1)]);
                if x == y {
                    return None; // two queries of one job in one group
                }
                after[x].push(y);
                indegree[y] += 1;
            }
        }
        let roots: Vec<usize> = (0..groups).filter(|&g| find(&mut parent, g) == g).collect();
        let mut ready: Vec<usize> = roots
            .iter()
            .copied()
            .filter(|&g| indegree[g] == 0)
            .collect();
        let mut order = Vec::with_capacity(roots.len());
        while let Some(g) = ready.pop() {
            order.push(g);
            for &h in &after[g] {
                indegree[h] -= 1;
                if indegree[h] == 0 {
                    ready.push(h);
                }
            }
        }
        if order.len() < roots.len() {
            return None;
        }
        let group = node
            .into_iter()
            .map(|(q, x)| (q, find(&mut parent, x)))
            .collect();
        Some((group, order))
    }

    /// The gating number of a remaining query: how many gated groups the scheduler must
    /// get through, along the jobs' orders, before it — its own group included.
    pub fn gating_number(&self, job: JobId, index: usize) -> Option<usize> {
        let (group, order) = self.contracted(None)?;
        let mut members: FxHashMap<usize, Vec<(JobId, usize)>> = FxHashMap::default();
        for (&q, &g) in &group {
            members.entry(g).or_default().push(q);
        }
        let gated = |g: usize| {
            members[&g]
                .iter()
                .any(|&(j, i)| !self.jobs[&j].edges[i].is_empty())
        };
        let mut number: FxHashMap<usize, usize> = FxHashMap::default();
        for &g in &order {
            let before = members[&g]
                .iter()
                .filter(|&&(j, i)| i > self.jobs[&j].done)
                .map(|&(j, i)| number.get(&group[&(j, i - 1)]).copied().unwrap_or(0))
                .max()
                .unwrap_or(0);
            number.insert(g, before + usize::from(gated(g)));
        }
        number.get(group.get(&(job, index))?).copied()
    }

    /// The `(field, time index)` steps that the next queries of the running jobs will read
    /// (each job's first query not yet handed in).
    pub fn next_steps(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.jobs.values().flat_map(|job| {
            job.plan
                .get(job.submitted)
                .into_iter()
                .flat_map(|region| region.steps.iter().map(move |&t| (region.field, t)))
        })
    }

    /// Where query `index` of `job` stands (`None`: no such job).
    pub fn state(&self, job: JobId, index: usize) -> Option<QueryState> {
        self.jobs.get(&job).map(|j| j.state(index))
    }

    /// Hands in the next query of `job` (engine id `query`): returns its index in the job
    /// and the queries released now (this one among them unless it is held).
    pub fn submit(&mut self, job: JobId, query: u64, now: f64) -> (Option<usize>, Vec<u64>) {
        self.submit_within(job, query, now, self.timeout)
    }

    /// [`JobGraph::submit`], holding the query at most `timeout_ms` (the gate timeout if
    /// that is shorter).
    pub fn submit_within(
        &mut self,
        job: JobId,
        query: u64,
        now: f64,
        timeout_ms: f64,
    ) -> (Option<usize>, Vec<u64>) {
        let deadline = now + timeout_ms.min(self.timeout);
        let Some(j) = self.jobs.get_mut(&job) else {
            return (None, vec![query]); // unknown or finished job: not gated
        };
        let index = j.submitted;
        j.submitted += 1;
        j.last_activity = now;
        let mut released = Vec::new();
        if let Some((_, older, _)) = j.held.take() {
            released.push(older); // handed in again before its gate opened: let it go
        }
        if index >= j.plan.len() || j.edges[index].is_empty() {
            released.push(query);
            return (Some(index), released);
        }
        j.held = Some((index, query, deadline));
        j.held_since = now;
        released.extend(self.try_release(job, index));
        (Some(index), released)
    }

    /// The queries gated with `(job, index)`, transitively, itself included; `None` as
    /// soon as one of them is still to be handed in (then none can go yet). Groups chain
    /// through many jobs under load: a linear `contains` per member made this a fifth of
    /// the engine thread's time over the benchmark's trace.
    fn group_if_ready(&self, job: JobId, index: usize) -> Option<Vec<(JobId, usize)>> {
        let mut seen = vec![(job, index)];
        let mut known: FxHashSet<(JobId, usize)> = FxHashSet::default();
        known.insert((job, index));
        let mut at = 0;
        while at < seen.len() {
            let (j, i) = seen[at];
            at += 1;
            let Some(found) = self.jobs.get(&j) else {
                continue;
            };
            if found.state(i) == QueryState::Wait {
                return None;
            }
            for (other, theirs) in found.edges[i].iter() {
                if known.insert((other, theirs)) {
                    seen.push((other, theirs));
                }
            }
        }
        Some(seen)
    }

    /// Releases the group of `(job, index)` if every member has been handed in.
    fn try_release(&mut self, job: JobId, index: usize) -> Vec<u64> {
        let Some(group) = self.group_if_ready(job, index) else {
            return Vec::new();
        };
        let mut released = Vec::new();
        for (j, i) in group {
            if let Some(found) = self.jobs.get_mut(&j) {
                if let Some((held, query, _)) = found.held {
                    if held == i {
                        found.held = None;
                        released.push(query);
                    }
                }
            }
        }
        if released.len() > 1 {
            self.counters.co_scheduled += released.len() as u64;
        }
        released
    }

    /// The next query of `job` was answered at once, outside the queues (every atom it
    /// needed was cached: no read to share). It counts as handed in and completed, and
    /// the queries held for it go; returns those released.
    pub fn passed(&mut self, job: JobId, now: f64) -> Vec<u64> {
        let Some(j) = self.jobs.get_mut(&job) else {
            return Vec::new();
        };
        let index = j.submitted;
        j.submitted += 1;
        j.last_activity = now;
        let mut released: Vec<u64> = j.held.take().map(|(_, q, _)| q).into_iter().collect();
        if index < j.plan.len() {
            for (other, theirs) in std::mem::take(&mut j.edges[index]) {
                self.cut_partner(other, theirs, job, index);
                if self.state(other, theirs) == Some(QueryState::Ready) {
                    released.extend(self.try_release(other, theirs));
                }
            }
        }
        released.extend(self.completed(job, index, now));
        released
    }

    /// Query `index` of `job` completed; returns queries released as a result.
    pub fn completed(&mut self, job: JobId, index: usize, now: f64) -> Vec<u64> {
        let Some(j) = self.jobs.get_mut(&job) else {
            return Vec::new();
        };
        j.done = j.done.max(index + 1);
        j.last_activity = now;
        if j.done >= j.plan.len() && j.held.is_none() && j.submitted >= j.plan.len() {
            return self.close(job);
        }
        Vec::new()
    }

    /// Ends a job (finished, cancelled or idle): its edges go, and queries that were held
    /// waiting for it are released.
    pub fn close(&mut self, job: JobId) -> Vec<u64> {
        let Some(gone) = self.jobs.remove(&job) else {
            return Vec::new();
        };
        let mut released: Vec<u64> = gone.held.map(|(_, q, _)| q).into_iter().collect();
        released.extend(self.cut_edges(job, &gone.edges, Vec::new()));
        released
    }

    /// Cuts the partners' ends of `job`'s `edges` (taken out of it), then releases those
    /// of `waiting` and of the partners that are held and now wait for no one.
    fn cut_edges(
        &mut self,
        job: JobId,
        edges: &[Partners],
        mut waiting: Vec<(JobId, usize)>,
    ) -> Vec<u64> {
        for (mine, edges) in edges.iter().enumerate() {
            for (other, index) in edges.iter() {
                if self.cut_partner(other, index, job, mine) {
                    waiting.push((other, index));
                }
            }
        }
        let mut released = Vec::new();
        for (other, index) in waiting {
            if self.state(other, index) == Some(QueryState::Ready) {
                released.extend(self.try_release(other, index));
            }
        }
        released
    }

    /// Releases queries held longer than their timeout, and closes jobs idle for longer
    /// than `idle_ms` with nothing held; returns the queries released. A job that kept a
    /// query waiting the whole gate timeout for its own query loses every gating edge: it
    /// is not keeping pace (a job declared and never run, or left half done), and each of
    /// its partners' later queries would otherwise wait the whole timeout for it again (a
    /// declared job that never ran made another user's 16-query job take 17 s instead of
    /// 0.7). A query handed in with a shorter wait (a small one) says nothing of that.
    pub fn expire(&mut self, now: f64, idle_ms: f64) -> Vec<u64> {
        let overdue = self.held_where(|_, _, deadline| now >= deadline);
        let waited_it_all = |id: &JobId| {
            let job = &self.jobs[id];
            job.held
                .is_some_and(|(_, _, deadline)| deadline - job.held_since >= self.timeout)
        };
        let laggards: FxHashSet<JobId> = overdue
            .iter()
            .filter(|(id, _)| waited_it_all(id))
            .flat_map(|&(id, index)| self.jobs[&id].edges[index].iter())
            .filter(|&(other, theirs)| self.state(other, theirs) == Some(QueryState::Wait))
            .map(|(other, _)| other)
            .collect();
        let mut released = self.let_go(overdue);
        self.counters.timeouts += released.len() as u64;
        for job in laggards {
            released.extend(self.ungate(job));
        }
        let idle: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.held.is_none() && now - j.last_activity >= idle_ms)
            .map(|(&id, _)| id)
            .collect();
        for id in idle {
            released.extend(self.close(id));
        }
        released
    }

    /// Releases the held queries whose partners are jobs under way (each has handed in a
    /// query): the engine has nothing else to do, so holding them for those jobs' next
    /// queries would leave it idle now for a read it might share later. A query waiting
    /// for a job that has not started yet stays held until its partner's first query (a
    /// job is declared just before it) or the timeout.
    pub fn release_held(&mut self) -> Vec<u64> {
        let jobs = &self.jobs;
        let under_way = |partners: &Partners| {
            partners
                .jobs()
                .all(|k| jobs.get(&k).is_none_or(|j| j.submitted > 0))
        };
        let idle = self.held_where(|job, index, _| under_way(&job.edges[index]));
        let released = self.let_go(idle);
        self.counters.idle_releases += released.len() as u64;
        released
    }

    /// Cuts every gating edge of `job`, which stays open with its queries ungated, and
    /// releases the queries (its own among them) that no longer wait for anyone.
    fn ungate(&mut self, job: JobId) -> Vec<u64> {
        let Some(found) = self.jobs.get_mut(&job) else {
            return Vec::new();
        };
        let held = found.held.map(|(index, _, _)| (job, index));
        let empty = vec![Partners::new(); found.edges.len()];
        let edges = std::mem::replace(&mut found.edges, empty);
        self.cut_edges(job, &edges, held.into_iter().collect())
    }

    /// The held queries `(job, index)` for which `pick(job, index, deadline)` holds.
    fn held_where(&self, pick: impl Fn(&Job, usize, f64) -> bool) -> Vec<(JobId, usize)> {
        self.jobs
            .iter()
            .filter_map(|(&id, j)| match j.held {
                Some((index, _, deadline)) if pick(j, index, deadline) => Some((id, index)),
                _ => None,
            })
            .collect()
    }

    /// Releases the held queries `overdue`, cutting their edges: each goes alone, and
    /// those gated with it stop waiting for it.
    fn let_go(&mut self, overdue: Vec<(JobId, usize)>) -> Vec<u64> {
        let mut released = Vec::new();
        for (id, index) in overdue {
            // Cut its edges: it goes alone, and those gated with it stop waiting for it.
            let edges = std::mem::take(&mut self.jobs.get_mut(&id).expect("job").edges[index]);
            for (other, theirs) in edges {
                self.cut_partner(other, theirs, id, index);
            }
            let job = self.jobs.get_mut(&id).expect("job");
            if let Some((_, query, _)) = job.held.take() {
                released.push(query);
            }
        }
        released
    }

    /// Total gating edges now in the graph (each counted once).
    pub fn edges(&self) -> usize {
        self.jobs
            .values()
            .flat_map(|j| &j.edges)
            .map(Partners::len)
            .sum::<usize>()
            / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(regions: &[u32]) -> Vec<Region> {
        regions.iter().map(|&r| Region::new(0, vec![r])).collect()
    }

    #[test]
    fn regions_share_exactly_when_they_have_a_step_of_one_field_in_common() {
        let r = |field, steps: &[u32]| Region::new(field, steps.to_vec());
        assert!(r(0, &[3, 7]).shares(&r(0, &[7, 9])));
        assert!(!r(0, &[3, 7]).shares(&r(1, &[3, 7])), "another field");
        assert!(!r(0, &[3]).shares(&r(0, &[4])));
        // Steps 64 apart fall on the same bit of the mask, and share nothing.
        assert!(!r(0, &[1]).shares(&r(0, &[65])));
        assert!(!r(0, &[65, 200]).shares(&r(0, &[1, 136])));
        assert!(r(0, &[65, 200]).shares(&r(0, &[1, 200])));
        assert!(!r(0, &[]).shares(&r(0, &[0])));
    }

    /// Runs the jobs to the end: each hands in its next query when the previous one
    /// completes; released queries complete in release order. Returns the release groups
    /// (job, index) in order, or panics on a deadlock.
    fn run(graph: &mut JobGraph, jobs: &[(JobId, usize)]) -> Vec<Vec<(JobId, usize)>> {
        let mut who: FxHashMap<u64, (JobId, usize)> = FxHashMap::default();
        let mut next_id = 1u64;
        let mut groups = Vec::new();
        let mut queue: Vec<Vec<u64>> = Vec::new();
        let mut hand_in = |graph: &mut JobGraph,
                           job: JobId,
                           who: &mut FxHashMap<u64, (JobId, usize)>,
                           queue: &mut Vec<Vec<u64>>| {
            let id = next_id;
            next_id += 1;
            let (index, released) = graph.submit(job, id, 0.0);
            who.insert(id, (job, index.unwrap()));
            if !released.is_empty() {
                queue.push(released);
            }
        };
        for &(job, _) in jobs {
            hand_in(graph, job, &mut who, &mut queue);
        }
        let total: usize = jobs.iter().map(|j| j.1).sum();
        let mut completed = 0;
        while completed < total {
            assert!(
                !queue.is_empty(),
                "deadlock: nothing released, {completed} of {total} done"
            );
            let group = queue.remove(0);
            groups.push(group.iter().map(|q| who[q]).collect());
            for q in group {
                let (job, index) = who[&q];
                completed += 1;
                let released = graph.completed(job, index, 0.0);
                if !released.is_empty() {
                    queue.push(released);
                }
                let length = jobs.iter().find(|j| j.0 == job).unwrap().1;
                if index + 1 < length {
                    hand_in(graph, job, &mut who, &mut queue);
                }
            }
        }
        groups
    }

    #[test]
    fn the_next_steps_are_those_of_each_jobs_first_query_not_handed_in() {
        let mut graph = JobGraph::new(false, 1e9);
        let j1 = graph.declare(plan(&[5, 5, 7]), 0.0);
        let j2 = graph.declare(vec![Region::new(1, vec![3, 2])], 0.0);
        let steps = |g: &JobGraph| {
            let mut s: Vec<(u32, u32)> = g.next_steps().collect();
            s.sort_unstable();
            s
        };
        assert_eq!(steps(&graph), vec![(0, 5), (1, 2), (1, 3)]);
        // j1's first query is handed in: its next reads step 5 again; j2's only query is in.
        graph.submit(j1, 11, 0.0);
        graph.submit(j2, 21, 0.0);
        assert_eq!(steps(&graph), vec![(0, 5)]);
        graph.submit(j1, 12, 0.0);
        assert_eq!(steps(&graph), vec![(0, 7)]);
        graph.close(j1);
        assert!(steps(&graph).is_empty());
    }

    #[test]
    fn figure_3_two_jobs_are_gated_where_they_share_and_numbered() {
        // j1 = R1 R2 R3 R4, j2 = R1 R3 R4: edges at R1, R3, R4; the last query of j1
        // has gating number 3 (the paper's Figure 3).
        let mut graph = JobGraph::new(true, 1e9);
        let j1 = graph.declare(plan(&[1, 2, 3, 4]), 0.0);
        let j2 = graph.declare(plan(&[1, 3, 4]), 0.0);
        assert_eq!(graph.edges(), 3);
        let numbers: Vec<usize> = (0..4)
            .map(|i| graph.gating_number(j1, i).unwrap())
            .collect();
        assert_eq!(numbers, vec![1, 1, 2, 3]);
        let numbers: Vec<usize> = (0..3)
            .map(|i| graph.gating_number(j2, i).unwrap())
            .collect();
        assert_eq!(numbers, vec![1, 2, 3]);
        let groups = run(&mut graph, &[(j1, 4), (j2, 3)]);
        // R1, R3 and R4 each run once for both jobs.
        assert!(
            groups.contains(&vec![(j1, 0), (j2, 0)]) || groups.contains(&vec![(j2, 0), (j1, 0)])
        );
        assert_eq!(groups.iter().filter(|g| g.len() == 2).count(), 3);
        assert!(graph.is_empty());
    }

    #[test]
    fn figure_5_three_jobs_share_r4_in_one_group_without_deadlock() {
        // j1 = R1 R3 R4, j2 = R2 R3 R4, j3 = R1 R4: R4 gates one query of each job.
        let mut graph = JobGraph::new(true, 1e9);
        let j1 = graph.declare(plan(&[1, 3, 4]), 0.0);
        let j2 = graph.declare(plan(&[2, 3, 4]), 0.0);
        let j3 = graph.declare(plan(&[1, 4]), 0.0);
        // At most one edge from any query to any other job.
        for job in [j1, j2, j3] {
            for (index, edges) in graph.jobs[&job].edges.iter().enumerate() {
                // Each edge is there from both ends (the map keeps one per other job).
                for (other, theirs) in edges.iter() {
                    assert_eq!(graph.jobs[&other].edges[theirs].get(job), Some(index));
                }
            }
        }
        // Nothing is handed in yet: every query waits.
        assert_eq!(graph.state(j3, 0), Some(QueryState::Wait));
        let groups = run(&mut graph, &[(j1, 3), (j2, 3), (j3, 2)]);
        let r4: Vec<&Vec<(JobId, usize)>> =
            groups.iter().filter(|g| g.contains(&(j1, 2))).collect();
        assert_eq!(r4.len(), 1);
        let mut members = r4[0].clone();
        members.sort_unstable();
        assert_eq!(members, vec![(j1, 2), (j2, 2), (j3, 1)]);
    }

    #[test]
    fn an_edge_that_would_deadlock_is_refused() {
        // j1 = A B, j2 = B C, j3 = C A: the three pairwise alignments form a cycle of
        // waits (j1's B after its A, gated with j3's A after its C, gated with j2's C
        // after its B); the last edge is refused.
        let mut graph = JobGraph::new(true, 1e9);
        let j1 = graph.declare(plan(&[1, 2]), 0.0);
        let j2 = graph.declare(plan(&[2, 3]), 0.0);
        let j3 = graph.declare(plan(&[3, 1]), 0.0);
        assert_eq!(graph.edges(), 2);
        assert_eq!(graph.counters().refused, 1);
        run(&mut graph, &[(j1, 2), (j2, 2), (j3, 2)]);
    }

    #[test]
    fn a_held_query_goes_alone_after_the_timeout_and_closing_a_job_frees_its_partners() {
        let mut graph = JobGraph::new(true, 100.0);
        let j1 = graph.declare(plan(&[5, 6]), 0.0);
        let _j2 = graph.declare(plan(&[1, 5, 6]), 0.0);
        // j1's first query is gated with j2's second, which is not handed in yet.
        let (_, released) = graph.submit(j1, 11, 0.0);
        assert!(released.is_empty());
        assert_eq!(graph.state(j1, 0), Some(QueryState::Ready));
        assert!(graph.expire(50.0, 1e9).is_empty());
        assert_eq!(graph.expire(150.0, 1e9), vec![11]);
        assert_eq!(graph.counters().timeouts, 1);
        // j2 kept it waiting the whole timeout: it lost its edges, so j1's second query,
        // gated with j2's third, goes at once instead of waiting the timeout again.
        graph.completed(j1, 0, 160.0);
        let (_, released) = graph.submit(j1, 12, 170.0);
        assert_eq!(released, vec![12]);
        assert_eq!(graph.edges(), 0);
        // Closing a job frees the queries held for it.
        let j3 = graph.declare(plan(&[7, 8]), 200.0);
        let j4 = graph.declare(plan(&[7, 8]), 200.0);
        let (_, released) = graph.submit(j3, 31, 210.0);
        assert!(released.is_empty(), "gated with j4's first query");
        assert_eq!(graph.close(j4), vec![31]);
    }

    #[test]
    fn a_query_held_briefly_by_its_own_wish_leaves_its_partners_gated() {
        let mut graph = JobGraph::new(true, 100.0);
        let j1 = graph.declare(plan(&[1, 2]), 0.0);
        let _j2 = graph.declare(plan(&[1, 2]), 0.0);
        let (_, released) = graph.submit_within(j1, 11, 0.0, 20.0);
        assert!(released.is_empty());
        assert_eq!(graph.expire(25.0, 1e9), vec![11]);
        // j2 is only late by 25 ms, not the gate timeout: its edges stay.
        assert_eq!(graph.edges(), 1);
    }

    #[test]
    fn a_job_that_stops_keeping_pace_costs_its_partners_one_timeout_not_one_a_query() {
        // j2 runs its first query, then stops; j1 runs all four of the same steps.
        let mut graph = JobGraph::new(true, 100.0);
        let j1 = graph.declare(plan(&[1, 2, 3, 4]), 0.0);
        let j2 = graph.declare(plan(&[1, 2, 3, 4]), 0.0);
        let (_, released) = graph.submit(j1, 11, 1.0);
        assert!(released.is_empty());
        let (_, released) = graph.submit(j2, 21, 2.0);
        assert_eq!(released.len(), 2, "the first queries go together");
        graph.completed(j1, 0, 3.0);
        graph.completed(j2, 0, 3.0);
        let (_, released) = graph.submit(j1, 12, 4.0);
        assert!(released.is_empty(), "held for j2's second query");
        assert_eq!(graph.expire(110.0, 1e9), vec![12]);
        graph.completed(j1, 1, 111.0);
        for (index, query) in [(2, 13), (3, 14)] {
            let (_, released) = graph.submit(j1, query, 112.0 + index as f64);
            assert_eq!(released, vec![query], "j2 no longer gates j1");
            graph.completed(j1, index, 113.0 + index as f64);
        }
        assert_eq!(graph.counters().timeouts, 1);
        // j2 is still open and may go on, ungated.
        let (_, released) = graph.submit(j2, 22, 200.0);
        assert_eq!(released, vec![22]);
    }

    #[test]
    fn held_queries_go_at_once_when_released_for_an_idle_engine_and_their_partners_go_ungated() {
        let mut graph = JobGraph::new(true, 1e9);
        let j1 = graph.declare(plan(&[5, 6]), 0.0);
        let j2 = graph.declare(plan(&[1, 5, 6]), 0.0);
        let (_, released) = graph.submit(j1, 11, 0.0);
        assert!(released.is_empty(), "gated with j2's second query");
        // j2 has not started: j1's query waits for it (its first query comes right after
        // its declaration), idle engine or not.
        assert!(graph.release_held().is_empty());
        // j2 under way (its first query handed in and answered), its second not yet.
        let (_, released) = graph.submit(j2, 21, 5.0);
        assert_eq!(released, vec![21], "j2's first query is not gated");
        graph.completed(j2, 0, 8.0);
        assert!(graph.expire(10.0, 1e9).is_empty(), "far from its timeout");
        assert_eq!(graph.release_held(), vec![11]);
        assert_eq!(graph.counters().idle_releases, 1);
        assert_eq!(graph.counters().timeouts, 0);
        assert!(graph.release_held().is_empty(), "nothing held any more");
        // The edge is cut: j2's second query is not held for a partner that has gone.
        let (_, released) = graph.submit(j2, 22, 20.0);
        assert_eq!(released, vec![22]);
    }

    #[test]
    fn a_query_answered_outside_the_queues_frees_the_queries_held_for_it() {
        let mut graph = JobGraph::new(true, 1e9);
        let j1 = graph.declare(plan(&[5, 6]), 0.0);
        let j2 = graph.declare(plan(&[1, 5, 6]), 0.0);
        let (_, released) = graph.submit(j1, 11, 0.0);
        assert!(released.is_empty(), "gated with j2's second query");
        // j2's first two queries are answered from the cache: the second frees j1's.
        assert!(graph.passed(j2, 1.0).is_empty());
        assert_eq!(graph.passed(j2, 2.0), vec![11]);
        assert_eq!(graph.counters().timeouts, 0);
        // j2's third query is handed in as its third, gated with j1's second.
        graph.completed(j1, 0, 3.0);
        let (index, released) = graph.submit(j2, 23, 4.0);
        assert_eq!(index, Some(2));
        assert!(released.is_empty());
        let (_, released) = graph.submit(j1, 12, 5.0);
        assert_eq!(released.len(), 2);
        // A job whose every query passed is over.
        let j3 = graph.declare(plan(&[7]), 6.0);
        graph.passed(j3, 7.0);
        assert_eq!(graph.state(j3, 0), None);
    }

    #[test]
    fn a_query_handed_in_with_a_shorter_timeout_goes_alone_sooner_and_never_later() {
        let mut graph = JobGraph::new(true, 100.0);
        let j1 = graph.declare(plan(&[5, 6]), 0.0);
        let _j2 = graph.declare(plan(&[1, 5, 6]), 0.0);
        let (_, released) = graph.submit_within(j1, 11, 0.0, 20.0);
        assert!(
            released.is_empty(),
            "gated with j2's second query, not handed in yet"
        );
        assert!(graph.expire(19.0, 1e9).is_empty());
        assert_eq!(graph.expire(20.0, 1e9), vec![11]);
        // A longer wish than the gate timeout is cut to it.
        let mut graph = JobGraph::new(true, 100.0);
        let j1 = graph.declare(plan(&[5, 6]), 0.0);
        let _j2 = graph.declare(plan(&[1, 5, 6]), 0.0);
        graph.submit_within(j1, 11, 0.0, 5_000.0);
        assert_eq!(graph.expire(100.0, 1e9), vec![11]);
    }

    #[test]
    fn a_job_longer_than_the_alignment_cap_is_gated_over_its_first_queries_only() {
        // Two tracks over 3 000 steps each would need a 36 MB alignment; only the first
        // MAX_ALIGNED_QUERIES pairs are gated, and both still run to their end.
        let steps: Vec<u32> = (0..3000).collect();
        let mut graph = JobGraph::new(true, 1e9);
        let j1 = graph.declare(plan(&steps), 0.0);
        let j2 = graph.declare(plan(&steps), 0.0);
        assert_eq!(graph.edges(), MAX_ALIGNED_QUERIES);
        assert!(graph.jobs[&j1].edges[MAX_ALIGNED_QUERIES].is_empty());
        let groups = run(&mut graph, &[(j1, 3000), (j2, 3000)]);
        assert_eq!(
            groups.iter().filter(|g| g.len() == 2).count(),
            MAX_ALIGNED_QUERIES
        );
        assert!(graph.is_empty());
    }

    #[test]
    fn many_jobs_in_step_run_each_step_in_one_group_with_few_edges_per_query() {
        // Twenty jobs over the same five steps: every query of a step is gated with all the
        // others, each new one through MAX_PARTNERS edges, not one to each job before it.
        let mut graph = JobGraph::new(true, 1e9);
        let jobs: Vec<(JobId, usize)> = (0..20)
            .map(|_| (graph.declare(plan(&[3, 1, 4, 1, 5]), 0.0), 5))
            .collect();
        for &(job, _) in &jobs {
            assert!(graph.jobs[&job].edges.iter().all(|e| !e.is_empty()));
        }
        let spare: usize = (0..20).map(|k: usize| k.min(MAX_PARTNERS)).sum();
        assert_eq!(graph.edges(), 5 * spare);
        let groups = run(&mut graph, &jobs);
        assert_eq!(groups.iter().map(Vec::len).collect::<Vec<_>>(), vec![20; 5]);
        // Any job closed, even the first that every other is gated with: the others still
        // go together, held by their spare edges.
        for closed in [0, 1, 7, 19] {
            let mut graph = JobGraph::new(true, 1e9);
            let mut jobs: Vec<(JobId, usize)> = (0..20)
                .map(|_| (graph.declare(plan(&[3, 1, 4, 1, 5]), 0.0), 5))
                .collect();
            graph.close(jobs.remove(closed).0);
            let groups = run(&mut graph, &jobs);
            assert_eq!(groups.iter().map(Vec::len).collect::<Vec<_>>(), vec![19; 5]);
        }
    }

    #[test]
    fn without_gating_every_query_is_released_at_once() {
        let mut graph = JobGraph::new(false, 100.0);
        let j1 = graph.declare(plan(&[1, 2]), 0.0);
        let j2 = graph.declare(plan(&[1, 2]), 0.0);
        assert_eq!(graph.edges(), 0);
        assert_eq!(graph.submit(j1, 1, 0.0).1, vec![1]);
        assert_eq!(graph.submit(j2, 2, 0.0).1, vec![2]);
        assert_eq!(graph.submit(99, 3, 0.0), (None, vec![3]));
    }

    /// The gating as it was first written: the whole contracted graph rebuilt and sorted
    /// for every candidate edge (the reference for the incremental check).
    fn declare_by_rebuilding(graph: &mut JobGraph, id: JobId, plan: Vec<Region>) {
        let pairings = graph.pairings(&plan);
        graph.insert(id, plan, 0.0);
        for (other, pairs) in pairings {
            for (mine, theirs) in pairs {
                let together = graph.contracted(None).is_some_and(|(group, _)| {
                    group
                        .get(&(id, mine))
                        .is_some_and(|g| group.get(&(other, theirs)) == Some(g))
                });
                if graph.crowded(id, mine) && together {
                    continue;
                }
                if graph.one_per_pair(id, mine, other, theirs)
                    && graph
                        .contracted(Some(((id, mine), (other, theirs))))
                        .is_some()
                {
                    graph.add_edge((id, mine), (other, theirs));
                }
            }
        }
    }

    proptest::proptest! {
        /// The match rows built from each step's bitset say exactly what `Region::shares`
        /// says of every pair (queries reading one or two steps, of two fields, across
        /// word boundaries).
        #[test]
        fn shared_rows_are_region_shares_pair_by_pair(
            mine in proptest::collection::vec((0u32..2, proptest::collection::vec(0u32..70, 1..3)), 0..80),
            theirs in proptest::collection::vec((0u32..2, proptest::collection::vec(0u32..70, 1..3)), 0..140),
        ) {
            let regions = |plan: &[(u32, Vec<u32>)]| -> Vec<Region> {
                plan.iter().map(|(f, steps)| Region::new(*f, steps.clone())).collect()
            };
            let (mine, theirs) = (regions(&mine), regions(&theirs));
            proptest::prop_assert_eq!(
                shared(&mine, &theirs),
                Matches::from_fn(mine.len(), theirs.len(), |i, j| mine[i].shares(&theirs[j]))
            );
        }

        /// Jobs declared while others run (some queries done), alone or several at once
        /// (one drain of the engine's inbox): the incremental deadlock check admits exactly
        /// the edges that rebuilding the graph for each one did, the graph stays acyclic, and
        /// every edge is kept at both its ends.
        #[test]
        fn incremental_deadlock_check_admits_what_rebuilding_admits(
            ops in proptest::collection::vec(
                (proptest::collection::vec(0u32..4, 1..10), 0usize..8, 0u8..3),
                1..24,
            ),
            // Aligning at most this many queries of a job (the cap 1 024 scaled down): the
            // check then leaves out each job's queries past its last possible edge.
            cap in 2usize..12,
        ) {
            let mut fast = JobGraph::new(true, 1e9).aligning(cap);
            let mut slow = JobGraph::new(true, 1e9).aligning(cap);
            let mut query = 0u64;
            let mut together = Vec::new();
            let last = ops.len() - 1;
            for (k, (steps, advance, then)) in ops.into_iter().enumerate() {
                let id = k as JobId + 1;
                declare_by_rebuilding(&mut slow, id, plan(&steps));
                together.push((id, plan(&steps)));
                // 0: declared together with the job after it.
                if then == 0 && k < last {
                    continue;
                }
                fast.declare_all(std::mem::take(&mut together), 0.0);
                for (&j, job) in &fast.jobs {
                    proptest::prop_assert_eq!(&job.edges, &slow.jobs[&j].edges);
                }
                proptest::prop_assert!(fast.contracted(None).is_some());
                // 2: one running job hands in and completes its next query, in both graphs.
                if then == 2 {
                    let ids: Vec<JobId> = fast.jobs.keys().copied().collect();
                    let job = ids[advance % ids.len()];
                    query += 1;
                    for graph in [&mut fast, &mut slow] {
                        if let (Some(index), _) = graph.submit(job, query, 0.0) {
                            graph.completed(job, index, 0.0);
                        }
                    }
                }
                // Every edge is kept at both its ends, also after queries passed and jobs closed.
                for (&j, job) in &fast.jobs {
                    for (index, edges) in job.edges.iter().enumerate() {
                        for (other, theirs) in edges.iter() {
                            let back = fast.jobs.get(&other).and_then(|o| o.edges[theirs].get(j));
                            proptest::prop_assert_eq!(back, Some(index));
                        }
                    }
                }
            }
        }
    }
}
