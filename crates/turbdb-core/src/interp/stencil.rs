//! Per-axis stencils: for a position along one axis, the first node of its stencil and the
//! 1-D weights of the value and of its first and second derivatives, for every method. A
//! 3-D stencil is the tensor product of three of these (every method here is separable).

use crate::error::{Error, Result};
use crate::interp::lagrange::LagrangeBasis;
use crate::interp::method::{Method, MAX_WIDTH};
use crate::interp::spline::SplineKernel;
use crate::storage::axis::Axis;

/// The stencil of one point along one axis.
#[derive(Debug, Clone, Copy)]
pub struct AxisWeights {
    /// First node of the stencil (unwrapped: may be negative or ≥ n on a periodic axis).
    pub base: i64,
    /// The first node wrapped into `0..n`.
    pub wrapped: usize,
    /// Weights per derivative order (0, 1, 2) and node, already divided by the spacing.
    pub w: [[f64; MAX_WIDTH]; 3],
}

impl Default for AxisWeights {
    fn default() -> Self {
        Self {
            base: 0,
            wrapped: 0,
            w: [[0.0; MAX_WIDTH]; 3],
        }
    }
}

/// Node `i` wrapped into `0..n`. A stencil's first node is within one period of the grid
/// (the grid has at least as many nodes as the stencil), so one add or subtract does; the
/// division is only a safety net.
#[inline]
fn wrap(i: i64, n: usize) -> usize {
    let n = n as i64;
    let once = if i < 0 {
        i + n
    } else if i >= n {
        i - n
    } else {
        i
    };
    if (0..n).contains(&once) {
        once as usize
    } else {
        i.rem_euclid(n) as usize
    }
}

/// `⌊s⌋` as an integer, the same as `s.floor() as i64`, without a call: the portable build
/// (SSE2) has no rounding instruction, and `floor` was a library call per axis and point.
#[inline(always)]
fn floor(s: f64) -> i64 {
    let t = s as i64;
    if (t as f64) > s {
        t - 1
    } else {
        t
    }
}

/// Everything needed to compute the 1-D weights of one method, prepared once per batch.
#[derive(Debug, Clone)]
pub struct Kernel {
    method: Method,
    max_order: usize,
    basis: Option<LagrangeBasis>,
    /// The fd4 weights (value, first, second derivative) over five nodes, at each of
    /// them: the centre for the interior, the others off-centre at a wall.
    fd4: [[[f64; 5]; 3]; 5],
    spline: Option<SplineKernel>,
}

impl Kernel {
    /// Prepares `method` for derivatives up to `max_order` (0, 1 or 2).
    pub fn new(method: Method, max_order: usize) -> Result<Self> {
        let basis = match method {
            // Splines fall back to Lagrange through the same nodes where a wall shifts them.
            Method::Lagrange(n) | Method::Spline { q: n, .. } => Some(LagrangeBasis::new(n)),
            Method::FdNoInt(n) => Some(LagrangeBasis::new(n + 1)),
            Method::Fd4Lag4 => Some(LagrangeBasis::new(4)),
            Method::Nearest => None,
        };
        // Fourth-order differences: the 5-node Lagrange basis at each of its nodes (the
        // centre is the central difference).
        let mut fd4 = [[[0.0; 5]; 3]; 5];
        let five = LagrangeBasis::new(5);
        for (at, fd) in fd4.iter_mut().enumerate() {
            let (mut v, mut d1, mut d2) = ([0.0; 10], [0.0; 10], [0.0; 10]);
            five.eval(at as f64, &mut v, Some(&mut d1), Some(&mut d2));
            fd[0].copy_from_slice(&v[..5]);
            fd[1].copy_from_slice(&d1[..5]);
            fd[2].copy_from_slice(&d2[..5]);
        }
        let spline = match method {
            Method::Spline { m, q } => Some(SplineKernel::new(m, q)?),
            _ => None,
        };
        Ok(Self {
            method,
            max_order,
            basis,
            fd4,
            spline,
        })
    }

    /// Nodes in the stencil along one axis.
    pub fn width(&self) -> usize {
        match self.method {
            Method::Nearest => 1,
            Method::Lagrange(n) => n,
            Method::FdNoInt(n) => n + 1,
            Method::Fd4Lag4 => 8,
            Method::Spline { q, .. } => q,
        }
    }

    /// Checks that an axis has enough nodes for the stencil.
    pub fn check_axis(&self, axis: &Axis, name: char) -> Result<()> {
        if axis.n < self.width() {
            return Err(Error::InvalidArgument(format!(
                "method {} needs at least {} nodes along {name}, the grid has {}",
                self.method.name(),
                self.width(),
                axis.n
            )));
        }
        Ok(())
    }

    /// The first node of the stencil of `s`, wrapped into `0..n` (for planning).
    #[inline]
    pub fn first_node(&self, s: f64, axis: &Axis) -> usize {
        wrap(self.placement(s, axis).0, axis.n)
    }

    /// The first node of the stencil of `s`, unwrapped (as [`AxisWeights::base`]).
    #[inline]
    pub fn base(&self, s: f64, axis: &Axis) -> i64 {
        self.placement(s, axis).0
    }

    /// First node of the stencil of `s`, the node it is anchored at, and whether a wall
    /// shifted it.
    #[inline(always)]
    fn placement(&self, s: f64, axis: &Axis) -> (i64, i64, bool) {
        let width = self.width() as i64;
        let n = axis.n as i64;
        let (start, anchor) = match self.method {
            Method::Nearest => (s.round() as i64, s.round() as i64),
            Method::Lagrange(_) | Method::Spline { .. } => {
                let f = floor(s);
                (f - width / 2 + 1, f)
            }
            Method::FdNoInt(_) => {
                let r = s.round() as i64;
                (r - width / 2, r)
            }
            Method::Fd4Lag4 => (floor(s) - 3, floor(s)),
        };
        // Shifted inward on a bounded axis, so the stencil stays inside the grid.
        let base = if axis.periodic {
            start
        } else {
            start.clamp(0, n - width)
        };
        let anchor = if axis.periodic {
            anchor
        } else {
            anchor.clamp(0, n - 1)
        };
        (base, anchor, base != start)
    }

    /// The stencil of grid position `s` (from [`Axis::grid_position`]) on `axis`. Inlined,
    /// so that the kernel's SIMD path compiles it with its own instructions.
    #[inline(always)]
    pub fn weights(&self, s: f64, axis: &Axis, out: &mut AxisWeights) {
        let (base, anchor, shifted) = self.placement(s, axis);
        out.base = base;
        out.wrapped = wrap(base, axis.n);
        let w = &mut out.w;
        // Lagrange weights are written whole for every order asked for; the others add up
        // or set only some nodes.
        if !matches!(self.method, Method::Lagrange(_) | Method::FdNoInt(_)) {
            for order in w.iter_mut() {
                order.fill(0.0);
            }
        }
        match self.method {
            Method::Nearest => w[0][0] = 1.0,
            Method::Lagrange(_) => self.lagrange(s - base as f64, w),
            Method::FdNoInt(_) => self.lagrange((anchor - base) as f64, w),
            Method::Fd4Lag4 => {
                // lag4 through the four nodes around s, each carrying its fd4 derivative
                // over five nodes: nodes base … base+7 in the interior. At a wall the lag4
                // nodes shift inward and the fd4 stencils near it go off-centre, all within
                // the same eight nodes; lag4 through the interior's nodes would extrapolate
                // up to two spacings (gradient weights 55/h at the wall against 11/h).
                let n = axis.n as i64;
                let first = if shifted {
                    (floor(s) - 1).clamp(0, n - 4)
                } else {
                    base + 2
                };
                let mut lag = [[0.0; MAX_WIDTH]; 3];
                self.basis.as_ref().expect("lag4 basis").eval(
                    s - first as f64,
                    &mut lag[0],
                    None,
                    None,
                );
                for (j, &l) in lag[0][..4].iter().enumerate() {
                    let node = first + j as i64;
                    let from = if shifted {
                        (node - 2).clamp(0, n - 5)
                    } else {
                        node - 2
                    };
                    let fd = &self.fd4[(node - from) as usize];
                    let (at, from) = ((node - base) as usize, (from - base) as usize);
                    w[0][at] = l;
                    for i in 0..5 {
                        w[1][from + i] += l * fd[1][i];
                        w[2][from + i] += l * fd[2][i];
                    }
                }
            }
            // A spline's end piece extrapolated past the wall has weights in the thousands
            // for second derivatives; the Lagrange polynomial through the same shifted nodes
            // is exact to a higher degree and far better conditioned.
            Method::Spline { .. } if shifted => self.lagrange(s - base as f64, w),
            Method::Spline { .. } => {
                self.spline.as_ref().expect("spline kernel").eval(
                    s - base as f64,
                    self.max_order,
                    w,
                );
            }
        }
        if self.max_order > 0 {
            let inv = 1.0 / axis.spacing;
            let scale = [1.0, inv, inv * inv];
            for (order, weights) in w.iter_mut().enumerate().skip(1).take(self.max_order) {
                for v in weights.iter_mut() {
                    *v *= scale[order];
                }
            }
        }
    }

    /// The basis of a `Lagrange(n)` kernel, whose weights (and their derivatives up to
    /// [`Self::max_order`]) the kernel's SIMD path computes itself from
    /// [`Self::lagrange_positions`]; `None` for any other kernel.
    pub fn lagrange_basis(&self) -> Option<&LagrangeBasis> {
        match self.method {
            Method::Lagrange(_) => self.basis.as_ref(),
            _ => None,
        }
    }

    /// The highest derivative order the weights are prepared for.
    pub fn max_order(&self) -> usize {
        self.max_order
    }

    /// For a Lagrange kernel: sets each axis's `base` and `wrapped` in `out` for grid
    /// position `s`, and returns the position relative to each axis's first stencil node,
    /// `[x, y, z, z]` (the spare lane repeats z).
    #[inline(always)]
    pub fn lagrange_positions(
        &self,
        s: &[f64; 3],
        axes: &[Axis; 3],
        out: &mut [AxisWeights; 3],
    ) -> [f64; 4] {
        let mut x = [0.0; 4];
        for axis in 0..3 {
            let (base, _, _) = self.placement(s[axis], &axes[axis]);
            out[axis].base = base;
            out[axis].wrapped = wrap(base, axes[axis].n);
            x[axis] = s[axis] - base as f64;
        }
        x[3] = x[2];
        x
    }

    #[inline(always)]
    fn lagrange(&self, x: f64, w: &mut [[f64; MAX_WIDTH]; 3]) {
        let basis = self.basis.as_ref().expect("Lagrange basis");
        let [w0, w1, w2] = w;
        match self.max_order {
            0 => basis.eval(x, w0, None, None),
            1 => basis.eval(x, w0, Some(w1), None),
            _ => basis.eval(x, w0, Some(w1), Some(w2)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_is_the_floor_of_any_position() {
        let tiny = f64::MIN_POSITIVE;
        for s in [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.0,
            -1.0,
            255.999_999,
            -1e-300,
            tiny,
            -tiny,
            1e15 + 0.5,
            -1e15 - 0.5,
            7.0 - f64::EPSILON * 4.0,
            f64::NAN,
        ] {
            assert_eq!(floor(s), s.floor() as i64, "position {s}");
        }
    }

    #[test]
    fn nodes_wrap_into_the_grid_near_and_far() {
        for n in [1usize, 7, 16] {
            for i in -3 * n as i64..3 * n as i64 {
                assert_eq!(
                    wrap(i, n),
                    i.rem_euclid(n as i64) as usize,
                    "node {i} of {n}"
                );
            }
        }
    }

    /// The fd4lag4 first and second derivatives of `f` at `s` on a bounded axis of `n` unit
    /// nodes, and the largest first-derivative weight.
    fn fd4lag4_at(n: usize, s: f64, f: impl Fn(f64) -> f64) -> (f64, f64, f64) {
        let kernel = Kernel::new(Method::Fd4Lag4, 2).unwrap();
        let axis = Axis::unit(n, false);
        let mut out = AxisWeights::default();
        kernel.weights(s, &axis, &mut out);
        let node = |i: usize| f((out.base + i as i64) as f64);
        let d1 = (0..8).map(|i| out.w[1][i] * node(i)).sum();
        let d2 = (0..8).map(|i| out.w[2][i] * node(i)).sum();
        let largest = out.w[1][..8].iter().fold(0.0f64, |m, w| m.max(w.abs()));
        (d1, d2, largest)
    }

    #[test]
    fn fd4lag4_at_a_wall_interpolates_between_its_nodes_and_stays_exact_for_quartics() {
        let n = 12;
        let quartic = |x: f64| 0.3 + x * (1.1 + x * (-0.7 + x * (0.05 + x * 0.002)));
        let slope = |x: f64| 1.1 + x * (-1.4 + x * (0.15 + x * 0.008));
        for k in 0..=110 {
            let s = k as f64 * 0.1;
            let (d1, _, largest) = fd4lag4_at(n, s, quartic);
            assert!(
                (d1 - slope(s)).abs() < 1e-9 * (1.0 + slope(s).abs()),
                "s {s}: {d1} against {}",
                slope(s)
            );
            // lag4 through the nodes around s, not through nodes two spacings away: the
            // weights stay those of a one-sided difference (the extrapolated ones reached 55).
            assert!(largest < 12.0, "s {s}: weight {largest}");
        }
        // Smooth data near the wall: as accurate as in the interior, to a few times.
        let f = |x: f64| (0.3 * x + 0.3).sin();
        let df = |x: f64| 0.3 * (0.3 * x + 0.3).cos();
        let interior = (fd4lag4_at(n, 5.3, f).0 - df(5.3)).abs();
        for s in [0.0, 0.3, 1.5, 10.7, 11.0] {
            let wall = (fd4lag4_at(n, s, f).0 - df(s)).abs();
            assert!(
                wall < 20.0 * interior.max(1e-12),
                "s {s}: error {wall} against {interior} inside"
            );
        }
    }
}
