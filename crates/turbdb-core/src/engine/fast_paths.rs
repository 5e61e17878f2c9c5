//! Which of the kernel's fast paths ([`crate::engine::whole_stencil`]) are compiled, and
//! the one place that picks one for a query's operator, stencil width and components.
//!
//! Each fast path is a copy of its sum for one width and one row length, compiled for
//! each SIMD path, and each copy costs release-build time (most of CI's). So only the
//! copies a query can reach are compiled:
//! - none for the portable path: it runs the general kernel (it serves CPUs without AVX2,
//!   and is the reference the tests compare the fast paths with);
//! - scalar and vector fields (1 and 3 components), widths 4, 6 and 8;
//! - the gradient, the Laplacian and the Hessian of scalars and vectors, widths 4, 6 and
//!   8. On the four-lane paths, AVX2 and NEON, a row of more float64 vectors than their
//!   16 registers hold sums for is summed in parts: two vectors at a time for the gradient
//!   and the Laplacian (five sums a vector), one for the Hessian (nine); AVX-512 (32
//!   registers) sums a whole row at once.
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
    /// The Hessian (its six terms).
    Hessian,
}

/// The most components of the fields with fast paths (scalars and vectors).
pub(crate) const MAX_COMPONENTS: usize = 3;

/// The kinds of sum, as the constant `K` of [`FastVisit::sum`] (an enum cannot be a
/// const parameter).
pub(crate) const FIELD: u8 = 0;
/// See [`FIELD`].
pub(crate) const GRADIENT: u8 = 1;
/// See [`FIELD`].
pub(crate) const LAPLACIAN: u8 = 2;
/// See [`FIELD`].
pub(crate) const HESSIAN: u8 = 3;

impl Summed {
    /// The fast operator of `terms`, if it has one: a field only where the answer is
    /// float32 (`narrow`), the derivatives always (their sums are float64).
    pub(crate) fn of(terms: &TermSet, narrow: bool) -> Option<Summed> {
        if narrow && terms.is_field() {
            Some(Summed::Field)
        } else if terms.is_gradient() {
            Some(Summed::Gradient)
        } else if terms.is_laplacian() {
            Some(Summed::Laplacian)
        } else if terms.is_hessian() {
            Some(Summed::Hessian)
        } else {
            None
        }
    }

    /// The highest derivative order the operator takes (for
    /// [`crate::engine::simd::KernelPath::selected_for`]).
    pub(crate) fn order(self) -> usize {
        match self {
            Summed::Field => 0,
            Summed::Gradient => 1,
            Summed::Laplacian | Summed::Hessian => 2,
        }
    }
}

/// What to do with the fast path chosen by [`visit`].
pub(crate) trait FastVisit {
    /// What the visit returns.
    type Output;
    /// With the sum of kind `K` ([`FIELD`], [`GRADIENT`], [`LAPLACIAN`] or [`HESSIAN`])
    /// over stencils `W` wide whose rows take `N` vectors: float32 ones for a field,
    /// float64 ones for the derivatives
    /// ([`crate::engine::whole_stencil::WholeStencil::answer`]).
    fn sum<S: Simd, const W: usize, const N: usize, const K: u8>(self, simd: S) -> Self::Output;
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
    use Summed::*;
    debug_assert_eq!(S::LANES, 4);
    // N = ⌈W · ncomp / 8⌉ float32 vectors for a field; ⌈W · ncomp / 4⌉ float64 vectors
    // for the derivatives (summed two at a time; the Hessian's one at a time, nine sums a
    // vector).
    Some(match (summed, width, ncomp) {
        (Field, 4, 1) => f.sum::<S, 4, 1, FIELD>(simd),
        (Field, 6, 1) => f.sum::<S, 6, 1, FIELD>(simd),
        (Field, 8, 1) => f.sum::<S, 8, 1, FIELD>(simd),
        (Field, 4, 3) => f.sum::<S, 4, 2, FIELD>(simd),
        (Field, 6, 3) => f.sum::<S, 6, 3, FIELD>(simd),
        (Field, 8, 3) => f.sum::<S, 8, 3, FIELD>(simd),
        (Gradient, 4, 1) => f.sum::<S, 4, 1, GRADIENT>(simd),
        (Gradient, 6, 1) => f.sum::<S, 6, 2, GRADIENT>(simd),
        (Gradient, 8, 1) => f.sum::<S, 8, 2, GRADIENT>(simd),
        (Gradient, 4, 3) => f.sum::<S, 4, 3, GRADIENT>(simd),
        (Gradient, 6, 3) => f.sum::<S, 6, 5, GRADIENT>(simd),
        (Gradient, 8, 3) => f.sum::<S, 8, 6, GRADIENT>(simd),
        (Laplacian, 4, 1) => f.sum::<S, 4, 1, LAPLACIAN>(simd),
        (Laplacian, 6, 1) => f.sum::<S, 6, 2, LAPLACIAN>(simd),
        (Laplacian, 8, 1) => f.sum::<S, 8, 2, LAPLACIAN>(simd),
        (Laplacian, 4, 3) => f.sum::<S, 4, 3, LAPLACIAN>(simd),
        (Laplacian, 6, 3) => f.sum::<S, 6, 5, LAPLACIAN>(simd),
        (Laplacian, 8, 3) => f.sum::<S, 8, 6, LAPLACIAN>(simd),
        (Hessian, 4, 1) => f.sum::<S, 4, 1, HESSIAN>(simd),
        (Hessian, 6, 1) => f.sum::<S, 6, 2, HESSIAN>(simd),
        (Hessian, 8, 1) => f.sum::<S, 8, 2, HESSIAN>(simd),
        (Hessian, 4, 3) => f.sum::<S, 4, 3, HESSIAN>(simd),
        (Hessian, 6, 3) => f.sum::<S, 6, 5, HESSIAN>(simd),
        (Hessian, 8, 3) => f.sum::<S, 8, 6, HESSIAN>(simd),
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
    use Summed::*;
    debug_assert_eq!(S::LANES, 8);
    // N = ⌈W · ncomp / 16⌉ float32 vectors for a field; ⌈W · ncomp / 8⌉ float64 vectors
    // for the derivatives, at most 3 (nine sums a vector for the Hessian).
    Some(match (summed, width, ncomp) {
        (Field, 4, 1 | 3) => f.sum::<S, 4, 1, FIELD>(simd),
        (Field, 6, 1) => f.sum::<S, 6, 1, FIELD>(simd),
        (Field, 8, 1) => f.sum::<S, 8, 1, FIELD>(simd),
        (Field, 6, 3) => f.sum::<S, 6, 2, FIELD>(simd),
        (Field, 8, 3) => f.sum::<S, 8, 2, FIELD>(simd),
        (Gradient, 4, 1) => f.sum::<S, 4, 1, GRADIENT>(simd),
        (Gradient, 6, 1) => f.sum::<S, 6, 1, GRADIENT>(simd),
        (Gradient, 8, 1) => f.sum::<S, 8, 1, GRADIENT>(simd),
        (Gradient, 4, 3) => f.sum::<S, 4, 2, GRADIENT>(simd),
        (Gradient, 6, 3) => f.sum::<S, 6, 3, GRADIENT>(simd),
        (Gradient, 8, 3) => f.sum::<S, 8, 3, GRADIENT>(simd),
        (Laplacian, 4, 1) => f.sum::<S, 4, 1, LAPLACIAN>(simd),
        (Laplacian, 6, 1) => f.sum::<S, 6, 1, LAPLACIAN>(simd),
        (Laplacian, 8, 1) => f.sum::<S, 8, 1, LAPLACIAN>(simd),
        (Laplacian, 4, 3) => f.sum::<S, 4, 2, LAPLACIAN>(simd),
        (Laplacian, 6, 3) => f.sum::<S, 6, 3, LAPLACIAN>(simd),
        (Laplacian, 8, 3) => f.sum::<S, 8, 3, LAPLACIAN>(simd),
        (Hessian, 4, 1) => f.sum::<S, 4, 1, HESSIAN>(simd),
        (Hessian, 6, 1) => f.sum::<S, 6, 1, HESSIAN>(simd),
        (Hessian, 8, 1) => f.sum::<S, 8, 1, HESSIAN>(simd),
        (Hessian, 4, 3) => f.sum::<S, 4, 2, HESSIAN>(simd),
        (Hessian, 6, 3) => f.sum::<S, 6, 3, HESSIAN>(simd),
        (Hessian, 8, 3) => f.sum::<S, 8, 3, HESSIAN>(simd),
        _ => return None,
    })
}

/// [`visit`] as a task on a [`crate::engine::simd::KernelPath`]: run with
/// [`crate::engine::simd::KernelPath::run`], every fast path is compiled into one
/// function of the path; with [`crate::engine::simd::KernelPath::dispatch`], the visitor
/// enters ([`Simd::enter`]) a function of its own for each.
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
    fn sum<S: Simd, const W: usize, const N: usize, const K: u8>(self, _: S) {}
}
