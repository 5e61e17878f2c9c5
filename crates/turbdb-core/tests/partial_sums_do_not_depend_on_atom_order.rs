//! The streaming executor gives the same answer (to rounding) whatever order atoms and
//! time steps arrive in, and the same as the direct and sorted baselines.

use proptest::prelude::*;
use turbdb_core::FieldReader;
use turbdb_core::Plan;
use turbdb_core::{execute, Order, StreamStats, TimeLevel};
use turbdb_core::{run, Strategy};
use turbdb_core::{write_step, Axis, FieldGeometry, Method, Operator};
use turbdb_core::{ChunkCodec, IndexLocation};

struct Fixture {
    _dir: tempfile::TempDir,
    reader: FieldReader,
    axes: [Axis; 3],
}

fn fixture(periodic: bool) -> Fixture {
    fixture_of([20, 16, 12], periodic)
}

fn fixture_of([nx, ny, nz]: [usize; 3], periodic: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let nc = 3;
    let geometry = FieldGeometry::new([nx, ny, nz], nc, 4, 8).unwrap();
    for t in 0..3 {
        let data: Vec<f32> = (0..nx * ny * nz * nc)
            .map(|i| ((i * 7919 + t * 131) % 1000) as f32 / 100.0)
            .collect();
        write_step(dir.path(), &geometry, t, &data, false).unwrap();
    }
    let axes = [nx, ny, nz].map(|n| Axis {
        n,
        origin: 0.0,
        spacing: 0.5,
        periodic,
    });
    let reader = FieldReader::new(dir.path(), geometry, ChunkCodec::TURBDB, IndexLocation::End);
    Fixture {
        _dir: dir,
        reader,
        axes,
    }
}

fn points(seed: u64, count: usize, extent: [f64; 3]) -> Vec<[f64; 3]> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..count)
        .map(|_| [next() * extent[0], next() * extent[1], next() * extent[2]])
        .collect()
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-10 * (1.0 + x.abs()))
}

const METHODS: [Method; 6] = [
    Method::Lagrange(4),
    Method::Lagrange(8),
    Method::FdNoInt(6),
    Method::Fd4Lag4,
    Method::Spline { m: 2, q: 8 },
    Method::Spline { m: 1, q: 4 },
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn shuffled_streams_and_baselines_agree(seed in any::<u64>(), m in 0usize..6, periodic in any::<bool>(), op in 0usize..4, blended in any::<bool>()) {
        let f = fixture(periodic);
        let method = METHODS[m];
        let operator = [Operator::Field, Operator::Gradient, Operator::Hessian, Operator::Laplacian][op];
        prop_assume!(method.check_supports(operator).is_ok());
        let extent = [9.5, 7.5, 5.5]; // inside the bounded domain [0, (n-1)·0.5]
        let pts = points(seed, 60, extent);
        // Three blended steps (a float64 cell block) or one stored step (float32, as stored).
        let levels = if blended {
            vec![TimeLevel { t: 0, weight: 0.25 }, TimeLevel { t: 1, weight: 0.5 }, TimeLevel { t: 2, weight: 0.25 }]
        } else {
            vec![TimeLevel { t: 1, weight: 1.0 }]
        };
        let plan = Plan::new(&pts, method, operator, f.axes, f.reader.geometry().clone(), levels.len()).unwrap();
        let stats = StreamStats::default();
        let storage = execute(&plan, &f.reader, &levels, Order::Storage, &stats).unwrap();
        let shuffled = execute(&plan, &f.reader, &levels, Order::Shuffled(seed), &StreamStats::default()).unwrap();
        prop_assert!(close(&storage, &shuffled));
        for strategy in [Strategy::Direct, Strategy::Sorted] {
            let baseline = run(&plan, &f.reader, &levels, strategy, &StreamStats::default()).unwrap();
            prop_assert!(close(&storage, &baseline));
        }
        // each needed atom is read once per time level
        let (atoms, _, _) = stats.snapshot();
        prop_assert!(atoms <= levels.len() as u64 * 5 * 4 * 3);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn cells_in_parallel_give_the_bits_of_the_colours_in_turn(seed in any::<u64>(), m in 0usize..6, periodic in any::<bool>(), op in 0usize..4) {
        // A cell runs as soon as its neighbours of earlier colours are done, not after the
        // whole colour: every point must still get its cells' sums in colour order.
        let f = fixture_of([40, 24, 16], periodic);
        let method = METHODS[m];
        let operator = [Operator::Field, Operator::Gradient, Operator::Hessian, Operator::Laplacian][op];
        prop_assume!(method.check_supports(operator).is_ok());
        let pts = points(seed, 2_000, [19.5, 11.5, 7.5]);
        let levels = [TimeLevel { t: 2, weight: 1.0 }];
        let plan = Plan::new(&pts, method, operator, f.axes, f.reader.geometry().clone(), 1).unwrap();
        prop_assert!(plan.graph.len() > 8, "{} cells", plan.graph.len());
        let in_turn = execute(&plan, &f.reader, &levels, Order::Colours, &StreamStats::default()).unwrap();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
        for _ in 0..3 {
            let parallel = pool.install(|| execute(&plan, &f.reader, &levels, Order::Storage, &StreamStats::default())).unwrap();
            prop_assert!(parallel.iter().zip(&in_turn).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn cells_of_one_colour_never_share_a_point(
        seed in any::<u64>(),
        m in 0usize..6,
        grid in proptest::array::uniform3(8usize..70),
        periodic in proptest::array::uniform3(any::<bool>()),
        atom_log in 0u32..4,
        levels in 1usize..3,
    ) {
        // Cells of one colour add into the result at the same time: a point served by two
        // of them would be a data race.
        let method = METHODS[m];
        let atom = 1 << atom_log;
        let geometry = FieldGeometry::new(grid, 3, atom, 16.max(atom)).unwrap();
        let axes = [0, 1, 2].map(|a| Axis::unit(grid[a], periodic[a]));
        let extent = grid.map(|n| (n - 1) as f64);
        let pts = points(seed, 300, extent);
        let plan = Plan::new(&pts, method, Operator::Gradient, axes, geometry, levels).unwrap();
        let mut served = vec![usize::MAX; pts.len()];
        for (colour, cells) in plan.colours.iter().enumerate() {
            for &c in cells {
                for &p in &plan.entries[plan.cells[c].entries.clone()] {
                    prop_assert!(served[p as usize] != colour, "point {} twice in colour {}", p, colour);
                    served[p as usize] = colour;
                }
            }
        }
        prop_assert!(served.iter().all(|&c| c != usize::MAX), "every point is served");
    }
}

#[test]
fn streaming_reads_each_atom_once_where_direct_rereads() {
    let f = fixture(true);
    let pts = points(7, 500, [10.0, 8.0, 6.0]);
    let plan = Plan::new(
        &pts,
        Method::Lagrange(6),
        Operator::Gradient,
        f.axes,
        f.reader.geometry().clone(),
        1,
    )
    .unwrap();
    let levels = [TimeLevel { t: 1, weight: 1.0 }];
    let streaming = StreamStats::default();
    execute(&plan, &f.reader, &levels, Order::Storage, &streaming).unwrap();
    let direct = StreamStats::default();
    run(&plan, &f.reader, &levels, Strategy::Direct, &direct).unwrap();
    let total_atoms = 5 * 4 * 3;
    assert_eq!(
        streaming.snapshot().0,
        total_atoms,
        "every atom exactly once"
    );
    assert!(direct.snapshot().0 > 10 * total_atoms);
}
