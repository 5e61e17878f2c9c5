//! Profiling harness for a query served whole from cached atoms (the node engine's warm
//! path): lag8 (or `METHOD`) at N uniform points on a 128³ three-component field of atoms
//! held in memory, every atom in one batch, printing nanoseconds per point. Run it under
//! `perf record` to see where the time goes:
//!
//!     cargo run --release -p turbdb-core --example warm_profile -- [N] [reps] [method] [operator]

#[path = "support/uniform.rs"]
mod uniform;

use std::time::Instant;

use turbdb_core::engine::batch::{execute, Part, Progress, Work};
use turbdb_core::engine::cache::{padded, AtomData};
use turbdb_core::engine::subquery::PointWork;
use turbdb_core::{Axis, FieldGeometry, Method, Operator};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(1_000, |s| s.parse().unwrap());
    let reps: usize = args.get(2).map_or(200, |s| s.parse().unwrap());
    let method = Method::parse(args.get(3).map_or("lag8", |s| s.as_str())).unwrap();
    let operator = Operator::parse(args.get(4).map_or("field", |s| s.as_str())).unwrap();
    let (grid, atom) = (128, 8);
    let geometry = FieldGeometry::new([grid; 3], 3, atom, 64).unwrap();
    let axes = [Axis::unit(grid, true); 3];
    let mut next = uniform::uniform();
    let points: Vec<[f64; 3]> = (0..n)
        .map(|_| [0; 3].map(|_| next() * grid as f64))
        .collect();
    // The cut into sub-queries, which every query pays before its compute.
    let mut cut = f64::INFINITY;
    for _ in 0..reps.min(50) {
        let start = Instant::now();
        let work = PointWork::new(&points, method, operator, axes, geometry.clone(), None);
        cut = cut.min(start.elapsed().as_secs_f64());
        drop(work);
    }
    println!(
        "cut into sub-queries: best {:.0} ns/point",
        cut / n as f64 * 1e9
    );
    let work = Work::Points(std::sync::Arc::new(
        PointWork::new(&points, method, operator, axes, geometry.clone(), None).unwrap(),
    ));
    // Atoms allocated one by one, as the cache holds them, in storage order.
    let values = atom * atom * atom * 3;
    let data: Vec<AtomData> = (0..work.atoms())
        .map(|_| padded((0..values).map(|_| next() as f32).collect()))
        .collect();
    let mut best = f64::INFINITY;
    let mut total = 0.0;
    for _ in 0..reps {
        let mut progress = Progress::new(&work);
        let start = Instant::now();
        // A float32 answer, as queries ask by default.
        execute(
            &mut [Part::whole(&work, &mut progress, 1.0).narrow(true)],
            &data,
        );
        let t = start.elapsed().as_secs_f64();
        best = best.min(t);
        total += t;
    }
    println!(
        "{n} points, {} atoms ({} MB): best {:.0} ns/point, mean {:.0} ns/point",
        work.atoms(),
        (work.atoms() * values * 4) >> 20,
        best / n as f64 * 1e9,
        total / reps as f64 / n as f64 * 1e9
    );
}
