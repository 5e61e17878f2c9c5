//! Which of the kernel's fast paths ([`crate::engine::whole_stencil`]) are compiled, and
//! the one place that picks one for a query's operator, stencil width and components.
//!
//! Each fast path is a copy of its sum for one width and one row length, compiled for
//! each SIMD path, and each copy costs release-build time (most of CI's). So only the
//! copies a query can reach are compiled:
//! - none for the portable path: it runs the general kernel (it serves CPUs without AVX2,
//!   and is the reference the tests compare the fast paths with);
//! - scalar and vector fields (1 and 3 components), widths 4, 6 and 8;
//! - derivatives whose rows take at most two float64 vectors on the four-lane paths (AVX2,
//!   NEON: five sums a vector must fit their 16 registers) and three on AVX-512 (32).
//!
//! The rest take the general kernel ([`crate::engine::accumulate`]), which gives the same
//! answers.

use crate::engine::accumulate::TermSet;
use crate::engine::simd::{Simd, SimdTask};

/// The operators with fast paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Summed {
    /// A field's value, for float32 answers: its sums along z and y run in float32.
    Field,
    /// The gradient (derivatives of order 1).
    Gradient,
    /// The Laplacian (derivatives of order 2, summed).
    Laplacian,
}

impl Summed {
    /// The fast operator of `terms`, if it has one: a field only where the answer is
    /// float32 (`narrow`), the gradient and the Laplacian always (their sums are float64).
    pub(crate) fn of(terms: &TermSet, narrow: bool) -> Option<Summed> {
        if narrow && terms.is_field() {
            Some(Summed::Field)
        } else if terms.is_gradient() {
            Some(Summed::Gradient)
        } else if terms.is_laplacian() {
            Some(Summed::Laplacian)
        } else {
            None
        }
    }

    /// The highest derivative order the operator takes (for [`crate::engine::simd::KernelPath::selected_for`]).
    pub(crate) fn order(self) -> usize {
        match self {
            Summed::Field => 0,
            Summed::Gradient => 1,
            Summed::Laplacian => 2,
        }
    }
}

/// What to do with the fast path chosen by [`visit`]: one method per kind of sum, its
/// width and row length as constants.
pub(crate) trait FastVisit {
    /// What the visit returns.
    type Output;
    /// With a field's sum, `W` wide, rows of `H` float32 vectors
    /// ([`crate::engine::whole_stencil::WholeStencil::field`]).
    fn field<S: Simd, const W: usize, const H: usize>(self, simd: S) -> Self::Output;
    /// With the derivatives of order `D` (1: the gradient, 2: the Laplacian's terms), `W`
    /// wide, rows of `V` float64 vectors
    /// ([`crate::engine::whole_stencil::WholeStencil::derivatives`]).
    fn derivatives<S: Simd, const W: usize, const V: usize, const D: usize>(
        self,
        simd: S,
    ) -> Self::Output;
}

/// Calls `visitor` with the fast path compiled for `summed` over stencils `width` wide of
/// `ncomp` components on `simd`'s path; None (calling nothing) where none is.
#[inline(always)]
pub(crate) fn visit<S: Simd, F: FastVisit>(
    simd: S,
    summed: Summed,
    width: usize,
    ncomp: usize,
    visitor: F,
) -> Option<F::Output> {
    // Plain `if`s on the path's constants: the compiler does not even instantiate the
    // sums of a branch another path takes.
    if S::FAST_PATHS {
        if S::WIDE {
            eight_lanes(simd, summed, width, ncomp, visitor)
        } else {
            four_lanes(simd, summed, width, ncomp, visitor)
        }
    } else {
        None
    }
}

/// The fast paths of AVX2 and NEON: four float64 lanes, 16 registers.
#[inline(always)]
fn four_lanes<S: Simd, F: FastVisit>(
    simd: S,
    summed: Summed,
    width: usize,
    ncomp: usize,
    f: F,
) -> Option<F::Output> {
    debug_assert_eq!(S::LANES, 4);
    // H = ⌈W · ncomp / 8⌉ float32 vectors; V = ⌈W · ncomp / 4⌉ float64 vectors, at most 2.
    Some(match (summed, width, ncomp) {
        (Summed::Field, 4, 1) => f.field::<S, 4, 1>(simd),
        (Summed::Field, 6, 1) => f.field::<S, 6, 1>(simd),
        (Summed::Field, 8, 1) => f.field::<S, 8, 1>(simd),
        (Summed::Field, 4, 3) => f.field::<S, 4, 2>(simd),
        (Summed::Field, 6, 3) => f.field::<S, 6, 3>(simd),
        (Summed::Field, 8, 3) => f.field::<S, 8, 3>(simd),
        (Summed::Gradient, 4, 1) => f.derivatives::<S, 4, 1, 1>(simd),
        (Summed::Gradient, 6, 1) => f.derivatives::<S, 6, 2, 1>(simd),
        (Summed::Gradient, 8, 1) => f.derivatives::<S, 8, 2, 1>(simd),
        (Summed::Laplacian, 4, 1) => f.derivatives::<S, 4, 1, 2>(simd),
        (Summed::Laplacian, 6, 1) => f.derivatives::<S, 6, 2, 2>(simd),
        (Summed::Laplacian, 8, 1) => f.derivatives::<S, 8, 2, 2>(simd),
        _ => return None,
    })
}

/// The fast paths of AVX-512: eight float64 lanes, 32 registers.
#[inline(always)]
fn eight_lanes<S: Simd, F: FastVisit>(
    simd: S,
    summed: Summed,
    width: usize,
    ncomp: usize,
    f: F,
) -> Option<F::Output> {
    debug_assert_eq!(S::LANES, 8);
    // H = ⌈W · ncomp / 16⌉ float32 vectors; V = ⌈W · ncomp / 8⌉ float64 vectors, at most
    // 3. A scalar's derivatives 6 and 8 wide (V = 1) are not compiled.
    Some(match (summed, width, ncomp) {
        (Summed::Field, 4, 1 | 3) => f.field::<S, 4, 1>(simd),
        (Summed::Field, 6, 1) => f.field::<S, 6, 1>(simd),
        (Summed::Field, 8, 1) => f.field::<S, 8, 1>(simd),
        (Summed::Field, 6, 3) => f.field::<S, 6, 2>(simd),
        (Summed::Field, 8, 3) => f.field::<S, 8, 2>(simd),
        (Summed::Gradient, 4, 1) => f.derivatives::<S, 4, 1, 1>(simd),
        (Summed::Gradient, 4, 3) => f.derivatives::<S, 4, 2, 1>(simd),
        (Summed::Gradient, 6, 3) => f.derivatives::<S, 6, 3, 1>(simd),
        (Summed::Gradient, 8, 3) => f.derivatives::<S, 8, 3, 1>(simd),
        (Summed::Laplacian, 4, 1) => f.derivatives::<S, 4, 1, 2>(simd),
        (Summed::Laplacian, 4, 3) => f.derivatives::<S, 4, 2, 2>(simd),
        (Summed::Laplacian, 6, 3) => f.derivatives::<S, 6, 3, 2>(simd),
        (Summed::Laplacian, 8, 3) => f.derivatives::<S, 8, 3, 2>(simd),
        _ => return None,
    })
}

/// [`visit`] as a task on a [`crate::engine::simd::KernelPath`].
pub(crate) struct Visit<F> {
    pub(crate) summed: Summed,
    pub(crate) width: usize,
    pub(crate) ncomp: usize,
    pub(crate) visitor: F,
}

impl<F: FastVisit> SimdTask for Visit<F> {
    type Output = Option<F::Output>;

    #[inline(always)]
    fn run<S: Simd>(self, simd: S) -> Option<F::Output> {
        visit(simd, self.summed, self.width, self.ncomp, self.visitor)
    }
}

/// A visit that does nothing: whether a fast path is compiled.
pub(crate) struct Probe;

impl FastVisit for Probe {
    type Output = ();
    fn field<S: Simd, const W: usize, const H: usize>(self, _: S) {}
    fn derivatives<S: Simd, const W: usize, const V: usize, const D: usize>(self, _: S) {}
}
