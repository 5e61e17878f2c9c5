//! The streaming executor gives the same answer (to rounding) whatever order atoms and
//! time steps arrive in, and the same as the direct and sorted baselines.

use proptest::prelude::*;
use turbdb_core::engine::plan::unwrapped_atom;
use turbdb_core::FieldReader;
use turbdb_core::{block_values, BlockValues, Plan};
use turbdb_core::{
    execute, execute_within, AtomRequest, AtomSource, Order, StreamStats, TimeLevel,
};
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
        write_step(dir.path(), &geometry, None, t, &data, false).unwrap();
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
        let plan = Plan::new(&pts, method, operator, f.axes, f.reader.geometry().clone(), block_values(&levels, operator, false)).unwrap();
        let stats = StreamStats::default();
        let storage = execute(&plan, &f.reader, &levels, Order::Storage, &stats).unwrap();
        let shuffled = execute(&plan, &f.reader, &levels, Order::Shuffled(seed), &StreamStats::default()).unwrap();
        prop_assert!(close(&storage, &shuffled));
        for strategy in [Strategy::Direct, Strategy::Sorted] {
            let baseline = run(&plan, &f.reader, &levels, strategy, &StreamStats::default()).unwrap();
            prop_assert!(close(&storage, &baseline));
        }
        // each needed atom is read once per time level into each cell whose box holds it
        let (atoms, _, _) = stats.snapshot();
        let boxed: usize = plan.cells.iter().map(|c| c.atoms.len()).sum();
        prop_assert!(atoms <= (levels.len() * boxed) as u64, "{atoms} atoms read");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn halos_across_partial_atoms_and_the_periodic_seam_agree_with_direct(seed in any::<u64>(), m in 0usize..6, periodic in any::<bool>(), op in 0usize..4) {
        // 21 × 14 × 9 nodes in atoms of 4: the last atom along each axis is partial, so the
        // halo of a cell at the seam wraps onto a partial atom; and the whole grid is
        // narrower than some boxes.
        let f = fixture_of([21, 14, 9], periodic);
        let method = METHODS[m];
        let operator = [Operator::Field, Operator::Gradient, Operator::Hessian, Operator::Laplacian][op];
        prop_assume!(method.check_supports(operator).is_ok());
        let pts = points(seed, 400, [10.0, 6.5, 4.0]);
        let levels = [TimeLevel { t: 0, weight: 0.5 }, TimeLevel { t: 2, weight: 0.5 }];
        let plan = Plan::new(&pts, method, operator, f.axes, f.reader.geometry().clone(), block_values(&levels, operator, false)).unwrap();
        let streaming = execute(&plan, &f.reader, &levels, Order::Storage, &StreamStats::default()).unwrap();
        let direct = run(&plan, &f.reader, &levels, Strategy::Direct, &StreamStats::default()).unwrap();
        prop_assert!(close(&streaming, &direct));
        let one = [TimeLevel { t: 1, weight: 1.0 }];
        let plan = Plan::new(&pts, method, operator, f.axes, f.reader.geometry().clone(), BlockValues::Float32).unwrap();
        let streaming = execute(&plan, &f.reader, &one, Order::Storage, &StreamStats::default()).unwrap();
        let direct = run(&plan, &f.reader, &one, Strategy::Direct, &StreamStats::default()).unwrap();
        prop_assert!(close(&streaming, &direct));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn cells_in_parallel_give_the_bits_of_one_thread_in_any_order(seed in any::<u64>(), m in 0usize..6, periodic in any::<bool>(), op in 0usize..4) {
        // Every point is summed in one cell, from that cell's block alone: whichever
        // worker runs it, and whatever order the cells and atoms come in, the bits agree.
        let f = fixture_of([40, 24, 16], periodic);
        let method = METHODS[m];
        let operator = [Operator::Field, Operator::Gradient, Operator::Hessian, Operator::Laplacian][op];
        prop_assume!(method.check_supports(operator).is_ok());
        let pts = points(seed, 2_000, [19.5, 11.5, 7.5]);
        let levels = [TimeLevel { t: 2, weight: 1.0 }];
        let plan = Plan::new(&pts, method, operator, f.axes, f.reader.geometry().clone(), BlockValues::Float32).unwrap();
        prop_assert!(plan.cells.len() > 8, "{} cells", plan.cells.len());
        let in_turn = execute(&plan, &f.reader, &levels, Order::Shuffled(seed), &StreamStats::default()).unwrap();
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
    fn every_point_is_in_one_cell_whose_box_holds_its_stencil(
        seed in any::<u64>(),
        m in 0usize..6,
        grid in proptest::array::uniform3(8usize..70),
        periodic in proptest::array::uniform3(any::<bool>()),
        atom_log in 0u32..4,
        wide in any::<bool>(),
    ) {
        // A cell sums each of its points from its own block alone: the block must hold the
        // whole stencil, the cell must read every atom the stencil touches, and no point
        // may be summed twice (cells run at the same time).
        let method = METHODS[m];
        let atom = 1 << atom_log;
        let geometry = FieldGeometry::new(grid, 3, atom, 16.max(atom)).unwrap();
        let axes = [0, 1, 2].map(|a| Axis::unit(grid[a], periodic[a]));
        let extent = grid.map(|n| (n - 1) as f64);
        let pts = points(seed, 300, extent);
        let plan = Plan::new(&pts, method, Operator::Gradient, axes, geometry.clone(), if wide { BlockValues::Float64 } else { BlockValues::Float32 }).unwrap();
        let width = plan.kernel.width() as i64;
        let atoms = geometry.atoms_per_axis();
        let mut served = vec![0; pts.len()];
        for cell in &plan.cells {
            for p in cell.points.clone() {
                served[plan.order[p] as usize] += 1;
                let s = plan.sorted[p];
                let mut touched = [(0, 0); 3];
                for a in 0..3 {
                    let base = plan.kernel.base(s[a], &axes[a]);
                    prop_assert!(base >= cell.origin[a], "axis {}: {} below the box", a, base);
                    prop_assert!(base + width <= cell.origin[a] + cell.dims[a] as i64, "axis {}: past the box", a);
                    let atom_of = |u: i64| unwrapped_atom(u, grid[a], atoms[a], atom_log) - cell.first_box_atom[a];
                    touched[a] = (atom_of(base), atom_of(base + width - 1));
                }
                for z in touched[2].0..=touched[2].1 {
                    for y in touched[1].0..=touched[1].1 {
                        for x in touched[0].0..=touched[0].1 {
                            prop_assert!(cell.atoms.contains(x as usize, y as usize, z as usize), "atom {} {} {} not read", x, y, z);
                        }
                    }
                }
            }
        }
        prop_assert!(served.iter().all(|&c| c == 1), "every point is summed once");
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
        BlockValues::Float32,
    )
    .unwrap();
    let levels = [TimeLevel { t: 1, weight: 1.0 }];
    let streaming = StreamStats::default();
    execute(&plan, &f.reader, &levels, Order::Storage, &streaming).unwrap();
    let direct = StreamStats::default();
    run(&plan, &f.reader, &levels, Strategy::Direct, &direct).unwrap();
    // Each atom once into each cell whose box needs it: the atoms of the cells' halos are
    // read again by their neighbours, a point's are not.
    let boxed: usize = plan.cells.iter().map(|c| c.atoms.len()).sum();
    assert_eq!(
        streaming.snapshot().0,
        boxed as u64,
        "each box's atoms once"
    );
    assert!(direct.snapshot().0 > 4 * boxed as u64);
}

/// The store read through copies only ([`AtomSource::read_atoms`]): what a source that
/// cannot hand atoms in place (compressed shards, a cache) gives the executor.
struct Copied<'a>(&'a FieldReader);

impl AtomSource for Copied<'_> {
    fn read_atoms(
        &self,
        t: usize,
        shard: [usize; 3],
        atoms: &[AtomRequest],
        out: &mut [f32],
    ) -> turbdb_core::Result<()> {
        self.0.read_atoms(t, shard, atoms, out)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn a_fields_time_levels_blended_for_float32_answers_agree_with_the_float64_blend(seed in any::<u64>(), m in 0usize..6, periodic in any::<bool>(), copied in any::<bool>()) {
        // Float32 answers of a field blend the time levels in float32 (and sum them on the
        // float32 path); float64 answers, and the direct baseline, in float64. Both read in
        // place from the mapped shards or through copies. Weights of either sign, as pchip's.
        let f = fixture(periodic);
        let method = METHODS[m];
        prop_assume!(method.check_supports(Operator::Field).is_ok());
        let pts = points(seed, 300, [9.5, 7.5, 5.5]);
        let levels = [TimeLevel { t: 0, weight: -0.125 }, TimeLevel { t: 1, weight: 0.75 }, TimeLevel { t: 2, weight: 0.375 }];
        let plan = Plan::new(&pts, method, Operator::Field, f.axes, f.reader.geometry().clone(), block_values(&levels, Operator::Field, true)).unwrap();
        let copies = Copied(&f.reader);
        let source: &dyn AtomSource = if copied { &copies } else { &f.reader };
        let narrow: Vec<f32> = execute_within(&plan, source, &levels, None, Order::Storage, &StreamStats::default()).unwrap();
        let wide: Vec<f64> = execute_within(&plan, source, &levels, None, Order::Storage, &StreamStats::default()).unwrap();
        let direct = run(&plan, &f.reader, &levels, Strategy::Direct, &StreamStats::default()).unwrap();
        prop_assert!(close(&wide, &direct));
        // The fixture's values are 0–10: float32's rounding of a blend and its sums.
        let largest = direct.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (i, (&a, &b)) in narrow.iter().zip(&direct).enumerate() {
            prop_assert!((f64::from(a) - b).abs() <= 2e-6 * largest, "value {}: {} against {}", i, a, b);
        }
        // Not one level's values alone, nor their plain sum: the weights were applied.
        let one = run(&plan, &f.reader, &levels[1..2], Strategy::Direct, &StreamStats::default()).unwrap();
        prop_assert!(narrow.iter().zip(&one).any(|(&a, &b)| (f64::from(a) - 0.75 * b).abs() > 1e-3));
    }
}
