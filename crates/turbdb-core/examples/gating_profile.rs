//! Profiling harness for job declarations (`JobGraph::declare`), which the node engine's one
//! thread pays before any query of the job: JOBS jobs of LEN queries each, all over the same
//! PERIOD time steps in turn (so every pair of jobs is aligned in step and gated query by
//! query: the worst case for the alignments and the deadlock check). Prints each tenth
//! declaration's time and the edges made, then the total. Run it under `perf record` to see
//! where the time goes:
//!
//!     cargo run --release -p turbdb-core --example gating_profile -- [JOBS] [LEN] [PERIOD]

use std::time::Instant;

use turbdb_core::engine::jobs::gating::{JobGraph, Region};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |k: usize, default: usize| args.get(k).map_or(default, |s| s.parse().unwrap());
    let (jobs, len, period) = (arg(1, 20), arg(2, 10_000), arg(3, 8) as u32);
    let mut graph = JobGraph::new(true, 1e9);
    let started = Instant::now();
    for k in 0..jobs {
        let plan: Vec<Region> = (0..len as u32)
            .map(|i| Region::new(0, vec![i % period]))
            .collect();
        let declared = Instant::now();
        graph.declare(plan, 0.0);
        if (k + 1) % 10.max(jobs / 10) == 0 || k + 1 == jobs {
            println!(
                "job {:>5}: {:>8.1} ms, {} edges",
                k + 1,
                declared.elapsed().as_secs_f64() * 1e3,
                graph.edges()
            );
        }
    }
    println!(
        "{jobs} jobs of {len} queries over {period} steps declared in {:.3} s",
        started.elapsed().as_secs_f64()
    );
}
