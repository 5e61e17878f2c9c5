//! The plan's first pass — each point's grid position, home cell and atom in the cell —
//! four points at a time on AVX2: the same IEEE subtraction and division as
//! [`Axis::grid_position`] per lane, so the same positions bit for bit, and integer
//! shifts for the cell and the atom's Morton code. A group of four with any point that
//! needs more than that (outside `[0, n)` on a periodic axis, so wrapped; outside
//! `[0, n − 1]` on a bounded one, so clamped or refused; not finite) is left to the
//! scalar code, point by point. Other CPUs and the portable path take the scalar code.

use crate::engine::cell_finder::CellFinder;
use crate::engine::simd::KernelPath;

/// Where one point lies: what [`HomeFour::each`] hands on for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Home {
    /// The home cell's linear number.
    pub(crate) cell: usize,
    /// The atom's Morton code in the cell.
    pub(crate) atom: u32,
    /// The grid position.
    pub(crate) position: [f64; 3],
}

/// The four-point pass over the cells of a [`CellFinder`].
#[derive(Clone, Copy)]
pub(crate) struct HomeFour<'a>(&'a CellFinder<'a>);

impl<'a> HomeFour<'a> {
    /// The four-point pass for the cells of `finder`, if the kernel's `path` is a SIMD
    /// one and the CPU has AVX2 (nodes are then counted in 32-bit lanes: grids up to 2³¹
    /// nodes a side).
    pub(crate) fn new(finder: &'a CellFinder<'a>, path: KernelPath) -> Option<Self> {
        let fits = finder.axes.iter().all(|a| a.n <= i32::MAX as usize)
            && finder.total_cells() <= u32::MAX as usize;
        (path != KernelPath::Portable && KernelPath::Avx2.is_supported() && fits)
            .then_some(Self(finder))
    }

    /// Calls `each(i, home)` for every point `i` of `points` in order: its [`Home`], or
    /// `None` where the scalar code must place it.
    #[inline]
    pub(crate) fn each(&self, points: &[[f64; 3]], each: impl FnMut(usize, Option<Home>)) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `HomeFour` exists only where the CPU has AVX2 (`new`).
        unsafe {
            self.each_avx2(points, each)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let mut each = each;
            (0..points.len()).for_each(|i| each(i, None));
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn each_avx2(&self, points: &[[f64; 3]], mut each: impl FnMut(usize, Option<Home>)) {
        use std::arch::x86_64::*;
        let (finder, axes) = (self.0, self.0.axes);
        let zero = _mm256_setzero_pd();
        let origin = axes.map(|a| _mm256_set1_pd(a.origin));
        let spacing = axes.map(|a| _mm256_set1_pd(a.spacing));
        // The highest position taken as is: `n` (excluded) on a periodic axis, `n − 1`
        // (included) on a bounded one.
        let upper = axes.map(|a| _mm256_set1_pd((a.n - usize::from(!a.periodic)) as f64));
        let side_shift = finder.side_shift.map(|s| _mm_cvtsi32_si128(s as i32));
        let side_mask = finder.side.map(|s| _mm_set1_epi32(s as i32 - 1));
        let atom_shift = _mm_cvtsi32_si128(finder.atom_shift as i32);
        let [cells_x, cells_y, _] = finder.cells_per_axis.map(|c| _mm_set1_epi32(c as i32));
        let groups = points.chunks_exact(4);
        let rest = groups.remainder().len();
        for (g, p) in groups.enumerate() {
            let mut s = [zero; 3];
            let mut inside = 0b1111;
            for a in 0..3 {
                let x = _mm256_set_pd(p[3][a], p[2][a], p[1][a], p[0][a]);
                s[a] = _mm256_div_pd(_mm256_sub_pd(x, origin[a]), spacing[a]);
                let low = _mm256_cmp_pd::<_CMP_GE_OQ>(s[a], zero);
                let high = if axes[a].periodic {
                    _mm256_cmp_pd::<_CMP_LT_OQ>(s[a], upper[a])
                } else {
                    _mm256_cmp_pd::<_CMP_LE_OQ>(s[a], upper[a])
                };
                inside &= _mm256_movemask_pd(_mm256_and_pd(low, high));
            }
            if inside != 0b1111 {
                (0..4).for_each(|k| each(4 * g + k, None));
                continue;
            }
            // Positions in [0, n): truncation is the floor, and the node is at most n − 1.
            let node = s.map(|v| _mm256_cvttpd_epi32(v));
            let cell = [0, 1, 2].map(|a| _mm_srl_epi32(node[a], side_shift[a]));
            let atom =
                [0, 1, 2].map(|a| _mm_srl_epi32(_mm_and_si128(node[a], side_mask[a]), atom_shift));
            let cell = _mm_add_epi32(
                _mm_mullo_epi32(
                    _mm_add_epi32(_mm_mullo_epi32(cell[2], cells_y), cell[1]),
                    cells_x,
                ),
                cell[0],
            );
            let code = _mm_or_si128(
                spread(atom[0]),
                _mm_or_si128(
                    _mm_slli_epi32::<1>(spread(atom[1])),
                    _mm_slli_epi32::<2>(spread(atom[2])),
                ),
            );
            let (mut cells, mut codes) = ([0u32; 4], [0u32; 4]);
            let mut xyz = [[0.0f64; 4]; 3];
            // SAFETY: each array holds the four lanes stored (unaligned stores).
            unsafe {
                _mm_storeu_si128(cells.as_mut_ptr().cast(), cell);
                _mm_storeu_si128(codes.as_mut_ptr().cast(), code);
                for a in 0..3 {
                    _mm256_storeu_pd(xyz[a].as_mut_ptr(), s[a]);
                }
            }
            for k in 0..4 {
                let home = Home {
                    cell: cells[k] as usize,
                    atom: codes[k],
                    position: [xyz[0][k], xyz[1][k], xyz[2][k]],
                };
                each(4 * g + k, Some(home));
            }
        }
        (points.len() - rest..points.len()).for_each(|i| each(i, None));
    }
}

/// Bit i of each lane's value (at most 15) moved to bit 3i: [`crate::storage::morton::encode_small`]'s table.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn spread(v: std::arch::x86_64::__m128i) -> std::arch::x86_64::__m128i {
    use std::arch::x86_64::*;
    // SAFETY: SSE2, which every x86-64 CPU has (a safe call in newer Rust).
    #[allow(unused_unsafe)]
    unsafe {
        let bit = |mask: i32| _mm_and_si128(v, _mm_set1_epi32(mask));
        _mm_or_si128(
            _mm_or_si128(bit(1), _mm_slli_epi32::<2>(bit(2))),
            _mm_or_si128(_mm_slli_epi32::<4>(bit(4)), _mm_slli_epi32::<6>(bit(8))),
        )
    }
}
