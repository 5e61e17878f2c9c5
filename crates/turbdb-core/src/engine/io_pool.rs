//! The node engine's readers: a few threads that read the atoms a batch misses, one shard
//! at a time each, so that several requests are in flight at once (direct reads on this
//! machine's disk run about twice as fast four at a time as one at a time) and so that the
//! next batch is read while the current one is computed.

use std::collections::VecDeque;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Barrier, Condvar, Mutex};
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
    /// `threads` readers using `mode`, each started (and so named) when this returns.
    pub fn new(threads: usize, mode: IoMode) -> Self {
        let queue = Arc::new(Queue {
            jobs: Mutex::new((VecDeque::new(), false)),
            ready: Condvar::new(),
        });
        let count = threads.max(1);
        // A new thread wears its creator's name (the engine's) until it runs and names
        // itself; on a busy machine that took over a second, and `top -H` or a test
        // reading /proc counted readers as engine threads meanwhile.
        let started = Arc::new(Barrier::new(count + 1));
        let threads = (0..count)
            .map(|i| {
                let (queue, started) = (Arc::clone(&queue), Arc::clone(&started));
                std::thread::Builder::new()
                    .name(format!("turbdb-io-{i}"))
                    .spawn(move || {
                        started.wait();
                        work(&queue, mode)
                    })
                    .expect("spawn a reader thread")
            })
            .collect();
        started.wait();
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The names of this process's threads, as `top -H` and `/proc` show them.
    fn thread_names() -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .expect("/proc/self/task")
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .map(|name| name.trim().to_owned())
            .collect()
    }

    #[test]
    fn every_reader_wears_its_own_name_once_the_pool_is_made() {
        // As the engine does: a named thread starts the readers. Many readers, so that
        // the last ones would often not have run yet if `new` did not wait for them.
        let creator = "pool-maker-test";
        let names = std::thread::Builder::new()
            .name(creator.into())
            .spawn(|| {
                let pool = IoPool::new(32, IoMode::Buffered);
                let names = thread_names();
                drop(pool);
                names
            })
            .unwrap()
            .join()
            .unwrap();
        let wearing = names.iter().filter(|n| *n == creator).count();
        assert_eq!(wearing, 1, "readers wore their creator's name: {names:?}");
        for i in 0..32 {
            assert!(names.contains(&format!("turbdb-io-{i}")), "{names:?}");
        }
    }
}
