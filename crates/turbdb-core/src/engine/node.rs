//! The node engine (design §5; Wang et al., Fig. 7): one per database per process, shared by
//! every caller. A query is cut into sub-queries in the caller's thread and handed to the
//! engine's thread, which keeps the workload queues, asks the scheduler for the next batch
//! of atoms, takes them from the cache or has the reader threads read them (the next batch
//! is read while the current one is computed), serves every pending sub-query on them with
//! the partial-sum kernel, and completes a query when its last sub-query is served. A point
//! query whose every atom is already cached has no read to share: it is served at once in
//! the caller's thread by the batch kernel over the cached atoms
//! ([`cached_source`](crate::engine::cached_source)), never waiting for a batch.
//!
//! Callers wait on a [`Ticket`], or give a [`Completions`] queue to be told; a ticket can
//! cancel its query, and a query whose atom cannot be read fails alone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::engine::alpha::AgeBias;
use crate::engine::batch::{execute, Part, Progress, Work};
use crate::engine::cache::{AtomCache, AtomData, AtomKey, PolicyKind};
use crate::engine::cached_source::PinnedAtoms;
use crate::engine::fields::Fields;
use crate::engine::io_pool::{IoPool, Loading, ShardRead};
use crate::engine::jobs::gating::{JobGraph, JobId, Region};
use crate::engine::metric::CostModel;
use crate::engine::query::{evaluate, QuerySpec, Strategy};
use crate::engine::recent_cuts::{CutKey, RecentCuts};
use crate::engine::scheduler::{Pick, QueryBook, Scheduler, SchedulerKind, Serve, SMALL_POINTS};
use crate::engine::stream::{StreamStats, TimeLevel};
use crate::engine::subquery::{CutoutWork, PointWork};
use crate::engine::telemetry::{size_class, EngineStats, Histogram, BATCH_BOUNDS, RESPONSE_BOUNDS};
use crate::engine::ticket::{
    Canceller, Completions, Outcome, QueryStats, Ticket, TicketState, Values,
};
use crate::engine::workload::{AtomGrid, Entry, StepKey, WithNextSteps, Workload};
use crate::error::{Error, Result};
use crate::interp::method::{Method, Operator};
use crate::interp::time::{time_weights, Temporal};
use crate::storage::axis::Axis;
use crate::storage::direct::IoMode;
use crate::storage::geometry::ShardPos;
use crate::storage::reader::FieldReader;

/// How a node engine runs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Which scheduler picks the batches.
    pub scheduler: SchedulerKind,
    /// Bytes of decoded atoms the cache may hold.
    pub cache_bytes: usize,
    /// The cache's replacement policy.
    pub cache_policy: PolicyKind,
    /// How shard files are read.
    pub io: IoMode,
    /// JAWS's batch size `k`, in atoms.
    pub batch_atoms: usize,
    /// The age bias α (the start of JAWS's adaptation; LifeRaft's fixed value).
    pub alpha: f64,
    /// Queries per run: α, SLRU's protected segment and the cost model are updated after
    /// every run.
    pub run_queries: usize,
    /// Points that may be pending at once (0: no limit); beyond it submissions are refused
    /// with [`Error::Busy`], unless the engine is empty.
    pub max_pending_points: u64,
    /// Reader threads.
    pub io_threads: usize,
    /// How long a job's query may be held at its gate, ms. Under a saturating load a held
    /// medium query waits this long for its partner: 2 s held the medium p99 at about 2 s
    /// against noshare's 1.4–1.5 s; 1 s brought it to 1.35–1.55 s, throughput +5 %, small
    /// p99 +5–10 % (bench/workload.py, lru, 1 024 clients, 2-core Intel Xeon AVX-512, load
    /// about 1.5; 0.2–0.4 s cut the medium p99 further but raised the small p99 by 30–50 %).
    pub gate_timeout_ms: f64,
    /// A job with no activity for this long is closed, ms.
    pub job_idle_ms: f64,
    /// A point query of at least this many points that finds the engine idle runs alone,
    /// by the streaming executor in the caller's thread (0: never). See [`ALONE_POINTS`].
    pub alone_points: usize,
}

/// From how many points a query that finds the engine idle runs alone: with nothing to
/// share its reads with, cutting it into per-atom sub-queries only costs. Lag8 velocity at
/// uniform points of the 128³ benchmark dataset, through the engine against alone (2-core
/// Intel Xeon, AVX2, 2 threads, buffered reads, median of 12 steps, load 0.5–1.3): 8 192
/// points 7.4 against 7.4 ms, 16 384 points 12.9 against 8.2–9.0, 65 536 points 25.1
/// against 16.8–17.6.
pub const ALONE_POINTS: usize = 16_384;

/// How long a small query (at most [`SMALL_POINTS`]) of a job may be held at its gate,
/// ms: long enough for the queries of jobs that run in step to meet, short against a
/// small query's response time on a busy engine (hundreds of ms at the p99 with
/// `noshare`), which the gate must not make worse.
pub const SMALL_GATE_MS: f64 = 20.0;

/// How long the engine waits with nothing to do but queries held at their gates before it
/// releases them ([`JobGraph::release_held`]): a job's partner hands in its next query a
/// client's round trip after its last one was answered.
const IDLE_GATE: Duration = Duration::from_millis(20);

/// Most atoms in one JAWS batch. The paper's k = 15 counts its 64³-node atoms, which are
/// our regions of 8³ atoms ([`crate::engine::scheduler::JAWS_REGIONS`]); this bounds the
/// memory of a batch as [`crate::engine::scheduler::CHUNK_ATOMS`] bounds a lone query's
/// (4096 velocity atoms are 25 MB).
pub const DEFAULT_BATCH_ATOMS: usize = crate::engine::scheduler::CHUNK_ATOMS;

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            scheduler: SchedulerKind::Jaws,
            cache_bytes: default_cache_bytes(),
            cache_policy: PolicyKind::Urc,
            io: IoMode::Buffered,
            batch_atoms: DEFAULT_BATCH_ATOMS,
            alpha: 0.5,
            run_queries: 32,
            max_pending_points: 64_000_000,
            io_threads: 4,
            gate_timeout_ms: 1_000.0,
            job_idle_ms: 600_000.0,
            alone_points: ALONE_POINTS,
        }
    }
}

/// A quarter of the memory this process may use ([`crate::memory::usable_memory`]), at most 4 GiB.
pub fn default_cache_bytes() -> usize {
    // The memory a container or batch job allows, where it is less than the machine's.
    let memory = crate::memory::usable_memory().unwrap_or(1 << 32);
    (memory / 4).min(4 << 30) as usize
}

/// A point query for the engine.
#[derive(Debug, Clone)]
pub struct PointQuery<'a> {
    /// Physical `[x, y, z]` of each point.
    pub points: &'a [[f64; 3]],
    /// The grid's axes.
    pub axes: [Axis; 3],
    /// The dataset's stored times.
    pub times: &'a [f64],
    /// Physical time.
    pub time: f64,
    /// Interpolation method.
    pub method: Method,
    /// Operator.
    pub operator: Operator,
    /// Time interpolation.
    pub temporal: Temporal,
    /// Only the atoms of these shards contribute: the answer is partial sums.
    pub partitions: Option<&'a [ShardPos]>,
    /// The job the query belongs to (its next query).
    pub job: Option<JobId>,
    /// Whether the answer is rounded to float32: a field's sums along z and y of the
    /// stored float32 values may then run in float32 ([`crate::engine::accumulate::TermSet::narrow`]).
    pub narrow: bool,
    /// Stops the query's evaluation when set, if the engine serves it alone, at once
    /// ([`NodeEngine::submit_points`]); queued ones are stopped by cancelling their ticket.
    pub stop: Option<Arc<AtomicBool>>,
}

/// A cutout for the engine.
#[derive(Debug, Clone)]
pub struct CutoutQuery {
    /// Time index.
    pub t: usize,
    /// The grid nodes wanted along x, y, z (each inside the grid).
    pub nodes: [Vec<usize>; 3],
    /// The job the query belongs to.
    pub job: Option<JobId>,
}

/// A query on its way to the engine's thread.
struct Arrival {
    id: u64,
    ticket: Arc<TicketState>,
    field: u32,
    reader: Arc<FieldReader>,
    levels: Vec<TimeLevel>,
    work: Work,
    job: Option<JobId>,
    submitted: Instant,
    points: u64,
    /// See [`PointQuery::narrow`].
    narrow: bool,
}

#[derive(Default)]
struct Inbox {
    arrivals: Vec<Arrival>,
    cancels: Vec<u64>,
    declares: Vec<(JobId, Vec<Region>)>,
    closes: Vec<JobId>,
    /// Atoms dropped from the cache because their step was rewritten or their field made again.
    invalidated: Vec<AtomKey>,
    /// Fields made again (their numbers are not given again).
    replaced: Vec<u32>,
    /// Response times (s) of queries served from the cache at submission, for the run.
    served: Vec<f64>,
    /// Jobs whose next query was served from the cache at submission, in order.
    passed: Vec<JobId>,
    shutdown: bool,
}

struct Shared {
    config: EngineConfig,
    inbox: Mutex<Inbox>,
    wake: Condvar,
    ids: AtomicU64,
    jobs: AtomicU64,
    fields: Mutex<Fields>,
    pending_points: AtomicU64,
    /// The atom cache: the engine's thread reads through it, and callers pin from it the
    /// atoms of queries it holds whole.
    cache: Mutex<AtomCache>,
    /// The cuts of the last point queries, for queries asked again.
    recent_cuts: Mutex<RecentCuts>,
    published: Mutex<EngineStats>,
    /// Test hook: a batch of this time step panics (u32::MAX: none).
    #[cfg(test)]
    panic_on_step: std::sync::atomic::AtomicU32,
    /// What the queries served from the cache at submission add to `published`.
    served: Mutex<ServedTally>,
}

/// Counters of the queries served from the cache at submission (the engine's thread
/// never sees them, so they are kept apart and added to its snapshot).
struct ServedTally {
    queries: u64,
    /// Queries served alone by the streaming executor ([`NodeEngine::serve_alone`]).
    alone: u64,
    /// Queries that panicked while being served (they fail alone).
    failed: u64,
    /// Queries served alone that their stop flag stopped (a client gone): cancelled, not failed.
    stopped: u64,
    contributions: u64,
    /// What the queries served alone read (the streaming executor reads for itself).
    atoms_read: u64,
    read_requests: u64,
    bytes_read: u64,
    busy_seconds: f64,
    response: [Histogram; 3],
}

impl ServedTally {
    fn new() -> Self {
        Self {
            queries: 0,
            alone: 0,
            failed: 0,
            stopped: 0,
            contributions: 0,
            atoms_read: 0,
            read_requests: 0,
            bytes_read: 0,
            busy_seconds: 0.0,
            response: std::array::from_fn(|_| Histogram::new(&RESPONSE_BOUNDS)),
        }
    }

    fn add_to(&self, stats: &mut EngineStats) {
        stats.submitted += self.queries + self.alone + self.failed + self.stopped;
        stats.completed += self.queries + self.alone;
        stats.failed += self.failed;
        stats.cancelled += self.stopped;
        stats.served_from_cache += self.queries;
        stats.served_alone += self.alone;
        stats.contributions += self.contributions;
        stats.atoms_read += self.atoms_read;
        stats.read_requests += self.read_requests;
        stats.bytes_read += self.bytes_read;
        stats.busy_seconds += self.busy_seconds;
        for (total, mine) in stats.response.iter_mut().zip(&self.response) {
            for (t, m) in total.counts.iter_mut().zip(&mine.counts) {
                *t += m;
            }
            total.sum += mine.sum;
            total.count += mine.count;
        }
    }
}

impl Canceller for Shared {
    fn cancel(&self, id: u64) {
        self.inbox.lock().expect("inbox").cancels.push(id);
        self.wake.notify_one();
    }
}

/// The node engine.
pub struct NodeEngine {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for NodeEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeEngine")
            .field("config", &self.shared.config)
            .finish()
    }
}

impl NodeEngine {
    /// An engine run as `config`; its threads start with the first query.
    pub fn new(config: EngineConfig) -> Self {
        let stats = EngineStats::new(
            config.scheduler.name(),
            config.cache_policy.name(),
            config.io.name(),
            config.batch_atoms,
            config.cache_bytes,
        );
        Self {
            shared: Arc::new(Shared {
                inbox: Mutex::default(),
                wake: Condvar::new(),
                ids: AtomicU64::new(1),
                jobs: AtomicU64::new(1),
                fields: Mutex::default(),
                pending_points: AtomicU64::new(0),
                cache: Mutex::new(AtomCache::new(config.cache_bytes, config.cache_policy)),
                recent_cuts: Mutex::new(RecentCuts::default()),
                published: Mutex::new(stats),
                #[cfg(test)]
                panic_on_step: std::sync::atomic::AtomicU32::new(u32::MAX),
                served: Mutex::new(ServedTally::new()),
                config,
            }),
            thread: Mutex::new(None),
        }
    }

    /// How it runs.
    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
    }

    /// The engine's number of the field read by `reader` (one per field directory), and
    /// the reader its queries go through. A field made again in the directory of one the
    /// engine read replaces it: the old one's cached atoms go at once, its reader (and the
    /// shard files it maps) once its queries in flight are done.
    fn field(&self, reader: &Arc<FieldReader>) -> (u32, Arc<FieldReader>) {
        let numbered = self.shared.fields.lock().expect("fields").number(reader);
        if let Some(old) = numbered.replaced {
            self.let_go(&[old]);
        }
        (numbered.id, numbered.reader)
    }

    /// Lets go of the fields read from directories under `dir`: a dataset deleted or moved
    /// away (its readers kept its deleted shard files mapped until the engine went). Their
    /// cached atoms go at once, their readers once their queries in flight are done.
    /// Returns how many fields were let go.
    pub fn forget_directory(&self, dir: &std::path::Path) -> usize {
        let gone = self.shared.fields.lock().expect("fields").forget_under(dir);
        self.let_go(&gone);
        gone.len()
    }

    /// Drops the cached atoms of `fields`, no longer current, and has the engine's thread
    /// forget them.
    fn let_go(&self, fields: &[u32]) {
        if fields.is_empty() {
            return;
        }
        let mut invalidated = Vec::new();
        for &old in fields {
            invalidated.extend(self.cache().forget_field(old));
        }
        let mut inbox = self.shared.inbox.lock().expect("inbox");
        inbox.invalidated.extend(invalidated);
        inbox.replaced.extend_from_slice(fields);
        drop(inbox);
        self.shared.wake.notify_one();
    }

    fn start(&self) {
        let mut thread = self.thread.lock().expect("engine thread");
        if thread.is_none() {
            let shared = Arc::clone(&self.shared);
            *thread = Some(
                std::thread::Builder::new()
                    .name("turbdb-engine".into())
                    .spawn(move || Core::new(shared).run())
                    .expect("spawn the engine thread"),
            );
        }
    }

    /// Submits a point query on the field read by `reader`. The query is checked and cut
    /// into sub-queries here; errors in it are returned at once.
    /// If every atom it needs is cached it is served here, before this returns (its
    /// ticket is done).
    pub fn submit_points(
        &self,
        reader: &Arc<FieldReader>,
        query: &PointQuery<'_>,
        notify: Option<Arc<Completions>>,
    ) -> Result<Ticket> {
        let submitted = Instant::now();
        if let Some(ticket) = self.serve_alone(reader, query, &notify, submitted)? {
            return Ok(ticket);
        }
        let levels: Vec<TimeLevel> = time_weights(query.times, query.time, query.temporal)?
            .into_iter()
            .map(|(t, weight)| TimeLevel { t, weight })
            .collect();
        let work = Work::Points(self.cut(reader, query)?);
        let work = match self.serve_from_cache(reader, work, &levels, query, &notify, submitted) {
            Ok(ticket) => return Ok(ticket),
            Err(work) => work,
        };
        let points = query.points.len() as u64;
        self.hand_in(
            reader,
            levels,
            work,
            (query.job, query.narrow),
            points,
            notify,
        )
    }

    /// Serves a large point query alone, at once, in the calling thread, by the streaming
    /// executor, if the engine is idle: no query is pending to share its reads, and the
    /// executor is faster than the per-atom cut ([`ALONE_POINTS`]). Only with buffered
    /// reads (with direct ones the engine's cache must be the only one), outside a job
    /// (its gate decides) and for whole answers (not a partition's partial sums). While it
    /// runs its points count as pending, so the queries that arrive meanwhile go to the
    /// queues and share their reads there. `None`: the query is for the queues.
    fn serve_alone(
        &self,
        reader: &Arc<FieldReader>,
        query: &PointQuery<'_>,
        notify: &Option<Arc<Completions>>,
        submitted: Instant,
    ) -> Result<Option<Ticket>> {
        let config = &self.shared.config;
        let n = query.points.len();
        if config.alone_points == 0
            || n < config.alone_points
            || config.io != IoMode::Buffered
            || query.job.is_some()
            || query.partitions.is_some()
        {
            return Ok(None);
        }
        let points = n as u64;
        let pending = &self.shared.pending_points;
        if pending
            .compare_exchange(0, points, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Ok(None);
        }
        // Gives the engine back however the evaluation ends (an error, a panic).
        struct Claim<'a>(&'a AtomicU64, u64);
        impl Drop for Claim<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(self.1, Ordering::AcqRel);
            }
        }
        let claim = Claim(pending, points);
        let (_, reader) = self.field(reader);
        let spec = QuerySpec {
            method: query.method,
            operator: query.operator,
            temporal: query.temporal,
            time: query.time,
            strategy: Strategy::Streaming,
        };
        let stream = StreamStats {
            stop: query.stop.clone(),
            ..StreamStats::default()
        };
        #[cfg(test)]
        let poisoned = time_weights(query.times, query.time, query.temporal)?
            .iter()
            .any(|&(t, _)| t as u32 == self.shared.panic_on_step.load(Ordering::Relaxed));
        // A panic here fails this query alone, as one in a batch fails that batch's queries.
        let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            #[cfg(test)]
            if poisoned {
                panic!("test hook: a poisoned batch");
            }
            evaluate(
                &reader,
                query.axes,
                query.times,
                query.points,
                &spec,
                &stream,
            )
        }));
        drop(claim);
        let mut tally = self.shared.served.lock().expect("served");
        let values = match answer {
            Ok(Ok(values)) => values,
            Ok(Err(e)) => {
                match e {
                    Error::Stopped(_) => tally.stopped += 1,
                    _ => tally.failed += 1,
                }
                return Err(e);
            }
            Err(payload) => {
                tally.failed += 1;
                drop(tally);
                let failed = Error::Internal(format!(
                    "the node engine failed while serving a query of {n} points alone ({}); that \
                     query failed, the engine goes on serving the others — retry, and report \
                     this if it happens again",
                    panic_message(&*payload)
                ));
                return Ok(Some(self.ended_here(Outcome::Failed(failed), notify)));
            }
        };
        let response = submitted.elapsed().as_secs_f64();
        let (atoms, read_calls, contributions) = stream.snapshot();
        tally.alone += 1;
        tally.busy_seconds += response;
        tally.contributions += contributions;
        tally.atoms_read += atoms;
        tally.read_requests += read_calls;
        // The executor maps the shards: each atom read is its stored bytes.
        tally.bytes_read += atoms * reader.geometry().stored_atom_bytes() as u64;
        tally.response[size_class(n)].observe(&RESPONSE_BOUNDS, response);
        drop(tally);
        self.count_in_run(response);
        let stats = QueryStats {
            atoms,
            atoms_read: atoms,
            contributions,
            response_seconds: response,
            ..QueryStats::default()
        };
        Ok(Some(self.ended_here(
            Outcome::Done(Values::Answer(values), stats),
            notify,
        )))
    }

    /// The run (α, SLRU's segments) counts a query served in its caller's thread when the
    /// engine's thread next wakes; nothing here needs to wake it.
    fn count_in_run(&self, response: f64) {
        self.shared
            .inbox
            .lock()
            .expect("inbox")
            .served
            .push(response);
    }

    /// The ticket of a query that ended in its caller's thread.
    fn ended_here(&self, outcome: Outcome, notify: &Option<Arc<Completions>>) -> Ticket {
        let state = TicketState::new(
            self.shared.ids.fetch_add(1, Ordering::Relaxed),
            notify.clone(),
        );
        state.finish(outcome);
        let shared: Arc<dyn Canceller> = self.shared.clone();
        Ticket::new(state, Arc::downgrade(&shared) as Weak<dyn Canceller>)
    }

    /// The query cut into sub-queries: the cut kept from the last time the same points
    /// were asked on the same grid, if they were ([`RecentCuts`]), or a new one.
    fn cut(&self, reader: &FieldReader, query: &PointQuery<'_>) -> Result<Arc<PointWork>> {
        let key = CutKey {
            points: query.points,
            method: query.method,
            operator: query.operator,
            axes: query.axes,
            geometry: reader.geometry(),
            partitions: query.partitions,
        };
        if let Some(work) = self.recent_cuts().find(&key) {
            return Ok(work);
        }
        let work = Arc::new(key.cut()?);
        self.recent_cuts().keep(&key, &work);
        Ok(work)
    }

    fn recent_cuts(&self) -> std::sync::MutexGuard<'_, RecentCuts> {
        self.shared.recent_cuts.lock().expect("recent cuts")
    }

    /// Serves a point query at once, in the calling thread, if every atom it needs is in
    /// the cache: there is no read to share, so it does not wait for a batch, nor at a
    /// job's gate. Otherwise hands the work back, for the queues.
    // The work handed back is moved on to the queues, never copied: its size does not matter.
    #[allow(clippy::result_large_err)]
    fn serve_from_cache(
        &self,
        reader: &Arc<FieldReader>,
        work: Work,
        levels: &[TimeLevel],
        query: &PointQuery<'_>,
        notify: &Option<Arc<Completions>>,
        submitted: Instant,
    ) -> std::result::Result<Ticket, Work> {
        if work.size() == 0 || self.cache().is_empty() {
            return Err(work);
        }
        let (field, _) = self.field(reader);
        let Some(atoms) = PinnedAtoms::pin(&mut self.cache(), field, &work, levels) else {
            return Err(work);
        };
        if let Some(job) = query.job {
            // Counted before its answer (the job's next query comes after it); queries of
            // other jobs held at their gates for it go now.
            self.shared.inbox.lock().expect("inbox").passed.push(job);
            self.shared.wake.notify_one();
        }
        let started = Instant::now();
        let mut progress = Progress::new(&work);
        // A panic here fails this query alone, as one in a batch fails that batch's queries.
        #[cfg(test)]
        let poisoned = levels
            .iter()
            .any(|l| l.t as u32 == self.shared.panic_on_step.load(Ordering::Relaxed));
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            #[cfg(test)]
            if poisoned {
                panic!("test hook: a poisoned batch");
            }
            atoms.serve(&work, &mut progress, levels, query.narrow)
        }));
        let added = match served {
            Ok(added) => added,
            Err(payload) => {
                self.shared.served.lock().expect("served").failed += 1;
                let step = levels.first().map(|l| StepKey {
                    field,
                    t: l.t as u32,
                });
                let failed = batch_panic(&*payload, step, atoms.len(), 1);
                return Ok(self.ended_here(Outcome::Failed(failed), notify));
            }
        };
        let busy = started.elapsed().as_secs_f64();
        let response = submitted.elapsed().as_secs_f64();
        let size = work.size();
        let stats = QueryStats {
            atoms: atoms.len() as u64,
            cache_hits: atoms.len() as u64,
            contributions: added,
            response_seconds: response,
            ..QueryStats::default()
        };
        // Letting go of the pinned atoms (a reference count each, scattered over memory:
        // 47 µs of a warm 1 000-point lag8 query's 0.8 ms) is left to the pool, off the
        // caller's path.
        rayon::spawn(move || drop(atoms));
        let values = match (work, progress) {
            (Work::Points(work), Progress::Points { sums, .. }) => Values::Sums {
                sums,
                out_len: work.out_len(),
                order: PointWork::into_order(work),
            },
            _ => unreachable!("only point queries are served from the cache"),
        };
        {
            let mut tally = self.shared.served.lock().expect("served");
            tally.queries += 1;
            tally.busy_seconds += busy;
            tally.contributions += added;
            tally.response[size_class(size)].observe(&RESPONSE_BOUNDS, response);
        }
        self.count_in_run(response);
        Ok(self.ended_here(Outcome::Done(values, stats), notify))
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, AtomCache> {
        self.shared.cache.lock().expect("cache")
    }

    /// Submits a cutout of the field read by `reader`.
    pub fn submit_cutout(
        &self,
        reader: &Arc<FieldReader>,
        query: &CutoutQuery,
        notify: Option<Arc<Completions>>,
    ) -> Result<Ticket> {
        let geometry = reader.geometry();
        for (k, nodes) in query.nodes.iter().enumerate() {
            if let Some(&bad) = nodes.iter().find(|&&n| n >= geometry.grid[k]) {
                return Err(Error::InvalidArgument(format!(
                    "cutout node {bad} is outside the grid's {} nodes along {}",
                    geometry.grid[k],
                    ['x', 'y', 'z'][k]
                )));
            }
        }
        let work = CutoutWork::new(&query.nodes, geometry);
        let nodes = work.dims.iter().product::<usize>() as u64;
        let levels = vec![TimeLevel {
            t: query.t,
            weight: 1.0,
        }];
        self.hand_in(
            reader,
            levels,
            Work::Cutout(work),
            (query.job, false),
            nodes,
            notify,
        )
    }

    /// Queues a query of `work` for batches: `(job, narrow)` as in [`PointQuery`].
    fn hand_in(
        &self,
        reader: &Arc<FieldReader>,
        levels: Vec<TimeLevel>,
        work: Work,
        (job, narrow): (Option<JobId>, bool),
        points: u64,
        notify: Option<Arc<Completions>>,
    ) -> Result<Ticket> {
        let limit = self.shared.config.max_pending_points;
        let pending = self
            .shared
            .pending_points
            .fetch_add(points, Ordering::AcqRel);
        if limit > 0 && pending > 0 && pending + points > limit {
            self.shared
                .pending_points
                .fetch_sub(points, Ordering::AcqRel);
            return Err(Error::Busy {
                message: format!(
                    "the engine holds {pending} pending points, its limit is {limit}: retry shortly, or send smaller queries"
                ),
                retry_after: 1.0,
            });
        }
        let (field, reader) = self.field(reader);
        let id = self.shared.ids.fetch_add(1, Ordering::Relaxed);
        let state = TicketState::new(id, notify);
        let shared: Arc<dyn Canceller> = self.shared.clone();
        let ticket = Ticket::new(
            Arc::clone(&state),
            Arc::downgrade(&shared) as Weak<dyn Canceller>,
        );
        self.start();
        self.shared
            .inbox
            .lock()
            .expect("inbox")
            .arrivals
            .push(Arrival {
                id,
                ticket: state,
                field,
                reader,
                levels,
                work,
                job,
                submitted: Instant::now(),
                points,
                narrow,
            });
        self.shared.wake.notify_one();
        Ok(ticket)
    }

    /// Declares a job: the time steps each of its queries will read, in order, each on the
    /// field read by its reader. Returns the job's number, to give with its queries.
    pub fn declare_job(&self, plan: &[(Arc<FieldReader>, Vec<usize>)]) -> JobId {
        let regions = plan
            .iter()
            .map(|(reader, steps)| {
                Region::new(
                    self.field(reader).0,
                    steps.iter().map(|&t| t as u32).collect(),
                )
            })
            .collect();
        let id = self.shared.jobs.fetch_add(1, Ordering::Relaxed);
        self.shared
            .inbox
            .lock()
            .expect("inbox")
            .declares
            .push((id, regions));
        self.shared.wake.notify_one();
        id
    }

    /// Ends a job (queries of it still to come run ungated).
    pub fn close_job(&self, job: JobId) {
        self.shared.inbox.lock().expect("inbox").closes.push(job);
        self.shared.wake.notify_one();
    }

    /// Forgets cached atoms and shard indexes of time step `t` of the field read by
    /// `reader` (it was rewritten).
    pub fn invalidate(&self, reader: &Arc<FieldReader>, t: usize) {
        let (field, reader) = self.field(reader);
        reader.clear_cache();
        // At once: a query submitted after this must not be served the old atoms.
        let gone = self.cache().invalidate(field, t as u32);
        self.shared
            .inbox
            .lock()
            .expect("inbox")
            .invalidated
            .extend(gone);
        self.shared.wake.notify_one();
    }

    /// A snapshot of what the engine has done and holds.
    pub fn stats(&self) -> EngineStats {
        let mut stats = self.shared.published.lock().expect("stats").clone();
        self.shared
            .served
            .lock()
            .expect("served")
            .add_to(&mut stats);
        {
            let cache = self.cache();
            let counters = cache.counters();
            stats.cache_hits = counters.hits;
            stats.cache_misses = counters.misses;
            stats.cache_evictions = counters.evictions;
            stats.cache_bytes = cache.used();
            stats.cache_atoms = cache.len();
        }
        stats.pending_points = self.shared.pending_points.load(Ordering::Relaxed);
        stats.cuts_reused = self.recent_cuts().reused();
        stats
    }
}

impl Drop for NodeEngine {
    fn drop(&mut self) {
        self.shared.inbox.lock().expect("inbox").shutdown = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.lock().expect("engine thread").take() {
            let _ = thread.join();
        }
    }
}

/// A query the engine holds.
struct Live {
    id: u64,
    ticket: Arc<TicketState>,
    field: u32,
    levels: Vec<TimeLevel>,
    work: Work,
    progress: Progress,
    job: Option<(JobId, usize)>,
    submitted: Instant,
    points: u64,
    /// Arrival, ms on the engine's clock.
    arrival: f64,
    /// When it was released from its gate.
    released: Option<Instant>,
    /// Sub-queries not yet served (all levels).
    left: usize,
    /// Per level: which sub-queries were taken for a batch, how many are not, and the
    /// first that might not be.
    taken: Vec<Vec<bool>>,
    untaken: Vec<usize>,
    cursor: Vec<usize>,
    stats: QueryStats,
    /// See [`PointQuery::narrow`].
    narrow: bool,
}

impl Live {
    fn new(arrival: Arrival, now: f64) -> Self {
        let atoms = arrival.work.atoms();
        let levels = arrival.levels.len();
        let progress = Progress::new(&arrival.work);
        Self {
            id: arrival.id,
            ticket: arrival.ticket,
            field: arrival.field,
            levels: arrival.levels,
            work: arrival.work,
            progress,
            job: arrival.job.map(|j| (j, 0)),
            submitted: arrival.submitted,
            points: arrival.points,
            arrival: now,
            released: None,
            left: atoms * levels,
            taken: vec![vec![false; atoms]; levels],
            untaken: vec![atoms; levels],
            cursor: vec![0; levels],
            stats: QueryStats::default(),
            narrow: arrival.narrow,
        }
    }

    fn step(&self, level: usize) -> StepKey {
        StepKey {
            field: self.field,
            t: self.levels[level].t as u32,
        }
    }

    fn level_of(&self, step: StepKey) -> Option<usize> {
        (step.field == self.field)
            .then(|| self.levels.iter().position(|l| l.t as u32 == step.t))
            .flatten()
    }

    fn mark_taken(&mut self, level: usize, atom: usize) {
        if !self.taken[level][atom] {
            self.taken[level][atom] = true;
            self.untaken[level] -= 1;
        }
    }
}

/// The queries, as the scheduler sees them.
struct Book<'a>(&'a mut FxHashMap<u64, Live>);

impl QueryBook for Book<'_> {
    fn alive(&self, q: u64) -> bool {
        self.0.contains_key(&q)
    }

    fn remaining(&mut self, q: u64, max: usize) -> Option<(StepKey, Vec<u64>)> {
        let live = self.0.get_mut(&q)?;
        let level = (0..live.levels.len()).find(|&l| live.untaken[l] > 0)?;
        let taken = &live.taken[level];
        let mut at = live.cursor[level];
        while at < taken.len() && taken[at] {
            at += 1;
        }
        live.cursor[level] = at;
        let codes = (at..taken.len())
            .filter(|&i| !taken[i])
            .take(max)
            .map(|i| live.work.code(i))
            .collect();
        Some((live.step(level), codes))
    }
}

/// Atoms of one shard that one reader takes at least, where a shard's atoms are split
/// between the readers: fewer would cost more in requests than it gains in parallel reads.
const MIN_PIECE: usize = 16;

/// One shard's atoms (in storage order) in up to `readers` runs of consecutive atoms, each
/// read by its own reader. A batch's atoms are mostly in one or two shards, and read by one
/// reader each, a few small requests at a time, the disk ran at a quarter of what it serves
/// four requests at a time (bench/direct_reads.py).
fn split_for_readers<T>(atoms: Vec<T>, readers: usize) -> impl Iterator<Item = Vec<T>> {
    let pieces = readers.min(atoms.len().div_ceil(MIN_PIECE)).max(1);
    let per = atoms.len().div_ceil(pieces).max(1);
    let mut atoms = atoms.into_iter().peekable();
    std::iter::from_fn(move || {
        atoms.peek()?;
        Some(atoms.by_ref().take(per).collect())
    })
}

/// A batch chosen, its atoms being read.
struct Prepared {
    codes: Vec<u64>,
    /// Per slot: the atom if it was cached (and, once read, if it was not).
    data: Vec<Option<AtomData>>,
    /// Per slot: whether the atom was cached.
    hit: Vec<bool>,
    /// `(slot, sub-query)` served.
    entries: Vec<(u32, Entry)>,
    loading: Loading,
    /// The cache's generation when the reads were chosen: after an invalidation they may
    /// hold a rewritten step's old atoms, which serve this batch but are not cached.
    generation: u64,
}

/// The engine's thread: everything it owns.
struct Core {
    shared: Arc<Shared>,
    clock: Instant,
    workload: Workload,
    scheduler: Scheduler,
    jobs: JobGraph,
    queries: FxHashMap<u64, Live>,
    held: FxHashMap<u64, Live>,
    /// The reader of each field with queries here, and how many: held only while it has
    /// some, so that a field made again lets go of the old one's shard files.
    readers: FxHashMap<u32, (Arc<FieldReader>, usize)>,
    io: IoPool,
    cost: CostModel,
    bias: AgeBias,
    /// The current run: queries completed, their summed response (s), and its start.
    run: (usize, f64, Instant),
    stats: EngineStats,
    /// Queries ended since the last publication: their tickets are told after the stats
    /// are published, so a caller that sees its query done sees it counted.
    ended: Vec<(Arc<TicketState>, Outcome)>,
}

impl Core {
    fn new(shared: Arc<Shared>) -> Self {
        let config = shared.config.clone();
        let cost = CostModel::default();
        let adaptive = config.scheduler == SchedulerKind::Jaws;
        let stats = shared.published.lock().expect("stats").clone();
        Self {
            clock: Instant::now(),
            workload: Workload::new(config.alpha, cost),
            scheduler: Scheduler::new(config.scheduler, config.batch_atoms),
            jobs: JobGraph::new(
                config.scheduler == SchedulerKind::Jaws,
                config.gate_timeout_ms,
            ),
            queries: FxHashMap::default(),
            held: FxHashMap::default(),
            readers: FxHashMap::default(),
            io: IoPool::new(config.io_threads, config.io),
            cost,
            bias: AgeBias::new(config.alpha, adaptive),
            run: (0, 0.0, Instant::now()),
            stats,
            ended: Vec::new(),
            shared,
        }
    }

    fn now(&self) -> f64 {
        self.clock.elapsed().as_secs_f64() * 1e3
    }

    fn run(mut self) {
        let mut in_flight: Option<Prepared> = None;
        // Since when the engine has had nothing to do but hold queries at their gates.
        let mut idle_since: Option<Instant> = None;
        loop {
            if !self.drain(false) {
                break;
            }
            if !self.ended.is_empty() {
                self.publish();
            }
            let batch = match in_flight.take().or_else(|| self.prepare()) {
                Some(batch) => {
                    idle_since = None;
                    batch
                }
                None => {
                    self.publish();
                    // Gates are work-conserving: with nothing else to do for a moment (long
                    // enough for a job's partner, whose previous query just ended, to hand in
                    // its next), the held queries go. Held to their timeout, an engine with
                    // few clients sat idle for most of their two seconds.
                    if !self.held.is_empty() {
                        let since = *idle_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= IDLE_GATE {
                            idle_since = None;
                            let released = self.jobs.release_held();
                            self.release(released);
                            continue;
                        }
                    }
                    if !self.drain(true) {
                        break;
                    }
                    continue;
                }
            };
            let (batch, data, failed) = self.load(batch);
            if !self.drain(false) {
                break;
            }
            let next = self.prepare();
            self.compute(batch, data, failed);
            in_flight = next;
            self.publish();
        }
        self.publish();
        for (_, live) in self.queries.drain().chain(self.held.drain()) {
            live.ticket.finish(Outcome::Cancelled);
        }
    }

    /// Takes in what callers sent; with `wait`, sleeps until something comes (or a gate
    /// may time out). Returns false on shutdown.
    fn drain(&mut self, wait: bool) -> bool {
        let inbox = {
            let mut inbox = self.shared.inbox.lock().expect("inbox");
            if wait
                && inbox.arrivals.is_empty()
                && inbox.cancels.is_empty()
                && inbox.declares.is_empty()
                && inbox.closes.is_empty()
                && inbox.invalidated.is_empty()
                && inbox.replaced.is_empty()
                && !inbox.shutdown
            {
                let timeout = if !self.held.is_empty() {
                    IDLE_GATE.as_millis() as u64
                } else if self.jobs.is_empty() {
                    1000
                } else {
                    50
                };
                let slept = Instant::now();
                inbox = self
                    .shared
                    .wake
                    .wait_timeout(inbox, Duration::from_millis(timeout))
                    .expect("inbox")
                    .0;
                self.stats.idle_seconds += slept.elapsed().as_secs_f64();
            }
            std::mem::take(&mut *inbox)
        };
        if inbox.shutdown {
            return false;
        }
        let now = self.now();
        for key in inbox.invalidated {
            self.workload.set_cached(&key, false);
        }
        for field in inbox.replaced {
            // One with queries here is forgotten when its last query ends.
            if !self.readers.contains_key(&field) {
                self.workload.forget_grid(field);
            }
        }
        for response in inbox.served {
            self.end_of_run(response);
        }
        self.jobs.declare_all(inbox.declares, now);
        for id in inbox.closes {
            let released = self.jobs.close(id);
            self.release(released);
        }
        // Before the arrivals: a job's next query comes after the answer to this one.
        for job in inbox.passed {
            let released = self.jobs.passed(job, now);
            self.release(released);
        }
        let alone = inbox.arrivals.len() == 1;
        for arrival in inbox.arrivals {
            self.readers
                .entry(arrival.field)
                .or_insert_with(|| (Arc::clone(&arrival.reader), 0))
                .1 += 1;
            self.stats.submitted += 1;
            let mut live = Live::new(arrival, now);
            if live.left == 0 {
                self.complete(live);
                continue;
            }
            match live.job.map(|(j, _)| j) {
                Some(job) => {
                    // A small query is held briefly: waiting for the queries of other jobs
                    // would cost it more than the read it could share.
                    let patience = if live.work.size() <= SMALL_POINTS {
                        SMALL_GATE_MS
                    } else {
                        f64::INFINITY
                    };
                    let (index, released) = self.jobs.submit_within(job, live.id, now, patience);
                    live.job = index.map(|i| (job, i));
                    self.held.insert(live.id, live);
                    self.release(released);
                }
                None => {
                    let direct = alone && self.queries.is_empty() && self.held.is_empty();
                    self.queue(live, direct);
                }
            }
        }
        for id in inbox.cancels {
            if let Some(live) = self.queries.remove(&id).or_else(|| self.held.remove(&id)) {
                self.stats.cancelled += 1;
                self.forget(live, Outcome::Cancelled);
            }
        }
        let released = self.jobs.expire(now, self.shared.config.job_idle_ms);
        self.release(released);
        true
    }

    /// Moves queries released from their gates into the queues.
    fn release(&mut self, ids: Vec<u64>) {
        for id in ids {
            if let Some(mut live) = self.held.remove(&id) {
                live.released = Some(Instant::now());
                self.queue(live, false);
            }
        }
    }

    /// Puts a query's sub-queries into the workload queues, or serves it directly.
    fn queue(&mut self, mut live: Live, direct: bool) {
        let now = self.now();
        live.arrival = now;
        if direct {
            self.scheduler.direct(live.id);
        } else {
            if let Work::Points(work) = &live.work {
                let grid = AtomGrid {
                    atoms: work
                        .axes
                        .map(|axis| axis.n.div_ceil(work.geometry.atom) as u32),
                    periodic: work.axes.map(|axis| axis.periodic),
                };
                self.workload.set_grid(live.field, grid);
            }
            let cache = self.shared.cache.lock().expect("cache");
            for level in 0..live.levels.len() {
                let step = live.step(level);
                for atom in 0..live.work.atoms() {
                    let code = live.work.code(atom);
                    let cached = cache.contains(&step.atom(code));
                    let entry = Entry {
                        query: live.id,
                        level: level as u8,
                        atom: atom as u32,
                        points: live.work.weight(atom),
                    };
                    self.workload.push(step, code, entry, now, cached);
                }
            }
            drop(cache);
            let small = matches!(live.work, Work::Points(_)) && live.work.size() <= SMALL_POINTS;
            self.scheduler.queued(live.id, small);
        }
        self.queries.insert(live.id, live);
    }

    /// Drops a query that will not complete: its pending points leave the queues (its
    /// entries are skipped when their atoms are served).
    fn forget(&mut self, live: Live, outcome: Outcome) {
        for level in 0..live.levels.len() {
            let step = live.step(level);
            for atom in 0..live.work.atoms() {
                if !live.taken[level][atom] {
                    self.workload
                        .forget_points(step, live.work.code(atom), live.work.weight(atom));
                }
            }
        }
        // A job whose query failed or was cancelled (its client went away) will not go on
        // as planned: it is closed, so that the jobs gated with it stop waiting for it.
        if let Some((job, _)) = live.job {
            let released = self.jobs.close(job);
            self.release(released);
        }
        self.shared
            .pending_points
            .fetch_sub(live.points, Ordering::AcqRel);
        self.query_ended(live.field);
        self.ended.push((live.ticket, outcome));
    }

    /// A query of `field` ended here. With its last one the engine lets go of the field's
    /// reader; a field made again meanwhile leaves altogether (the atoms its last batches
    /// cached, its grid): its number is never given again.
    fn query_ended(&mut self, field: u32) {
        let Some((_, queries)) = self.readers.get_mut(&field) else {
            return;
        };
        *queries -= 1;
        if *queries > 0 {
            return;
        }
        self.readers.remove(&field);
        if self.shared.fields.lock().expect("fields").is_current(field) {
            return;
        }
        self.workload.forget_grid(field);
        let gone = self.shared.cache.lock().expect("cache").forget_field(field);
        for key in gone {
            self.workload.set_cached(&key, false);
        }
    }

    /// Chooses the next batch, takes its sub-queries from the queues and starts reading
    /// the atoms not cached.
    fn prepare(&mut self) -> Option<Prepared> {
        let started = Instant::now();
        let prepared = self.choose();
        self.stats.schedule_seconds += started.elapsed().as_secs_f64();
        prepared
    }

    fn choose(&mut self) -> Option<Prepared> {
        loop {
            let Pick { step, codes, serve } = self
                .scheduler
                .next(&mut self.workload, &mut Book(&mut self.queries))?;
            let mut entries: Vec<(u32, Entry)> = Vec::new();
            for (slot, &code) in codes.iter().enumerate() {
                let slot = slot as u32;
                match serve {
                    Serve::All => {
                        if let Some(queue) = self.workload.take_atom(step, code) {
                            entries.extend(queue.entries.into_iter().map(|e| (slot, e)));
                        }
                    }
                    Serve::Only(q) => {
                        entries.extend(
                            self.workload
                                .take_query(step, code, q)
                                .into_iter()
                                .map(|e| (slot, e)),
                        );
                    }
                    Serve::Direct(q) => {
                        if let Some(live) = self.queries.get(&q) {
                            let atom = live.work.index_of(code);
                            if let (Some(atom), Some(level)) = (atom, live.level_of(step)) {
                                let entry = Entry {
                                    query: q,
                                    level: level as u8,
                                    atom: atom as u32,
                                    points: live.work.weight(atom),
                                };
                                entries.push((slot, entry));
                            }
                        }
                    }
                }
            }
            // Entries of queries that were cancelled or failed are dropped here.
            entries.retain(|(_, e)| self.queries.contains_key(&e.query));
            for (_, e) in &entries {
                if let Some(live) = self.queries.get_mut(&e.query) {
                    live.mark_taken(e.level as usize, e.atom as usize);
                }
            }
            if entries.is_empty() {
                continue;
            }
            let Some(reader) = self.readers.get(&step.field).map(|(r, _)| Arc::clone(r)) else {
                continue;
            };
            let per_shard = reader.geometry().atoms_per_side();
            let mut data = Vec::with_capacity(codes.len());
            let mut hit = Vec::with_capacity(codes.len());
            let mut shards: FxHashMap<ShardPos, Vec<([usize; 3], AtomKey)>> = FxHashMap::default();
            let mut cache = self.shared.cache.lock().expect("cache");
            for &code in &codes {
                let key = step.atom(code);
                let cached = cache.get(&key);
                if cached.is_none() {
                    let (x, y, z) = crate::storage::morton::decode(code);
                    let coords = [x, y, z].map(|v| v as usize);
                    let shard = coords.map(|v| v / per_shard);
                    shards
                        .entry(shard)
                        .or_default()
                        .push((coords.map(|v| v % per_shard), key));
                }
                hit.push(cached.is_some());
                data.push(cached);
            }
            let generation = cache.generation();
            drop(cache);
            let readers = self.io.threads();
            let reads: Vec<ShardRead> = shards
                .into_iter()
                .flat_map(|(shard, atoms)| {
                    let reader = Arc::clone(&reader);
                    split_for_readers(atoms, readers).map(move |atoms| ShardRead {
                        reader: Arc::clone(&reader),
                        t: step.t as usize,
                        shard,
                        atoms,
                    })
                })
                .collect();
            let loading = self.io.load(reads);
            return Some(Prepared {
                codes,
                data,
                hit,
                entries,
                loading,
                generation,
            });
        }
    }

    /// Waits for a batch's reads and caches what was read. Returns the batch, its atoms
    /// by slot, and the slots that failed.
    #[allow(clippy::type_complexity)]
    fn load(&mut self, mut batch: Prepared) -> (Prepared, Vec<AtomData>, FxHashMap<u32, Error>) {
        let loading = std::mem::replace(&mut batch.loading, self.io.load(Vec::new()));
        let waited = Instant::now();
        let (atoms, counts, seconds) = loading.wait();
        self.stats.read_wait_seconds += waited.elapsed().as_secs_f64();
        let slot_of: FxHashMap<u64, u32> = batch
            .codes
            .iter()
            .enumerate()
            .map(|(slot, &code)| (code, slot as u32))
            .collect();
        let mut failed = FxHashMap::default();
        let read = atoms.len() as u64;
        // Only URC ranks its victims.
        let next_steps: FxHashSet<(u32, u32)> =
            if self.shared.config.cache_policy == PolicyKind::Urc {
                self.jobs.next_steps().collect()
            } else {
                FxHashSet::default()
            };
        let mut cache = self.shared.cache.lock().expect("cache");
        let cacheable = cache.generation() == batch.generation;
        for (key, result) in atoms {
            let slot = slot_of[&key.code];
            match result {
                Ok(atom) if !cacheable => batch.data[slot as usize] = Some(atom),
                Ok(atom) => {
                    let ranking = WithNextSteps {
                        workload: &self.workload,
                        next_steps: &next_steps,
                    };
                    let evicted = cache.insert(key, Arc::clone(&atom), &ranking);
                    for gone in evicted {
                        self.workload.set_cached(&gone, false);
                    }
                    if cache.contains(&key) {
                        self.workload.set_cached(&key, true);
                    }
                    batch.data[slot as usize] = Some(atom);
                }
                Err(e) => {
                    failed.insert(slot, e);
                }
            }
        }
        drop(cache);
        if read > 0 {
            self.cost.observe_reads(read, seconds * 1e3);
        }
        self.stats.atoms_read += read;
        self.stats.read_requests += counts.requests;
        self.stats.bytes_read += counts.bytes;
        let empty: AtomData = Arc::from(Vec::<f32>::new());
        let data = batch
            .data
            .iter()
            .map(|d| d.clone().unwrap_or_else(|| Arc::clone(&empty)))
            .collect();
        (batch, data, failed)
    }

    /// Serves the batch's sub-queries and completes the queries that are done.
    fn compute(&mut self, batch: Prepared, data: Vec<AtomData>, failed: FxHashMap<u32, Error>) {
        let started = Instant::now();
        // Queries that needed an atom that could not be read fail, alone.
        for (slot, e) in &batch.entries {
            if let Some(error) = failed.get(slot) {
                if let Some(live) = self.queries.remove(&e.query) {
                    self.stats.failed += 1;
                    self.forget(live, Outcome::Failed(error.duplicate()));
                }
            }
        }
        let mut by_query: FxHashMap<u64, (usize, Vec<(u32, u32)>)> = FxHashMap::default();
        for &(slot, e) in &batch.entries {
            if self.queries.contains_key(&e.query) {
                let part = by_query
                    .entry(e.query)
                    .or_insert((e.level as usize, Vec::new()));
                part.1.push((e.atom, slot));
            }
        }
        let mut lives: Vec<Live> = by_query
            .keys()
            .filter_map(|q| self.queries.remove(q))
            .collect();
        let mut parts: Vec<Part<'_>> = Vec::with_capacity(lives.len());
        let mut served: Vec<(usize, u64)> = Vec::with_capacity(lives.len());
        let mut step = None;
        for live in lives.iter_mut() {
            let (level, atoms) = by_query.remove(&live.id).expect("grouped");
            step.get_or_insert(live.step(level));
            let hits = atoms
                .iter()
                .filter(|&&(_, slot)| batch.hit[slot as usize])
                .count() as u64;
            served.push((atoms.len(), hits));
            parts.push(Part {
                work: &live.work,
                progress: &mut live.progress,
                scale: live.levels[level].weight,
                atoms,
                narrow: live.narrow,
            });
        }
        #[cfg(test)]
        let poisoned =
            step.is_some_and(|s| s.t == self.shared.panic_on_step.load(Ordering::Relaxed));
        // A panic while serving the batch (a bug, an atom that breaks an assumption) fails
        // the queries of this batch alone; the engine thread goes on serving the others.
        let added = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            #[cfg(test)]
            if poisoned {
                panic!("test hook: a poisoned batch");
            }
            crate::engine::kernel_pool::run(|| execute(&mut parts, &data))
        }));
        drop(parts);
        let added = match added {
            Ok(added) => added,
            Err(payload) => {
                let error = batch_panic(&*payload, step, batch.codes.len(), lives.len());
                for live in lives {
                    self.stats.failed += 1;
                    self.forget(live, Outcome::Failed(error.duplicate()));
                }
                return;
            }
        };
        let seconds = started.elapsed().as_secs_f64();
        self.cost
            .observe_compute(added.contributions, seconds * 1e3);
        self.stats.contributions += added.contributions;
        self.stats.block_points += added.from_home_blocks;
        self.stats.block_points_shared += added.across_queries;
        self.stats.batches += 1;
        self.stats.busy_seconds += seconds;
        self.stats
            .batch_sizes
            .observe(&BATCH_BOUNDS, batch.codes.len() as f64);
        for (mut live, (n, hits)) in lives.into_iter().zip(served) {
            live.left -= n;
            live.stats.atoms += n as u64;
            live.stats.batches += 1;
            // Its own atoms that the batch read (not from the cache); an atom read once for
            // several queries counts for each of them.
            live.stats.atoms_read += n as u64 - hits;
            live.stats.cache_hits += hits;
            if live.left == 0 {
                self.complete(live);
            } else {
                self.queries.insert(live.id, live);
            }
        }
        let counters = self.shared.cache.lock().expect("cache").counters();
        self.stats.cache_hits = counters.hits;
        self.stats.cache_misses = counters.misses;
        self.stats.cache_evictions = counters.evictions;
    }

    /// Hands a finished query its values.
    fn complete(&mut self, live: Live) {
        let response = live.submitted.elapsed().as_secs_f64();
        let mut stats = live.stats;
        stats.response_seconds = response;
        stats.contributions = live.work.contributions() * live.levels.len() as u64;
        if let Some(released) = live.released {
            stats.gated_seconds = (released - live.submitted).as_secs_f64();
        }
        self.stats.completed += 1;
        self.stats.response[size_class(live.work.size())].observe(&RESPONSE_BOUNDS, response);
        self.shared
            .pending_points
            .fetch_sub(live.points, Ordering::AcqRel);
        self.query_ended(live.field);
        let values = match (live.work, live.progress) {
            (Work::Points(work), Progress::Points { sums, .. }) => Values::Sums {
                sums,
                out_len: work.out_len(),
                order: PointWork::into_order(work),
            },
            (Work::Cutout(_), Progress::Cutout { values }) => Values::Cutout(values),
            _ => unreachable!("a query's progress matches its work"),
        };
        self.ended.push((live.ticket, Outcome::Done(values, stats)));
        if let Some((job, index)) = live.job {
            let released = self.jobs.completed(job, index, self.now());
            self.release(released);
        }
        self.end_of_run(response);
    }

    /// Counts a completed query into the run; at the end of a run α, the cache's segments
    /// and the ranking of the queues are updated.
    fn end_of_run(&mut self, response: f64) {
        self.run.0 += 1;
        self.run.1 += response;
        if self.run.0 < self.shared.config.run_queries.max(1) {
            return;
        }
        let elapsed = self.run.2.elapsed().as_secs_f64().max(1e-9);
        let alpha = self
            .bias
            .end_run(self.run.1 / self.run.0 as f64, self.run.0 as f64 / elapsed);
        self.shared.cache.lock().expect("cache").end_run();
        self.workload.reweigh(alpha, self.cost);
        self.run = (0, 0.0, Instant::now());
    }

    fn publish(&mut self) {
        let s = &mut self.stats;
        {
            let cache = self.shared.cache.lock().expect("cache");
            s.cache_bytes = cache.used();
            s.cache_atoms = cache.len();
        }
        s.pending = (self.queries.len() + self.held.len()) as u64;
        s.held = self.held.len() as u64;
        s.queued_subqueries = self.workload.entries();
        s.queued_atoms = self.workload.atoms() as u64;
        s.alpha = self.bias.alpha();
        s.t_b_ms = self.cost.t_b;
        s.t_m_ms = self.cost.t_m;
        s.jobs = self.jobs.len() as u64;
        s.gating_edges = self.jobs.edges() as u64;
        s.gating = self.jobs.counters();
        *self.shared.published.lock().expect("stats") = s.clone();
        for (ticket, outcome) in self.ended.drain(..) {
            ticket.finish(outcome);
        }
    }
}

/// The message a panic was raised with.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// The error of the queries of a batch whose serving panicked.
fn batch_panic(
    payload: &(dyn std::any::Any + Send),
    step: Option<StepKey>,
    atoms: usize,
    queries: usize,
) -> Error {
    let message = panic_message(payload);
    let at = step.map_or(String::new(), |s| format!(" of time step {}", s.t));
    Error::Internal(format!(
        "the node engine failed while serving a batch of {atoms} atoms{at} ({message}); the \
         {queries} queries of that batch failed, the engine goes on serving the others — retry, \
         and report this if it happens again"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::geometry::FieldGeometry;
    use crate::storage::shard::{ChunkCodec, IndexLocation};
    use crate::storage::writer::write_step;

    const TIMES: [f64; 3] = [0.0, 1.0, 2.0];

    #[test]
    fn a_shards_atoms_are_split_between_the_readers_in_runs_of_consecutive_atoms() {
        let split = |n: usize, readers: usize| -> Vec<Vec<usize>> {
            split_for_readers((0..n).collect(), readers).collect()
        };
        // Few atoms: one reader takes them all (a split would cost requests, gain nothing).
        assert_eq!(
            split(MIN_PIECE, 4),
            vec![(0..MIN_PIECE).collect::<Vec<_>>()]
        );
        assert_eq!(split(3, 4).len(), 1);
        // Enough for two pieces, not four.
        assert_eq!(split(2 * MIN_PIECE, 4).len(), 2);
        // Many: one run per reader, in order, every atom once.
        let pieces = split(10 * MIN_PIECE + 3, 4);
        assert_eq!(pieces.len(), 4);
        assert_eq!(pieces.concat(), (0..10 * MIN_PIECE + 3).collect::<Vec<_>>());
        assert!(pieces.iter().all(|p| p.len() >= MIN_PIECE));
        // One reader, or nothing to read.
        assert_eq!(split(100, 1).len(), 1);
        assert!(split(0, 4).is_empty());
    }

    fn field() -> (tempfile::TempDir, Arc<FieldReader>, [Axis; 3]) {
        let dir = tempfile::tempdir().unwrap();
        let geometry = FieldGeometry::new([16, 16, 16], 1, 4, 8).unwrap();
        for t in 0..TIMES.len() {
            let data: Vec<f32> = (0..16 * 16 * 16).map(|i| (i % 97 + t) as f32).collect();
            write_step(dir.path(), &geometry, None, t, &data, false).unwrap();
        }
        let reader = Arc::new(FieldReader::new(
            dir.path(),
            geometry,
            ChunkCodec::TURBDB,
            IndexLocation::End,
        ));
        let axes = [Axis::unit(16, true); 3];
        (dir, reader, axes)
    }

    /// A reader of the field `made` written in `dir`.
    fn reader_of(dir: &std::path::Path, geometry: &FieldGeometry, made: u64) -> Arc<FieldReader> {
        Arc::new(
            FieldReader::new(
                dir,
                geometry.clone(),
                ChunkCodec::TURBDB,
                IndexLocation::End,
            )
            .with_field_id(Some(made)),
        )
    }

    fn at(engine: &NodeEngine, reader: &Arc<FieldReader>, axes: [Axis; 3], time: f64) -> Ticket {
        let points: Vec<[f64; 3]> = (0..50).map(|i| [i as f64 * 0.3, 2.5, 7.25]).collect();
        let query = PointQuery {
            points: &points,
            axes,
            times: &TIMES,
            time,
            method: Method::Lagrange(4),
            operator: Operator::Field,
            temporal: Temporal::None,
            partitions: None,
            job: None,
            narrow: false,
            stop: None,
        };
        engine.submit_points(reader, &query, None).unwrap()
    }

    /// The shard files under `root` deleted from disk and still mapped by this process.
    fn deleted_mappings_under(root: &std::path::Path) -> usize {
        let root = root.to_string_lossy();
        std::fs::read_to_string("/proc/self/maps").map_or(0, |maps| {
            maps.lines()
                .filter(|l| l.contains(&*root) && l.ends_with("(deleted)"))
                .count()
        })
    }

    /// A dataset created again over itself, night after night: the engine answers from the
    /// new field and lets go of the old one's reader (and the deleted shard files it kept
    /// mapped: 20 more mappings per re-creation of 10 fields × 2 steps) and cached atoms.
    #[test]
    fn a_field_made_again_lets_the_old_ones_reader_mappings_and_atoms_go() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("u");
        let geometry = FieldGeometry::new([16, 16, 16], 1, 4, 8).unwrap();
        let atoms_of_a_field = TIMES.len() * (16 / geometry.atom).pow(3);
        let axes = [Axis::unit(16, true); 3];
        let engine = NodeEngine::new(EngineConfig::default());
        let mut before: Option<Weak<FieldReader>> = None;
        for made in 0..20u64 {
            if dir.exists() {
                std::fs::remove_dir_all(&dir).unwrap();
            }
            std::fs::create_dir(&dir).unwrap();
            for t in 0..TIMES.len() {
                let data = vec![(made * 10 + t as u64) as f32; 16 * 16 * 16];
                write_step(&dir, &geometry, Some(made), t, &data, false).unwrap();
            }
            let reader = reader_of(&dir, &geometry, made);
            for (t, &time) in TIMES.iter().enumerate() {
                // Read by a batch, then served from the cache.
                for _ in 0..2 {
                    let values = match at(&engine, &reader, axes, time).outcome() {
                        Outcome::Done(values, _) => values.into_sums(),
                        outcome => panic!("ended as {outcome:?}"),
                    };
                    let want = (made * 10 + t as u64) as f64;
                    assert!(
                        values.iter().all(|v| (v - want).abs() < 1e-6),
                        "made {made}, step {t}: {values:?} against {want}"
                    );
                }
            }
            if let Some(old) = before.take() {
                assert!(
                    old.upgrade().is_none(),
                    "made {made}: the replaced reader is held"
                );
            }
            before = Some(Arc::downgrade(&reader));
            drop(reader);
            assert_eq!(engine.shared.fields.lock().unwrap().len(), 1);
            assert_eq!(deleted_mappings_under(root.path()), 0, "made {made}");
            let cached = engine.stats().cache_atoms;
            assert!(
                cached <= atoms_of_a_field,
                "made {made}: {cached} atoms cached"
            );
        }
    }

    /// A dataset deleted and never made again: once told its directory is gone, the engine
    /// lets go of its fields' readers (with the deleted shard files they kept mapped until
    /// the engine went) and cached atoms; the fields of other directories stay.
    #[test]
    fn a_directory_gone_lets_its_fields_readers_mappings_and_atoms_go() {
        let root = tempfile::tempdir().unwrap();
        let geometry = FieldGeometry::new([16, 16, 16], 1, 4, 8).unwrap();
        let axes = [Axis::unit(16, true); 3];
        let engine = NodeEngine::new(EngineConfig::default());
        let mut readers = Vec::new();
        for name in ["gone", "kept"] {
            let dir = root.path().join(name).join("u");
            std::fs::create_dir_all(&dir).unwrap();
            for t in 0..TIMES.len() {
                write_step(&dir, &geometry, Some(1), t, &vec![1.0; 16 * 16 * 16], false).unwrap();
            }
            let reader = reader_of(&dir, &geometry, 1);
            assert!(matches!(
                at(&engine, &reader, axes, TIMES[0]).outcome(),
                Outcome::Done(..)
            ));
            readers.push(Arc::downgrade(&reader));
        }
        let cached = engine.stats().cache_atoms;
        std::fs::remove_dir_all(root.path().join("gone")).unwrap();
        assert!(deleted_mappings_under(root.path()) > 0);
        assert_eq!(engine.forget_directory(&root.path().join("gone")), 1);
        assert_eq!(engine.forget_directory(&root.path().join("gone")), 0);
        assert!(
            readers[0].upgrade().is_none(),
            "the gone directory's reader is held"
        );
        assert!(
            readers[1].upgrade().is_some(),
            "the other directory's reader was let go"
        );
        assert_eq!(deleted_mappings_under(root.path()), 0);
        assert!(engine.stats().cache_atoms < cached);
        assert_eq!(engine.shared.fields.lock().unwrap().len(), 1);
    }

    /// Queries in flight on a field when it is made again end on the old field's reader
    /// (with the old values, or refused where they open a shard of the new field: a reader
    /// opens each shard at its path), the new field's queries answer the new values, and
    /// the old reader goes once the old queries are done.
    #[test]
    fn queries_in_flight_when_their_field_is_made_again_end_and_its_reader_goes() {
        let root = tempfile::tempdir().unwrap();
        let geometry = FieldGeometry::new([16, 16, 16], 1, 4, 8).unwrap();
        let axes = [Axis::unit(16, true); 3];
        // Made again in place (as a copy updated file by file): each shard renamed over.
        let make = |made: u64| {
            for t in 0..TIMES.len() {
                let data = vec![(made * 10 + t as u64) as f32; 16 * 16 * 16];
                write_step(root.path(), &geometry, Some(made), t, &data, false).unwrap();
            }
            reader_of(root.path(), &geometry, made)
        };
        // Nothing cached: every query waits for a batch.
        let engine = NodeEngine::new(EngineConfig {
            cache_bytes: 0,
            ..EngineConfig::default()
        });
        let old = make(1);
        let in_flight: Vec<(usize, Ticket)> = (0..12)
            .map(|k| {
                (
                    k % TIMES.len(),
                    at(&engine, &old, axes, TIMES[k % TIMES.len()]),
                )
            })
            .collect();
        let new = make(2);
        let fresh: Vec<(usize, Ticket)> = (0..6)
            .map(|k| {
                (
                    k % TIMES.len(),
                    at(&engine, &new, axes, TIMES[k % TIMES.len()]),
                )
            })
            .collect();
        for (made, tickets) in [(1, in_flight), (2, fresh)] {
            for (t, ticket) in tickets {
                let want = (made * 10 + t) as f64;
                match ticket.outcome() {
                    Outcome::Done(values, _) => {
                        let values = values.into_sums();
                        assert!(
                            values.iter().all(|v| (v - want).abs() < 1e-6),
                            "field {made}, step {t}: {values:?}"
                        );
                    }
                    Outcome::Failed(Error::Corrupt { message, .. }) if made == 1 => {
                        assert!(message.contains("of id 0000000000000002"), "{message}");
                    }
                    outcome => panic!("field {made}, step {t}: ended as {outcome:?}"),
                }
            }
        }
        let replaced = Arc::downgrade(&old);
        drop(old);
        // The engine's thread lets go as each query ends, before its ticket is told.
        assert!(replaced.upgrade().is_none(), "the replaced reader is held");
        let stats = engine.stats();
        assert_eq!((stats.pending, stats.pending_points), (0, 0));
    }

    #[test]
    fn a_panic_in_a_query_served_alone_fails_it_alone_and_the_engine_goes_on() {
        let (_dir, reader, axes) = field();
        let engine = NodeEngine::new(EngineConfig {
            alone_points: 10,
            ..EngineConfig::default()
        });
        engine.shared.panic_on_step.store(1, Ordering::Relaxed);
        match at(&engine, &reader, axes, 1.0).outcome() {
            Outcome::Failed(Error::Internal(message)) => {
                assert!(message.contains("50 points alone"), "{message}");
                assert!(message.contains("test hook: a poisoned batch"), "{message}");
            }
            outcome => panic!("ended as {outcome:?}"),
        }
        assert!(matches!(
            at(&engine, &reader, axes, 0.0).outcome(),
            Outcome::Done(..)
        ));
        engine
            .shared
            .panic_on_step
            .store(u32::MAX, Ordering::Relaxed);
        assert!(matches!(
            at(&engine, &reader, axes, 1.0).outcome(),
            Outcome::Done(..)
        ));
        let stats = engine.stats();
        assert_eq!((stats.served_alone, stats.failed), (2, 1));
        // The claim on the engine was given back, the panic's too.
        assert_eq!(engine.shared.pending_points.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_panic_in_a_batch_fails_only_its_queries_and_the_engine_goes_on() {
        let (_dir, reader, axes) = field();
        let engine = NodeEngine::new(EngineConfig::default());
        let healthy = at(&engine, &reader, axes, 0.0).outcome();
        assert!(matches!(healthy, Outcome::Done(..)));
        engine.shared.panic_on_step.store(1, Ordering::Relaxed);
        let tickets: Vec<Ticket> = [0.0, 1.0, 2.0, 1.0]
            .iter()
            .map(|&t| at(&engine, &reader, axes, t))
            .collect();
        let outcomes: Vec<Outcome> = tickets.into_iter().map(Ticket::outcome).collect();
        for (k, outcome) in outcomes.iter().enumerate() {
            match (k, outcome) {
                (1 | 3, Outcome::Failed(Error::Internal(message))) => {
                    assert!(message.contains("time step 1"), "{message}");
                    assert!(message.contains("test hook: a poisoned batch"), "{message}");
                }
                (0 | 2, Outcome::Done(..)) => {}
                _ => panic!("query {k} ended as {outcome:?}"),
            }
        }
        // The engine thread survived: the step that panicked is served once it is sound.
        engine
            .shared
            .panic_on_step
            .store(u32::MAX, Ordering::Relaxed);
        assert!(matches!(
            at(&engine, &reader, axes, 1.0).outcome(),
            Outcome::Done(..)
        ));
        std::thread::sleep(Duration::from_millis(20));
        let stats = engine.stats();
        assert_eq!(
            (stats.failed, stats.pending, stats.pending_points),
            (2, 0, 0)
        );
    }

    /// A large query runs alone only while nothing is pending; one that arrives while the
    /// engine holds work joins the queues (and shares their reads), with the same answer.
    #[test]
    fn a_large_query_runs_alone_only_on_an_idle_engine() {
        let (_dir, reader, axes) = field();
        let engine = NodeEngine::new(EngineConfig {
            alone_points: 40,
            ..EngineConfig::default()
        });
        let answer = |ticket: Ticket| match ticket.outcome() {
            Outcome::Done(values, _) => values.into_sums(),
            other => panic!("{other:?}"),
        };
        let idle = answer(at(&engine, &reader, axes, 1.0));
        assert_eq!(engine.stats().served_alone, 1);
        // Work pending (as if another query were queued): the same query is cut and queued.
        engine.shared.pending_points.store(7, Ordering::Relaxed);
        let busy = answer(at(&engine, &reader, axes, 1.0));
        let stats = engine.stats();
        assert_eq!((stats.served_alone, stats.completed), (1, 2));
        assert_eq!(
            stats.pending_points, 7,
            "the alone query gave back what it claimed"
        );
        assert_eq!(idle.len(), busy.len());
        for (a, b) in idle.iter().zip(&busy) {
            assert!((a - b).abs() <= 1e-12 * (1.0 + a.abs()), "{a} against {b}");
        }
    }

    #[test]
    fn each_query_counts_the_reads_of_its_own_atoms_and_the_engine_each_read_once() {
        let (_dir, reader, axes) = field();
        let engine = NodeEngine::new(EngineConfig {
            cache_bytes: 0,
            ..EngineConfig::default()
        });
        // Queries handed in together share batches; each was credited the whole batch's reads.
        let tickets: Vec<Ticket> = (0..6).map(|_| at(&engine, &reader, axes, 1.0)).collect();
        let mut summed = 0;
        for ticket in tickets {
            match ticket.outcome() {
                Outcome::Done(_, stats) => {
                    assert_eq!(
                        stats.atoms_read,
                        stats.atoms - stats.cache_hits,
                        "{stats:?}"
                    );
                    summed += stats.atoms_read;
                }
                outcome => panic!("ended as {outcome:?}"),
            }
        }
        let read = engine.stats().atoms_read;
        assert!(read > 0 && read <= summed, "{read} {summed}");
    }

    #[test]
    fn the_engine_thread_accounts_for_its_reads_scheduling_and_idle_time() {
        let (_dir, reader, axes) = field();
        let engine = NodeEngine::new(EngineConfig {
            cache_bytes: 0,
            ..EngineConfig::default()
        });
        let answered = at(&engine, &reader, axes, 0.0).outcome();
        assert!(matches!(answered, Outcome::Done(..)));
        // Nothing more to do: the engine's thread sleeps, and says so.
        std::thread::sleep(Duration::from_millis(30));
        at(&engine, &reader, axes, 1.0).outcome();
        std::thread::sleep(Duration::from_millis(20));
        let stats = engine.stats();
        assert!(stats.atoms_read > 0);
        assert!(stats.read_wait_seconds > 0.0, "{stats:?}");
        assert!(stats.schedule_seconds > 0.0, "{stats:?}");
        assert!(stats.idle_seconds >= 0.02, "{stats:?}");
    }
}
