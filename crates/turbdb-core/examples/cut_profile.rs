//! Profiling harness for the cut of a point query into sub-queries (`PointWork::new`), which
//! every query through the node engine pays before any sum: lag8 (or `METHOD`) on a 128³
//! three-component field in atoms of 8, at N points either uniform over the box or, as most
//! queries of `bench/workload.py`'s trace, spread about a centre by `SPREAD` grid spacings
//! (a normal distribution, wrapped). Prints the best and median nanoseconds a point. Run
//! it under `perf record` to see where the time goes:
//!
//!     cargo run --release -p turbdb-core --example cut_profile -- [N] [reps] [SPREAD|uniform] [method]

#[path = "support/uniform.rs"]
mod uniform;

use std::time::Instant;

use turbdb_core::engine::subquery::PointWork;
use turbdb_core::{Axis, FieldGeometry, Method, Operator};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(1_000, |s| s.parse().unwrap());
    let reps: usize = args.get(2).map_or(2_000, |s| s.parse().unwrap());
    let spread: Option<f64> = args
        .get(3)
        .filter(|s| s.as_str() != "uniform")
        .map(|s| s.parse().unwrap());
    let method = Method::parse(args.get(4).map_or("lag8", |s| s.as_str())).unwrap();
    let (grid, atom) = (128, 8);
    let geometry = FieldGeometry::new([grid; 3], 3, atom, 64).unwrap();
    let axes = [Axis::unit(grid, true); 3];
    let mut next = uniform::uniform();
    let side = grid as f64;
    let centre = [0; 3].map(|_| next() * side);
    let points: Vec<[f64; 3]> = (0..n)
        .map(|_| match spread {
            None => [0; 3].map(|_| next() * side),
            // Box–Muller: a normal deviate from two uniform ones.
            Some(spread) => std::array::from_fn(|k| {
                let (u, v) = (next().max(1e-300), next());
                let normal = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
                (centre[k] + spread * normal).rem_euclid(side)
            }),
        })
        .collect();
    let mut times = Vec::with_capacity(reps);
    let mut atoms = 0;
    for _ in 0..reps {
        let start = Instant::now();
        let work = PointWork::new(
            &points,
            method,
            Operator::Field,
            axes,
            geometry.clone(),
            None,
        )
        .unwrap();
        times.push(start.elapsed().as_secs_f64());
        atoms = work.atoms.len();
        drop(work);
    }
    times.sort_by(f64::total_cmp);
    let per_point = |t: f64| t / n as f64 * 1e9;
    println!(
        "cut of {n} points ({}), {atoms} atoms: best {:.0} ns/point, median {:.0} ns/point",
        spread.map_or("uniform".to_string(), |s| format!("spread {s}")),
        per_point(times[0]),
        per_point(times[times.len() / 2]),
    );
}
