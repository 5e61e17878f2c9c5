//! Which SIMD code the interpolation kernel runs, chosen at run time: one build serves
//! every x86-64 CPU (AVX-512, AVX2 + FMA, or the portable code of the baseline target)
//! and every aarch64 CPU (NEON). The kernel is written once, generic over [`Simd`]; each
//! path compiles it inside a `#[target_feature]` function ([`KernelPath::run`]), so the
//! compiler may use that instruction set there and only there.

use std::sync::OnceLock;

use crate::error::{Error, Result};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;
mod portable;

#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::Avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) use avx512::Avx512;
#[cfg(target_arch = "aarch64")]
pub(crate) use neon::Neon;

/// The environment variable that forces a path (`portable`, `avx2`, `avx512`, `neon`).
pub const KERNEL_ENV: &str = "TURBDB_KERNEL";

/// One set of SIMD instructions the kernel can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelPath {
    /// Plain Rust for the baseline target (SSE2 on x86-64): runs everywhere.
    Portable,
    /// AVX2 with fused multiply-add: 4 float64 lanes (x86-64 since 2013–2015).
    Avx2,
    /// AVX-512F: 8 float64 lanes.
    Avx512,
    /// NEON: 2 float64 lanes (every aarch64 CPU).
    Neon,
}

/// Every path, in the order queries prefer them. AVX2 comes before AVX-512: on both
/// AVX-512 machines measured (`bench/query.py --threads 1,2`, 10⁶ uniform points, warm) it
/// was as fast or faster — a 2-core AMD EPYC Zen 4 class core, load 0.2–0.9 (lag8 field
/// 2.52 against 2.33 M/s on one thread, 5.00 against 4.28 on two) and a 2-core Intel Xeon,
/// load 1.6–1.9 (2.30 against 1.95 and 4.35 against 4.15; lag6 field 5.15 against 3.73 on
/// two), gradients within ±10 %. A
/// stencil cut by a cell boundary leaves short rows that fill few of AVX-512's eight lanes.
/// `TURBDB_KERNEL=avx512` still chooses it.
const ALL: [KernelPath; 4] = [
    KernelPath::Avx2,
    KernelPath::Avx512,
    KernelPath::Neon,
    KernelPath::Portable,
];

impl KernelPath {
    /// The name used by `TURBDB_KERNEL` and reported by queries.
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Portable => "portable",
            KernelPath::Avx2 => "avx2",
            KernelPath::Avx512 => "avx512",
            KernelPath::Neon => "neon",
        }
    }

    /// Parses a path name (case-insensitive).
    pub fn parse(name: &str) -> Result<Self> {
        ALL.into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| {
                Error::UnknownName(format!(
                    "unknown kernel path {name:?}; valid: avx512, avx2, neon, portable"
                ))
            })
    }

    /// Whether this CPU can run the path.
    pub fn is_supported(self) -> bool {
        match self {
            KernelPath::Portable => true,
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => Avx2::new().is_some(),
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512 => Avx512::new().is_some(),
            #[cfg(target_arch = "aarch64")]
            KernelPath::Neon => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The paths this CPU can run, preferred first (see [`ALL`]).
    pub fn supported() -> Vec<KernelPath> {
        ALL.into_iter().filter(|p| p.is_supported()).collect()
    }

    /// The preferred path of those this CPU can run (see [`ALL`]).
    pub fn best() -> Self {
        ALL.into_iter()
            .find(|p| p.is_supported())
            .unwrap_or(KernelPath::Portable)
    }

    /// The preferred path for derivatives up to `max_order`: AVX-512 where the CPU has it
    /// and the operator has derivatives, else [`Self::best`]. A derivative's sums (two z
    /// orders, three (y, z) pairs) need more than AVX2's 16 vector registers, and the
    /// compiler spills; AVX-512 has 32. On the 2-core Intel Xeon (`bench/query.py --threads
    /// 1,2 --repeats 3`, git b61be24) AVX-512 ran the lag8 gradient at 1.98 against 1.84 M/s
    /// on one thread and 3.88 against 3.63 on two, lag6 +4–6 %, lag4 +1–3 %, while AVX2 ran
    /// every field 2–5 % faster.
    pub fn best_for(max_order: usize) -> Self {
        if max_order > 0 && KernelPath::Avx512.is_supported() {
            KernelPath::Avx512
        } else {
            KernelPath::best()
        }
    }

    /// The path queries use: the one `TURBDB_KERNEL` names, if it is set, else the preferred
    /// ([`Self::best`]). Read once per process; a name this CPU cannot run is an error.
    pub fn selected() -> Result<Self> {
        Ok(KernelPath::forced()?.unwrap_or_else(KernelPath::best))
    }

    /// The path a query of derivatives up to `max_order` uses: the one `TURBDB_KERNEL`
    /// names, if it is set, else [`Self::best_for`] the operator.
    pub fn selected_for(max_order: usize) -> Result<Self> {
        Ok(KernelPath::forced()?.unwrap_or_else(|| KernelPath::best_for(max_order)))
    }

    /// The path `TURBDB_KERNEL` names, if it is set (read once per process).
    fn forced() -> Result<Option<Self>> {
        static FORCED: OnceLock<std::result::Result<Option<KernelPath>, String>> = OnceLock::new();
        FORCED
            .get_or_init(|| match std::env::var(KERNEL_ENV) {
                Ok(name) if !name.trim().is_empty() => KernelPath::from_setting(&name)
                    .map(Some)
                    .map_err(|e| e.to_string()),
                _ => Ok(None),
            })
            .clone()
            .map_err(Error::InvalidArgument)
    }

    /// The path a `TURBDB_KERNEL` value names, if this CPU can run it.
    fn from_setting(name: &str) -> Result<Self> {
        let path = KernelPath::parse(name)
            .map_err(|e| Error::InvalidArgument(format!("{KERNEL_ENV}: {e}")))?;
        path.check()?;
        Ok(path)
    }

    /// An error naming the paths this CPU has, if it cannot run this one.
    pub fn check(self) -> Result<()> {
        if self.is_supported() {
            return Ok(());
        }
        let names: Vec<&str> = KernelPath::supported().iter().map(|p| p.name()).collect();
        Err(Error::InvalidArgument(format!(
            "this CPU cannot run the {} kernel; it can run: {}",
            self.name(),
            names.join(", ")
        )))
    }

    /// Runs `task` with this path's token but not its instructions: the task only picks
    /// the code to run, and runs it with [`Simd::enter`], each piece of code compiled in a
    /// function of its own.
    ///
    /// # Panics
    /// If the CPU cannot run the path (see [`KernelPath::check`]).
    pub(crate) fn dispatch<T: SimdTask>(self, task: T) -> T::Output {
        match self {
            KernelPath::Portable => task.run(portable::Portable),
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => match Avx2::new() {
                Some(simd) => task.run(simd),
                None => unsupported(self),
            },
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512 => match Avx512::new() {
                Some(simd) => task.run(simd),
                None => unsupported(self),
            },
            #[cfg(target_arch = "aarch64")]
            KernelPath::Neon => task.run(Neon),
            #[allow(unreachable_patterns)]
            _ => unsupported(self),
        }
    }

    /// Runs `task` with this path's instructions.
    ///
    /// # Panics
    /// If the CPU cannot run the path (see [`KernelPath::check`]).
    #[inline]
    pub(crate) fn run<T: SimdTask>(self, task: T) -> T::Output {
        self.dispatch(Enter(task))
    }
}

/// A task entered on the path whose token it is given ([`KernelPath::run`]).
struct Enter<T>(T);

impl<T: SimdTask> SimdTask for Enter<T> {
    type Output = T::Output;

    #[inline(always)]
    fn run<S: Simd>(self, simd: S) -> T::Output {
        simd.enter(self.0)
    }
}

/// Stops a run on a path the CPU lacks (running it would be undefined behaviour).
#[cold]
fn unsupported(path: KernelPath) -> ! {
    panic!("{}", path.check().expect_err("an unsupported path"))
}

/// Vectors of float64 lanes and the few operations the kernel needs. A value of a type
/// that implements it is a token: it exists only where the CPU has the instructions.
pub(crate) trait Simd: Copy {
    /// One vector.
    type V: Copy;
    /// Lanes in a vector.
    const LANES: usize;
    /// Runs `task` with this path's instructions (in the path's `#[target_feature]`
    /// function, as [`KernelPath::run`] does).
    fn enter<T: SimdTask>(self, task: T) -> T::Output;
    /// Whether the kernel's fast paths are compiled for this path
    /// ([`crate::engine::fast_paths`]).
    const FAST_PATHS: bool = true;
    /// Whether the path has eight float64 lanes and 32 registers (AVX-512): its fast paths
    /// take longer rows.
    const WIDE: bool = Self::LANES == 8;
    /// All lanes `v`.
    fn splat(self, v: f64) -> Self::V;
    /// `LANES` values from `src`.
    ///
    /// # Safety
    /// `src .. src + LANES` must be readable.
    unsafe fn load(self, src: *const f64) -> Self::V;
    /// `LANES` float32 values from `src`, widened.
    ///
    /// # Safety
    /// `src .. src + LANES` must be readable.
    unsafe fn load_f32(self, src: *const f32) -> Self::V;
    /// `a · b + c` (fused where the path has FMA).
    fn mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// Writes the lanes to `out[..LANES]`.
    fn store(self, v: Self::V, out: &mut [f64]);

    /// A vector of `2 · LANES` float32 lanes: a lag stencil's z sums of the stored float32
    /// values run in it, half the instructions of widening every value first.
    type N: Copy;
    /// All float32 lanes `v`.
    fn splat_narrow(self, v: f32) -> Self::N;
    /// `2 · LANES` float32 values from `src`.
    ///
    /// # Safety
    /// `src .. src + 2 · LANES` must be readable.
    unsafe fn load_narrow(self, src: *const f32) -> Self::N;
    /// `2 · LANES` float32 values, the first `d` from `left` and the others from `right`
    /// on (lane `i ≥ d` is `right[i − d]`): a stencil's row that an atom's end cuts in two.
    ///
    /// # Safety
    /// `d < 2 · LANES`; `left .. left + 2 · LANES` and `right .. right + 2 · LANES − d`
    /// must be readable.
    #[inline(always)]
    unsafe fn load_narrow_split(self, left: *const f32, right: *const f32, d: usize) -> Self::N {
        let lanes = 2 * Self::LANES;
        debug_assert!(d < lanes && lanes <= 16);
        let mut row = [0f32; 16];
        // SAFETY: the caller's promise; `row` holds the `lanes` values.
        unsafe {
            std::ptr::copy_nonoverlapping(left, row.as_mut_ptr(), d);
            std::ptr::copy_nonoverlapping(right, row.as_mut_ptr().add(d), lanes - d);
            self.load_narrow(row.as_ptr())
        }
    }
    /// `a · b + c` in float32 (fused where the path has FMA).
    fn mul_add_narrow(self, a: Self::N, b: Self::N, c: Self::N) -> Self::N;
    /// The lanes widened to float64: the first `LANES`, then the rest.
    fn widen(self, v: Self::N) -> [Self::V; 2];

    /// Four float64 lanes, one per axis (x, y, z and a spare): a point's Lagrange weights
    /// along its three axes are computed together in one.
    type Q: Copy;
    /// The lanes `v`.
    fn quad(self, v: [f64; 4]) -> Self::Q;
    /// `a + b`, lane by lane.
    fn quad_add(self, a: Self::Q, b: Self::Q) -> Self::Q;
    /// `a − b`, lane by lane.
    fn quad_sub(self, a: Self::Q, b: Self::Q) -> Self::Q;
    /// `a · b`, lane by lane (never fused: the weights are those of the scalar code, bit
    /// for bit).
    fn quad_mul(self, a: Self::Q, b: Self::Q) -> Self::Q;
    /// Writes lane `a` of `rows[k]` to `out[a][k]` for the axes `a` < 3 and `k` < 4 (the
    /// spare lane is dropped).
    fn store_transposed(self, rows: [Self::Q; 4], out: [&mut [f64; 4]; 3]);
}

/// Work that runs with one path's instructions: `run` is compiled once per path, inside
/// that path's `#[target_feature]` function, so it and everything it calls must inline
/// (`#[inline(always)]`) to get those instructions.
pub(crate) trait SimdTask {
    /// What the work returns.
    type Output;
    /// Does the work.
    fn run<S: Simd>(self, simd: S) -> Self::Output;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loads, widens, fuses and stores on `simd`, as the portable path does.
    struct Arithmetic;

    impl SimdTask for Arithmetic {
        type Output = Vec<f64>;
        #[inline(always)]
        fn run<S: Simd>(self, s: S) -> Vec<f64> {
            let a: Vec<f64> = (0..16).map(|i| i as f64).collect();
            let b: Vec<f32> = (0..16).map(|i| i as f32 * 0.5).collect();
            let mut out = vec![0.0; S::LANES];
            // SAFETY: 16 values are readable, LANES ≤ 8, and the loads start at 0 and 1.
            let (x, y) = unsafe { (s.load(a.as_ptr()), s.load_f32(b[1..].as_ptr())) };
            s.store(s.mul_add(x, s.splat(2.0), y), &mut out);
            out
        }
    }

    #[test]
    fn every_supported_path_loads_widens_and_fuses() {
        for path in KernelPath::supported() {
            let got = path.run(Arithmetic);
            let expected: Vec<f64> = (0..got.len())
                .map(|i| 2.0 * i as f64 + (i + 1) as f64 * 0.5)
                .collect();
            assert_eq!(got, expected, "{}", path.name());
        }
    }

    #[test]
    fn path_names_round_trip_and_unknown_names_are_refused() {
        for path in ALL {
            assert_eq!(KernelPath::parse(path.name()).unwrap(), path);
        }
        assert!(KernelPath::parse("sse9").is_err());
        assert!(KernelPath::supported().contains(&KernelPath::Portable));
        assert!(KernelPath::best().is_supported());
    }

    #[test]
    fn avx2_is_preferred_over_avx512_where_the_cpu_has_both() {
        let supported = KernelPath::supported();
        if supported.contains(&KernelPath::Avx2) {
            assert_eq!(KernelPath::best(), KernelPath::Avx2);
            assert_eq!(supported[0], KernelPath::Avx2);
        }
        let at = |p| ALL.iter().position(|&q| q == p).unwrap();
        assert!(at(KernelPath::Avx2) < at(KernelPath::Avx512));
        assert_eq!(at(KernelPath::Portable), ALL.len() - 1);
    }

    #[test]
    fn derivatives_prefer_avx512_where_the_cpu_has_it_and_fields_do_not() {
        assert_eq!(KernelPath::best_for(0), KernelPath::best());
        let expected = if KernelPath::Avx512.is_supported() {
            KernelPath::Avx512
        } else {
            KernelPath::best()
        };
        assert_eq!(KernelPath::best_for(1), expected);
        assert_eq!(KernelPath::best_for(2), expected);
    }

    #[test]
    fn a_path_the_cpu_lacks_is_refused_with_the_ones_it_has() {
        if let Some(missing) = ALL.into_iter().find(|p| !p.is_supported()) {
            let message = missing.check().unwrap_err().to_string();
            assert!(message.contains("portable"), "{message}");
        }
    }
}
