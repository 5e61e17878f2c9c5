//! A batch restricted to a set of partitions gives the partial sums of their atoms: over
//! any split of the partitions among nodes the sums add up to the whole answer, and a node
//! never reads a partition it was not given (so each node may hold only its own shards).

use std::path::Path;

use proptest::prelude::*;
use turbdb_core::{
    block_values, evaluate_within, execute, execute_within, stencil_reach, write_step, Axis,
    BlockValues, ChunkCodec, FieldGeometry, FieldReader, IndexLocation, Method, Operator, Order,
    Partitions, Plan, QuerySpec, Strategy, StreamStats, Temporal, TimeLevel,
};

const GRID: [usize; 3] = [20, 16, 12];
const NC: usize = 3;
const STEPS: usize = 4;

fn geometry() -> FieldGeometry {
    FieldGeometry::new(GRID, NC, 4, 8).unwrap()
}

fn write_dataset(dir: &Path) {
    let [nx, ny, nz] = GRID;
    for t in 0..STEPS {
        let data: Vec<f32> = (0..nx * ny * nz * NC)
            .map(|i| ((i * 7919 + t * 131) % 1000) as f32 / 100.0)
            .collect();
        write_step(dir, &geometry(), None, t, &data, false).unwrap();
    }
}

fn axes(periodic: bool) -> [Axis; 3] {
    GRID.map(|n| Axis {
        n,
        origin: 0.0,
        spacing: 0.5,
        periodic,
    })
}

fn points(seed: u64, count: usize) -> Vec<[f64; 3]> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..count)
        .map(|_| [next() * 9.5, next() * 7.5, next() * 5.5])
        .collect()
}

const METHODS: [Method; 5] = [
    Method::Lagrange(4),
    Method::Lagrange(8),
    Method::FdNoInt(6),
    Method::Fd4Lag4,
    Method::Spline { m: 2, q: 8 },
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn sums_over_any_split_of_the_partitions_add_up(
        seed in any::<u64>(), m in 0usize..5, periodic in any::<bool>(), op in 0usize..4,
        nodes in 1usize..4, owner_seed in any::<u64>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path());
        let reader = FieldReader::new(dir.path(), geometry(), ChunkCodec::TURBDB, IndexLocation::End);
        let method = METHODS[m];
        let operator = [Operator::Field, Operator::Gradient, Operator::Hessian, Operator::Laplacian][op];
        prop_assume!(method.check_supports(operator).is_ok());
        let levels = [TimeLevel { t: 0, weight: -0.1 }, TimeLevel { t: 1, weight: 0.6 },
                      TimeLevel { t: 2, weight: 0.6 }, TimeLevel { t: 3, weight: -0.1 }];
        let pts = points(seed, 80);
        let plan = Plan::new(&pts, method, operator, axes(periodic), geometry(), block_values(&levels, operator, false)).unwrap();
        let whole = execute(&plan, &reader, &levels, Order::Storage, &StreamStats::default()).unwrap();
        // Every (time, shard) partition goes to one of `nodes` owners, at random.
        let mut owner = owner_seed;
        let mut split = vec![Vec::new(); nodes];
        for t in 0..STEPS {
            for shard in geometry().shard_positions() {
                owner = owner.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                split[(owner >> 33) as usize % nodes].push((t, shard));
            }
        }
        let mut sum = vec![0.0; whole.len()];
        for partitions in split {
            let part = execute_within::<f64>(&plan, &reader, &levels, Some(&Partitions::new(partitions)),
                                      Order::Storage, &StreamStats::default()).unwrap();
            for (s, p) in sum.iter_mut().zip(part) {
                *s += p;
            }
        }
        for (a, b) in whole.iter().zip(&sum) {
            prop_assert!((a - b).abs() <= 1e-9 * (1.0 + a.abs()), "{} != {}", a, b);
        }
    }
}

#[test]
fn a_node_reads_only_the_partitions_it_was_given() {
    let full = tempfile::tempdir().unwrap();
    write_dataset(full.path());
    // The node's directory holds the shards of x-column 0 at time 1 only. It keeps the field's
    // directory name: every shard's header binds it to its field, time step and partition.
    let node_dir = tempfile::tempdir().unwrap();
    let node = node_dir.path().join(full.path().file_name().unwrap());
    let g = geometry();
    let mine: Vec<_> = g
        .shard_positions()
        .into_iter()
        .filter(|s| s[0] == 0)
        .map(|s| (1, s))
        .collect();
    for &(t, shard) in &mine {
        let key = g.shard_key(t, shard);
        std::fs::create_dir_all(node.join(&key).parent().unwrap()).unwrap();
        std::fs::copy(full.path().join(&key), node.join(&key)).unwrap();
    }
    let spec = QuerySpec {
        method: Method::Lagrange(6),
        operator: Operator::Gradient,
        temporal: Temporal::None,
        time: 1.0,
        strategy: Strategy::Streaming,
    };
    let times = [0.0, 1.0, 2.0, 3.0];
    let pts = points(3, 200);
    let evaluate = |root: &Path, within: Option<&Partitions>| {
        let reader = FieldReader::new(root, g.clone(), ChunkCodec::TURBDB, IndexLocation::End);
        evaluate_within::<f64>(
            &reader,
            axes(true),
            &times,
            &pts,
            &spec,
            within,
            &StreamStats::default(),
        )
    };
    let here = Partitions::new(mine.clone());
    let elsewhere = Partitions::new(
        g.shard_positions()
            .into_iter()
            .filter(|s| s[0] != 0)
            .map(|s| (1, s)),
    );
    let local = evaluate(&node, Some(&here)).unwrap();
    let rest = evaluate(full.path(), Some(&elsewhere)).unwrap();
    let whole = evaluate(full.path(), None).unwrap();
    for ((a, b), w) in local.iter().zip(&rest).zip(&whole) {
        assert!((a + b - w).abs() <= 1e-9 * (1.0 + w.abs()));
    }
    assert!(local.iter().any(|v| *v != 0.0) && rest.iter().any(|v| *v != 0.0));
    // Asking the node for everything fails: it does not hold the other shards.
    assert!(evaluate(&node, None).is_err());
}

#[test]
fn reach_covers_every_node_a_stencil_uses() {
    // Restricted to the shards outside its reach, a point gets nothing.
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    let reader = FieldReader::new(
        dir.path(),
        geometry(),
        ChunkCodec::TURBDB,
        IndexLocation::End,
    );
    let pts = points(11, 50);
    let levels = [TimeLevel { t: 2, weight: 1.0 }];
    for periodic in [true, false] {
        let (first, width) =
            stencil_reach(&pts, Method::Lagrange(8), Operator::Field, &axes(periodic)).unwrap();
        for (p, f) in pts.iter().zip(&first) {
            let shards_on = |a: usize| -> Vec<usize> {
                (0..width)
                    .map(|k| (f[a] as usize + k) % GRID[a] / 8)
                    .collect()
            };
            let (xs, ys, zs) = (shards_on(0), shards_on(1), shards_on(2));
            let outside: Vec<_> = geometry()
                .shard_positions()
                .into_iter()
                .filter(|s| !(xs.contains(&s[0]) && ys.contains(&s[1]) && zs.contains(&s[2])))
                .map(|s| (2, s))
                .collect();
            let plan = Plan::new(
                &[*p],
                Method::Lagrange(8),
                Operator::Field,
                axes(periodic),
                geometry(),
                BlockValues::Float32,
            )
            .unwrap();
            let none = execute_within::<f64>(
                &plan,
                &reader,
                &levels,
                Some(&Partitions::new(outside)),
                Order::Storage,
                &StreamStats::default(),
            )
            .unwrap();
            assert!(
                none.iter().all(|v| *v == 0.0),
                "point {p:?} reaches beyond {f:?}+{width}"
            );
        }
    }
}
