//! A point's stencil weights on the kernel's SIMD path. The weights of a Lagrange basis
//! (lag4/6/8, the common case) and their derivatives are computed for the three axes at
//! once, one axis per lane of a [`Simd::Q`], and written out with a transpose in registers:
//! the products of [`LagrangeBasis::eval`], in its order, so the weights are those of
//! [`Kernel::weights`] bit for bit. (The same products written lane by lane for the
//! compiler to vectorise mixed scalar and two-lane code and went through the stack: 21
//! against 12 ns a point for lag8 values alone, AVX2.) Other methods are weighed one axis
//! at a time. The streaming executor calls [`weights_xyz`] inside its SIMD task; the node
//! engine's batches, a point at a time, call [`weights_on_any`].

use crate::engine::simd::{KernelPath, Simd, SimdTask};
use crate::interp::lagrange::LagrangeBasis;
use crate::interp::stencil::{AxisWeights, Kernel};
use crate::storage::axis::Axis;

/// The weights of grid position `s` along the three `axes`: those of [`Kernel::weights`]
/// per axis, bit for bit.
#[inline(always)]
pub(crate) fn weights_xyz<S: Simd>(
    simd: S,
    kernel: &Kernel,
    s: &[f64; 3],
    axes: &[Axis; 3],
    out: &mut [AxisWeights; 3],
) {
    let Some(basis) = kernel.lagrange_basis() else {
        return one_axis_at_a_time(kernel, s, axes, out);
    };
    let lagrange = Lagrange {
        simd,
        basis,
        x: simd.quad(kernel.lagrange_positions(s, axes, out)),
    };
    match (basis.nodes(), kernel.max_order()) {
        (4, 0) => lagrange.values::<4>(out),
        (6, 0) => lagrange.values::<6>(out),
        (8, 0) => lagrange.values::<8>(out),
        (4, 1) => lagrange.jets::<4, false>(axes, out),
        (6, 1) => lagrange.jets::<6, false>(axes, out),
        (8, 1) => lagrange.jets::<8, false>(axes, out),
        (4, _) => lagrange.jets::<4, true>(axes, out),
        (6, _) => lagrange.jets::<6, true>(axes, out),
        (8, _) => lagrange.jets::<8, true>(axes, out),
        _ => one_axis_at_a_time(kernel, s, axes, out),
    }
}

/// [`Kernel::weights`] along each axis.
#[inline(always)]
fn one_axis_at_a_time(kernel: &Kernel, s: &[f64; 3], axes: &[Axis; 3], out: &mut [AxisWeights; 3]) {
    for axis in 0..3 {
        kernel.weights(s[axis], &axes[axis], &mut out[axis]);
    }
}

/// [`weights_xyz`] from outside a SIMD task (the node engine's batches, a point at a
/// time), on the path queries use ([`KernelPath::selected`]; the preferred one the CPU has
/// if `TURBDB_KERNEL` is bad, an error the query's plan reports): one dispatch a point.
#[inline]
pub(crate) fn weights_on_any(
    kernel: &Kernel,
    s: &[f64; 3],
    axes: &[Axis; 3],
    out: &mut [AxisWeights; 3],
) {
    let path = KernelPath::selected().unwrap_or_else(|_| KernelPath::best());
    path.run(Weigh {
        kernel,
        s,
        axes,
        out,
    })
}

/// One point's weights, as a task for a SIMD path.
struct Weigh<'a> {
    kernel: &'a Kernel,
    s: &'a [f64; 3],
    axes: &'a [Axis; 3],
    out: &'a mut [AxisWeights; 3],
}

impl SimdTask for Weigh<'_> {
    type Output = ();

    #[inline(always)]
    fn run<S: Simd>(self, simd: S) {
        weights_xyz(simd, self.kernel, self.s, self.axes, self.out)
    }
}

/// A Lagrange basis at one point's positions along the three axes.
struct Lagrange<'a, S: Simd> {
    simd: S,
    basis: &'a LagrangeBasis,
    /// The positions relative to each axis's first stencil node.
    x: S::Q,
}

/// A value and its first two derivatives, in quads (the second left at zero unless asked
/// for).
type Jet<Q> = (Q, Q, Q);

impl<S: Simd> Lagrange<'_, S> {
    /// `x − j` in every lane.
    #[inline(always)]
    fn factor(&self, j: usize) -> S::Q {
        let s = self.simd;
        s.quad_sub(self.x, s.quad([j as f64; 4]))
    }

    /// The values of the `N`-node basis: the products of [`LagrangeBasis::eval`] without
    /// derivatives, in the same order.
    #[inline(always)]
    fn values<const N: usize>(&self, out: &mut [AxisWeights; 3]) {
        let s = self.simd;
        let one = s.quad([1.0; 4]);
        let mut prefix = [one; N];
        for j in 1..N {
            prefix[j] = s.quad_mul(prefix[j - 1], self.factor(j - 1));
        }
        let bary = self.basis.barycentric();
        let mut value = [s.quad([0.0; 4]); 8];
        let mut suffix = one;
        for j in (0..N).rev() {
            value[j] = s.quad_mul(prefix[j], s.quad_mul(suffix, s.quad([bary[j]; 4])));
            suffix = s.quad_mul(suffix, self.factor(j));
        }
        store::<S, N>(s, &value, 0, out);
    }

    /// The values and derivatives (the second too if `SECOND`) of the `N`-node basis,
    /// divided by the spacing once per order: the products of [`LagrangeBasis::eval`] (its
    /// jets) and the scaling of [`Kernel::weights`], in the same order.
    #[inline(always)]
    fn jets<const N: usize, const SECOND: bool>(
        &self,
        axes: &[Axis; 3],
        out: &mut [AxisWeights; 3],
    ) {
        let s = self.simd;
        let zero = s.quad([0.0; 4]);
        let one: Jet<S::Q> = (s.quad([1.0; 4]), zero, zero);
        // `a` times the factor `x − j`, whose derivative is 1.
        let times_factor = |a: Jet<S::Q>, d: S::Q| {
            let second = if SECOND {
                s.quad_add(s.quad_mul(a.2, d), s.quad_add(a.1, a.1))
            } else {
                zero
            };
            (
                s.quad_mul(a.0, d),
                s.quad_add(s.quad_mul(a.1, d), a.0),
                second,
            )
        };
        let mut prefix = [one; N];
        for j in 1..N {
            prefix[j] = times_factor(prefix[j - 1], self.factor(j - 1));
        }
        let bary = self.basis.barycentric();
        let inv = axes.map(|a| 1.0 / a.spacing);
        let per_spacing = s.quad([inv[0], inv[1], inv[2], inv[2]]);
        let per_square = s.quad([
            inv[0] * inv[0],
            inv[1] * inv[1],
            inv[2] * inv[2],
            inv[2] * inv[2],
        ]);
        // Four nodes' weights of each order at a time, written out as soon as the four
        // are done (nodes past `N` stay zero): all `3 N` quads at once did not fit AVX2's
        // registers and went through the stack (lag8 Laplacian weights 72 ns a point on
        // AVX2 against 48 on AVX-512).
        let mut orders = [[zero; 4]; 3];
        let mut suffix = one;
        for j in (0..N).rev() {
            let (p, q, k) = (prefix[j], suffix, j % 4);
            let w = s.quad([bary[j]; 4]);
            orders[0][k] = s.quad_mul(w, s.quad_mul(p.0, q.0));
            let first = s.quad_add(s.quad_mul(p.1, q.0), s.quad_mul(p.0, q.1));
            orders[1][k] = s.quad_mul(s.quad_mul(w, first), per_spacing);
            if SECOND {
                let two_p1 = s.quad_add(p.1, p.1);
                let second = s.quad_add(
                    s.quad_add(s.quad_mul(p.2, q.0), s.quad_mul(two_p1, q.1)),
                    s.quad_mul(p.0, q.2),
                );
                orders[2][k] = s.quad_mul(s.quad_mul(w, second), per_square);
            }
            if k == 0 {
                store_four(s, orders[0], 0, j, out);
                store_four(s, orders[1], 1, j, out);
                if SECOND {
                    store_four(s, orders[2], 2, j, out);
                }
            }
            suffix = times_factor(suffix, self.factor(j));
        }
    }
}

/// Writes the quads of derivative order `order` of nodes `at .. at + 4` to the three
/// axes' weights.
#[inline(always)]
fn store_four<S: Simd>(
    simd: S,
    rows: [S::Q; 4],
    order: usize,
    at: usize,
    out: &mut [AxisWeights; 3],
) {
    let [wx, wy, wz] = out;
    let [x, y, z] = [&mut wx.w[order], &mut wy.w[order], &mut wz.w[order]].map(|w| four(w, at));
    simd.store_transposed(rows, [x, y, z]);
}

/// Writes the quads of derivative order `order` (node by node, padded to whole groups of
/// four) to the three axes' weights.
#[inline(always)]
fn store<S: Simd, const N: usize>(
    simd: S,
    rows: &[S::Q; 8],
    order: usize,
    out: &mut [AxisWeights; 3],
) {
    for at in (0..N).step_by(4) {
        store_four(simd, [0, 1, 2, 3].map(|k| rows[at + k]), order, at, out);
    }
}

/// Weights `at .. at + 4` of `w`.
#[inline(always)]
fn four(w: &mut [f64], at: usize) -> &mut [f64; 4] {
    (&mut w[at..at + 4]).try_into().expect("four weights")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::method::Method;

    #[test]
    fn every_path_gives_the_scalar_weights_bit_for_bit() {
        let axis = |n, spacing, periodic| Axis {
            n,
            origin: 0.0,
            spacing,
            periodic,
        };
        // A spacing and node count of its own on each axis (the derivative weights are
        // divided by each lane's own spacing), periodic and walled axes.
        let (a, b, c) = (
            axis(32, 0.2, true),
            axis(20, 0.05, false),
            axis(16, 1.5, true),
        );
        let walled = axis(16, 1.5, false);
        let sets = [[a, b, c], [walled, a, b]];
        // Inside, on nodes, next to walls (where the stencil is shifted) and wrapping.
        let fractions = [0.0, 0.01, 0.2, 0.25, 0.5, 0.77, 0.99, 0.999, 1.0];
        let on_axis = |f: f64, axis: &Axis| f * (axis.n - 1) as f64;
        for axes in sets {
            let points: Vec<[f64; 3]> = fractions
                .iter()
                .flat_map(|&f| {
                    let g = (3.0 * f) % 1.0;
                    [[f, 1.0 - f, g], [g, f, 1.0 - f]]
                        .map(|fs| [0, 1, 2].map(|k| on_axis(fs[k], &axes[k])))
                })
                .collect();
            for method in [
                "lag4", "lag6", "lag8", "m2q8", "fd4noint", "fd4lag4", "none",
            ] {
                for order in 0..=2 {
                    let Ok(kernel) = Kernel::new(Method::parse(method).unwrap(), order) else {
                        continue;
                    };
                    for path in KernelPath::supported() {
                        let got: Vec<[AxisWeights; 3]> = points
                            .iter()
                            .map(|s| {
                                let mut out = [AxisWeights::default(); 3];
                                path.run(Weigh {
                                    kernel: &kernel,
                                    s,
                                    axes: &axes,
                                    out: &mut out,
                                });
                                out
                            })
                            .collect();
                        for (s, got) in points.iter().zip(&got) {
                            for a in 0..3 {
                                let mut expected = AxisWeights::default();
                                kernel.weights(s[a], &axes[a], &mut expected);
                                let width = kernel.width();
                                let context = format!(
                                    "{method} order {order} {} {s:?} axis {a}",
                                    path.name()
                                );
                                assert_eq!(got[a].base, expected.base, "{context}");
                                assert_eq!(got[a].wrapped, expected.wrapped, "{context}");
                                for o in 0..=order {
                                    let (g, e) = (&got[a].w[o][..width], &expected.w[o][..width]);
                                    let same =
                                        g.iter().zip(e).all(|(g, e)| g.to_bits() == e.to_bits());
                                    assert!(same, "{context}: {g:?} against {e:?}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
