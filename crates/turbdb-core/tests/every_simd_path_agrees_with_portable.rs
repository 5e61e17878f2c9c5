//! Every SIMD path this CPU can run gives the portable path's answers (to the rounding of a
//! fused multiply-add) on random fields and points: every method and operator, one to five
//! components (five take the component-at-a-time route), float32 blocks at one stored time
//! and float64 blocks blended over three, streaming and direct. Float32 answers, whose z
//! sums of stored float32 rows run in float32, stay within 1e-6 of the largest value of the
//! float64 answer on every path.

use proptest::prelude::*;
use turbdb_core::{block_values, BlockValues, FieldReader, KernelPath, Plan};
use turbdb_core::{execute, execute_within, Order, StreamStats, TimeLevel};
use turbdb_core::{run, Strategy};
use turbdb_core::{write_step, Axis, FieldGeometry, Method, Operator};
use turbdb_core::{ChunkCodec, IndexLocation};

/// Uniform numbers in [0, 1) from `seed` (a 64-bit LCG: no dependency for test data).
fn uniform(seed: u64) -> impl FnMut() -> f64 {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    }
}

const METHODS: [Method; 5] = [
    Method::Lagrange(4),
    Method::Lagrange(6),
    Method::Lagrange(8),
    Method::Fd4Lag4,
    Method::Spline { m: 2, q: 8 },
];

const OPERATORS: [Operator; 4] = [
    Operator::Field,
    Operator::Gradient,
    Operator::Hessian,
    Operator::Laplacian,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn every_supported_path_gives_the_portable_answers(
        seed in any::<u64>(),
        m in 0usize..5,
        op in 0usize..4,
        ncomp in 1usize..6,
        periodic in any::<bool>(),
        blended in any::<bool>(),
    ) {
        let (method, operator) = (METHODS[m], OPERATORS[op]);
        prop_assume!(method.check_supports(operator).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let grid = [20, 16, 12];
        let geometry = FieldGeometry::new(grid, ncomp, 4, 8).unwrap();
        let mut next = uniform(seed);
        for t in 0..3 {
            let data: Vec<f32> = (0..grid.iter().product::<usize>() * ncomp)
                .map(|_| (next() * 2.0 - 1.0) as f32)
                .collect();
            write_step(dir.path(), &geometry, None, t, &data, false).unwrap();
        }
        let axes = grid.map(|n| Axis { n, origin: 0.0, spacing: 0.5, periodic });
        let reader = FieldReader::new(dir.path(), geometry.clone(), ChunkCodec::TURBDB, IndexLocation::End);
        // Inside the bounded domain [0, (n - 1) · 0.5] on every axis.
        let points: Vec<[f64; 3]> = (0..80).map(|_| [next() * 9.5, next() * 7.5, next() * 5.5]).collect();
        let levels = if blended {
            vec![TimeLevel { t: 0, weight: 0.25 }, TimeLevel { t: 1, weight: 0.5 }, TimeLevel { t: 2, weight: 0.25 }]
        } else {
            vec![TimeLevel { t: 1, weight: 1.0 }]
        };
        let mut plan = Plan::new(&points, method, operator, axes, geometry, block_values(&levels, operator, false)).unwrap();
        let answers = |plan: &Plan| {
            let streamed = execute(plan, &reader, &levels, Order::Storage, &StreamStats::default()).unwrap();
            let direct = run(plan, &reader, &levels, Strategy::Direct, &StreamStats::default()).unwrap();
            (streamed, direct)
        };
        plan.set_kernel_path(KernelPath::Portable).unwrap();
        let (portable, portable_direct) = answers(&plan);
        prop_assert!(portable.iter().any(|v| *v != 0.0));
        for path in KernelPath::supported() {
            plan.set_kernel_path(path).unwrap();
            let stats = StreamStats::default();
            let streamed = execute(&plan, &reader, &levels, Order::Storage, &stats).unwrap();
            prop_assert_eq!(stats.kernel(), Some(path));
            let (_, direct) = answers(&plan);
            for (got, expected) in [(&streamed, &portable), (&direct, &portable_direct)] {
                let scale = expected.iter().fold(1.0f64, |m, v| m.max(v.abs()));
                for (g, e) in got.iter().zip(expected.iter()) {
                    prop_assert!((g - e).abs() <= 1e-12 * scale, "{}: {} vs {}", path.name(), g, e);
                }
            }
            let single: Vec<f32> =
                execute_within(&plan, &reader, &levels, None, Order::Storage, &StreamStats::default()).unwrap();
            let scale = portable.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for (g, e) in single.iter().zip(portable.iter()) {
                let g = f64::from(*g);
                prop_assert!((g - e).abs() <= 1e-6 * scale, "{} float32: {} vs {}", path.name(), g, e);
            }
        }
    }
}

#[test]
fn a_path_this_cpu_lacks_is_refused_and_the_plan_keeps_its_own() {
    let geometry = FieldGeometry::new([8, 8, 8], 1, 4, 8).unwrap();
    let axes = [Axis::unit(8, true); 3];
    let mut plan = Plan::new(
        &[[1.0; 3]],
        Method::Lagrange(4),
        Operator::Field,
        axes,
        geometry,
        BlockValues::Float32,
    )
    .unwrap();
    for path in [
        KernelPath::Avx512,
        KernelPath::Avx2,
        KernelPath::Neon,
        KernelPath::Portable,
    ] {
        let before = plan.kernel_path();
        match plan.set_kernel_path(path) {
            Ok(()) => assert!(path.is_supported() && plan.kernel_path() == path),
            Err(e) => {
                assert!(!path.is_supported(), "{}", path.name());
                assert!(e.to_string().contains("portable"), "{e}");
                assert_eq!(plan.kernel_path(), before);
            }
        }
    }
}
