//! Profiling harness for the streaming kernel: lag8 (or `METHOD`) velocity at N uniform
//! points on the 256³ benchmark dataset that `bench/query.py` creates, warm, printing the
//! per-phase nanoseconds per point. Run it under `perf record` to see where time goes:
//!
//!     cargo run --release -p turbdb-core --example kernel_profile -- /tmp/turbdb-bench-data/syn256/velocity [N] [reps] [method] [operator]
//!
//! `BOX=b` puts the points in a box of b grid spacings instead of the whole domain: with
//! b = 1 every stencil has the same rows, which stay in the L1 cache, so the run shows the
//! kernel's arithmetic without its cache misses.

#[path = "support/uniform.rs"]
mod uniform;

use std::time::Instant;

use turbdb_core::{
    evaluate_within, Axis, ChunkCodec, FieldGeometry, FieldReader, IndexLocation, Method, Operator,
    QuerySpec, Strategy, StreamStats, Temporal,
};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let root = args
        .get(1)
        .cloned()
        .unwrap_or("/tmp/turbdb-bench-data/syn256/velocity".into());
    let n: usize = args.get(2).map_or(1_000_000, |s| s.parse().unwrap());
    let reps: usize = args.get(3).map_or(5, |s| s.parse().unwrap());
    let method = Method::parse(args.get(4).map_or("lag8", |s| s.as_str())).unwrap();
    let operator = Operator::parse(args.get(5).map_or("field", |s| s.as_str())).unwrap();
    let grid = 256;
    // `NCOMP=1` for a scalar field (the benchmark dataset's pressure).
    let ncomp = std::env::var("NCOMP").map_or(3, |s| s.parse().expect("NCOMP: components"));
    let geometry = FieldGeometry::new([grid; 3], ncomp, 8, 64).unwrap();
    let reader = FieldReader::new(
        std::path::PathBuf::from(root),
        geometry,
        ChunkCodec {
            zstd: false,
            crc32c: true,
        },
        IndexLocation::End,
    );
    let spacing = std::f64::consts::TAU / grid as f64;
    let axes = [0; 3].map(|_| Axis {
        n: grid,
        origin: 0.0,
        spacing,
        periodic: true,
    });
    // The box starts 100 nodes in, inside a cell: up to BOX=24 no stencil crosses into another.
    let (low, extent) = match std::env::var("BOX") {
        Ok(b) => (
            100.0 * spacing,
            b.parse::<f64>().expect("BOX: grid spacings") * spacing,
        ),
        Err(_) => (0.0, std::f64::consts::TAU),
    };
    let mut next = uniform::uniform();
    let points: Vec<[f64; 3]> = (0..n)
        .map(|_| [0; 3].map(|_| low + next() * extent))
        .collect();
    let spec = QuerySpec {
        method,
        operator,
        temporal: Temporal::parse("none").unwrap(),
        time: 0.02,
        strategy: Strategy::Streaming,
    };
    let times = [0.0, 0.01, 0.02, 0.03];
    // Float32 answers, as `bench/query.py` asks for (`DTYPE=f64` for float64 answers, whose
    // sums are all float64); checked against the float64 answers.
    let float64 = std::env::var("DTYPE").is_ok_and(|d| d == "f64");
    let reference: Vec<f64> = evaluate_within(
        &reader,
        axes,
        &times,
        &points,
        &spec,
        None,
        &StreamStats::default(),
    )
    .unwrap();
    let scale = reference.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for rep in 0..reps {
        let stats = StreamStats::default();
        let start = Instant::now();
        let values: Vec<f64> = if float64 {
            evaluate_within(&reader, axes, &times, &points, &spec, None, &stats).unwrap()
        } else {
            let answer: Vec<f32> =
                evaluate_within(&reader, axes, &times, &points, &spec, None, &stats).unwrap();
            answer.into_iter().map(f64::from).collect()
        };
        let wall = start.elapsed().as_secs_f64();
        let error = values
            .iter()
            .zip(&reference)
            .fold(0.0f64, |m, (v, r)| m.max((v - r).abs()))
            / scale;
        let phases: Vec<String> = stats
            .phases
            .seconds()
            .iter()
            .map(|(name, s)| format!("{name} {:.0}", s / n as f64 * 1e9))
            .collect();
        println!(
            "rep {rep}: {:.3} M points/s ({:.0} ns/pt) | {} | check {:.6} | max error {error:.1e} of max |value|",
            n as f64 / wall / 1e6,
            wall / n as f64 * 1e9,
            phases.join(" "),
            values.iter().take(1000).sum::<f64>()
        );
    }
}
