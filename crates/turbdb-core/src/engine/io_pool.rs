//! The node engine's readers: a few threads that read the atoms a batch misses, one shard
//! at a time each, so that several requests are in flight at once (direct reads on this
//! machine's disk run about twice as fast four at a time as one at a time) and so that the
//! next batch is read while the current one is computed.

use std::collections::VecDeque;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::engine::accumulate::PADDING;
use crate::engine::cache::{AtomData, AtomKey};
use crate::error::Result;
use crate::storage::direct::{read_atoms, IoMode, ReadCounts};
use crate::storage::geometry::ShardPos;
use crate::storage::reader::FieldReader;

/// The atoms of one shard to read.
pub struct ShardRead {
    /// The field's reader.
    pub reader: Arc<FieldReader>,
    /// Time index.
    pub t: usize,
    /// The shard.
    pub shard: ShardPos,
    /// The atoms: their place in the shard and their key.
    pub atoms: Vec<([usize; 3], AtomKey)>,
}

/// What one shard read gave.
pub struct ShardResult {
    /// Each atom's values, or why it could not be read.
    pub atoms: Vec<(AtomKey, Result<AtomData>)>,
    /// Requests and bytes.
    pub counts: ReadCounts,
}

type Job = (ShardRead, Sender<ShardResult>);

struct Queue {
    jobs: Mutex<(VecDeque<Job>, bool)>,
    ready: Condvar,
}

/// The reader threads.
pub struct IoPool {
    queue: Arc<Queue>,
    threads: Vec<JoinHandle<()>>,
    mode: IoMode,
}

/// Reads under way for one batch.
pub struct Loading {
    results: Receiver<ShardResult>,
    expected: usize,
    started: Instant,
}

impl Loading {
    /// Waits for every shard read; returns the atoms, the counts and the seconds it took
    /// from dispatch.
    pub fn wait(self) -> (Vec<(AtomKey, Result<AtomData>)>, ReadCounts, f64) {
        let mut atoms = Vec::new();
        let mut counts = ReadCounts::default();
        for _ in 0..self.expected {
            let Ok(result) = self.results.recv() else {
                break;
            };
            atoms.extend(result.atoms);
            counts.requests += result.counts.requests;
            counts.bytes += result.counts.bytes;
        }
        (atoms, counts, self.started.elapsed().as_secs_f64())
    }

    /// Whether no read was needed.
    pub fn is_empty(&self) -> bool {
        self.expected == 0
    }
}

impl IoPool {
    /// `threads` readers using `mode`.
    pub fn new(threads: usize, mode: IoMode) -> Self {
        let queue = Arc::new(Queue {
            jobs: Mutex::new((VecDeque::new(), false)),
            ready: Condvar::new(),
        });
        let threads = (0..threads.max(1))
            .map(|i| {
                let queue = Arc::clone(&queue);
                std::thread::Builder::new()
                    .name(format!("turbdb-io-{i}"))
                    .spawn(move || work(&queue, mode))
                    .expect("spawn a reader thread")
            })
            .collect();
        Self {
            queue,
            threads,
            mode,
        }
    }

    /// How many reader threads there are.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// How it reads.
    pub fn mode(&self) -> IoMode {
        self.mode
    }

    /// Starts reading `shards`.
    pub fn load(&self, shards: Vec<ShardRead>) -> Loading {
        let (send, results) = channel();
        let expected = shards.len();
        if expected > 0 {
            let mut jobs = self.queue.jobs.lock().expect("io queue");
            for shard in shards {
                jobs.0.push_back((shard, send.clone()));
            }
            drop(jobs);
            self.queue.ready.notify_all();
        }
        Loading {
            results,
            expected,
            started: Instant::now(),
        }
    }
}

impl Drop for IoPool {
    fn drop(&mut self) {
        self.queue.jobs.lock().expect("io queue").1 = true;
        self.queue.ready.notify_all();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn work(queue: &Queue, mode: IoMode) {
    loop {
        let (job, reply) = {
            let mut jobs = queue.jobs.lock().expect("io queue");
            loop {
                if let Some(job) = jobs.0.pop_front() {
                    break job;
                }
                if jobs.1 {
                    return;
                }
                jobs = queue.ready.wait(jobs).expect("io queue");
            }
        };
        let locals: Vec<[usize; 3]> = job.atoms.iter().map(|a| a.0).collect();
        let mut atoms: Vec<(AtomKey, Result<AtomData>)> = Vec::with_capacity(locals.len());
        let mut counts = ReadCounts::default();
        read_atoms(
            &job.reader,
            job.t,
            job.shard,
            &locals,
            PADDING,
            mode,
            &mut counts,
            |i, result| {
                atoms.push((job.atoms[i].1, result));
            },
        );
        let _ = reply.send(ShardResult { atoms, counts });
    }
}
