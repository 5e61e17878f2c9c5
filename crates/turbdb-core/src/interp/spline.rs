//! JHTDB's MmQq smoothing splines: between two nodes, the Hermite polynomial of degree
//! 2m+1 that matches the value and the first m derivatives at both nodes, those derivatives
//! estimated by centred differences over q−1 nodes. The kernel is C^m and its stencil spans
//! q nodes. Each node's weight is a polynomial in the fractional offset, built once.

use crate::error::{Error, Result};
use crate::interp::lagrange::LagrangeBasis;
use crate::interp::method::MAX_WIDTH;

/// Highest polynomial degree + 1 supported (m ≤ 3).
const MAX_COEFFS: usize = 8;

/// Weight polynomials of one MmQq spline.
#[derive(Debug, Clone)]
pub struct SplineKernel {
    q: usize,
    degree: usize,
    /// `coeffs[j][k]`: coefficient of ξ^k in the weight of stencil node j.
    coeffs: [[f64; MAX_COEFFS]; MAX_WIDTH],
}

impl SplineKernel {
    /// The spline of smoothness `m` over `q` nodes.
    pub fn new(m: usize, q: usize) -> Result<Self> {
        if !q.is_multiple_of(2) || q < 2 * m + 2 || q > MAX_WIDTH || 2 * m + 2 > MAX_COEFFS {
            return Err(Error::InvalidArgument(format!(
                "no spline m{m}q{q}: need even q >= 2m+2"
            )));
        }
        let degree = 2 * m + 1;
        let hermite = hermite_basis(m);
        // Derivatives at a node from the q−1 nodes centred on it.
        let fd_nodes = q - 1;
        let centre = (fd_nodes / 2) as f64;
        let basis = LagrangeBasis::new(fd_nodes);
        let mut derivative = vec![[0.0; MAX_WIDTH]; m + 1];
        {
            let (mut v, mut d1, mut d2) = ([0.0; 10], [0.0; 10], [0.0; 10]);
            basis.eval(centre, &mut v, Some(&mut d1), Some(&mut d2));
            let rows = [v, d1, d2];
            for (d, row) in derivative.iter_mut().enumerate() {
                if d <= 2 {
                    row[..fd_nodes].copy_from_slice(&rows[d][..fd_nodes]);
                } else {
                    return Err(Error::InvalidArgument(format!(
                        "spline smoothness {m} is not supported"
                    )));
                }
            }
        }
        // Stencil node j sits at offset j − (q/2 − 1) from the left node of the interval.
        // The left node's derivative stencil covers j = 0 … q−2, the right one's j = 1 … q−1.
        let mut coeffs = [[0.0; MAX_COEFFS]; MAX_WIDTH];
        for (end, shift) in [(0usize, 0usize), (1, 1)] {
            for d in 0..=m {
                let h = &hermite[end * (m + 1) + d];
                for i in 0..fd_nodes {
                    let weight = derivative[d][i];
                    for k in 0..=degree {
                        coeffs[i + shift][k] += weight * h[k];
                    }
                }
            }
        }
        Ok(Self { q, degree, coeffs })
    }

    /// Writes the weights of orders `0..=max_order` at stencil-relative position `x`
    /// (node j at j), which lies in `[q/2 − 1, q/2)` away from walls.
    pub fn eval(&self, x: f64, max_order: usize, w: &mut [[f64; MAX_WIDTH]; 3]) {
        let xi = x - (self.q / 2 - 1) as f64;
        for j in 0..self.q {
            let c = &self.coeffs[j];
            let (mut p, mut dp, mut ddp) = (0.0, 0.0, 0.0);
            for k in (0..=self.degree).rev() {
                ddp = ddp * xi + 2.0 * dp;
                dp = dp * xi + p;
                p = p * xi + c[k];
            }
            w[0][j] = p;
            if max_order >= 1 {
                w[1][j] = dp;
            }
            if max_order >= 2 {
                w[2][j] = ddp;
            }
        }
    }
}

/// Coefficients (ξ^0 … ξ^{2m+1}) of the Hermite basis on [0, 1]: entry `end·(m+1) + d` is
/// the polynomial whose d-th derivative is 1 at `end` and all other constraints are 0.
fn hermite_basis(m: usize) -> Vec<[f64; MAX_COEFFS]> {
    let size = 2 * m + 2;
    // Row (end, d): the d-th derivative of ξ^k at ξ = end.
    let mut matrix = vec![vec![0.0; size]; size];
    for end in 0..2 {
        for d in 0..=m {
            for k in d..size {
                let falling: f64 = (0..d).map(|i| (k - i) as f64).product();
                let at = if end == 0 {
                    if k == d {
                        1.0
                    } else {
                        0.0
                    }
                } else {
                    1.0
                };
                matrix[end * (m + 1) + d][k] = falling * at;
            }
        }
    }
    let inverse = invert(matrix);
    (0..size)
        .map(|constraint| {
            let mut c = [0.0; MAX_COEFFS];
            for k in 0..size {
                c[k] = inverse[k][constraint];
            }
            c
        })
        .collect()
}

/// Gauss–Jordan inverse of a small well-conditioned matrix.
fn invert(mut a: Vec<Vec<f64>>) -> Vec<Vec<f64>> {
    let n = a.len();
    let mut inv: Vec<Vec<f64>> = (0..n)
        .map(|i| (0..n).map(|j| f64::from(u8::from(i == j))).collect())
        .collect();
    for col in 0..n {
        let pivot = (col..n)
            .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
            .expect("rows");
        a.swap(col, pivot);
        inv.swap(col, pivot);
        let p = a[col][col];
        for j in 0..n {
            a[col][j] /= p;
            inv[col][j] /= p;
        }
        for row in 0..n {
            if row != col {
                let f = a[row][col];
                for j in 0..n {
                    a[row][j] -= f * a[col][j];
                    inv[row][j] -= f * inv[col][j];
                }
            }
        }
    }
    inv
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(kernel: &SplineKernel, x: f64) -> [[f64; MAX_WIDTH]; 3] {
        let mut w = [[0.0; MAX_WIDTH]; 3];
        kernel.eval(x, 2, &mut w);
        w
    }

    #[test]
    fn m1q4_is_the_catmull_rom_spline() {
        let k = SplineKernel::new(1, 4).unwrap();
        let w = weights(&k, 1.5);
        let expected = [-0.0625, 0.5625, 0.5625, -0.0625];
        for j in 0..4 {
            assert!((w[0][j] - expected[j]).abs() < 1e-14, "{:?}", w[0]);
        }
    }

    #[test]
    fn splines_interpolate_nodes_and_weights_sum_to_one() {
        for (m, q) in [(1, 4), (2, 8), (1, 6), (2, 6)] {
            let k = SplineKernel::new(m, q).unwrap();
            let left = (q / 2 - 1) as f64;
            let at_node = weights(&k, left);
            for j in 0..q {
                let expected = if j == q / 2 - 1 { 1.0 } else { 0.0 };
                assert!(
                    (at_node[0][j] - expected).abs() < 1e-13,
                    "m{m}q{q} {:?}",
                    at_node[0]
                );
            }
            for x in [0.1, 0.5, 0.9] {
                let w = weights(&k, left + x);
                assert!((w[0][..q].iter().sum::<f64>() - 1.0).abs() < 1e-13);
                assert!(w[1][..q].iter().sum::<f64>().abs() < 1e-12);
                assert!(w[2][..q].iter().sum::<f64>().abs() < 1e-11);
            }
        }
    }

    #[test]
    fn m2q8_kernel_is_twice_continuously_differentiable_across_nodes() {
        // The weight of a node as the position crosses an interval boundary: the right end
        // of one interval (stencil shifted by one node) equals the left end of the next.
        let k = SplineKernel::new(2, 8).unwrap();
        let left = weights(&k, 3.0 + 1.0 - 1e-12);
        let right = weights(&k, 3.0);
        for order in 0..3 {
            for j in 1..8 {
                let a = left[order][j];
                let b = right[order][j - 1];
                assert!((a - b).abs() < 1e-8, "order {order} node {j}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn weights_match_the_reference_vectors_of_docs_methods_md() {
        // docs/methods.md §4.4, computed independently in exact arithmetic from pyJHTDB's
        // construction.
        let m1q4 = SplineKernel::new(1, 4).unwrap();
        let w = weights(&m1q4, 1.25);
        let expected = [
            [-0.0703125, 0.8671875, 0.2265625, -0.0234375],
            [-0.09375, -0.96875, 1.21875, -0.15625],
            [1.25, -2.75, 1.75, -0.25],
        ];
        for order in 0..3 {
            for j in 0..4 {
                assert!(
                    (w[order][j] - expected[order][j]).abs() < 1e-12,
                    "m1q4 order {order}: {:?}",
                    w[order]
                );
            }
        }
        let m2q8 = SplineKernel::new(2, 8).unwrap();
        let w = weights(&m2q8, 3.8);
        let expected = [
            [
                -0.000334222222,
                0.005724444444,
                -0.038592,
                0.189191111111,
                0.934364444444,
                -0.111168,
                0.023431111111,
                -0.002616888889,
            ],
            [
                0.004311111111,
                -0.046444444444,
                0.2484,
                -1.160888888889,
                0.684222222222,
                0.3348,
                -0.072222222222,
                0.007822222222,
            ],
            [
                -0.029777777778,
                0.192222222222,
                -0.54,
                2.095555555556,
                -3.584444444444,
                2.322,
                -0.517777777778,
                0.062222222222,
            ],
        ];
        for order in 0..3 {
            for j in 0..8 {
                assert!(
                    (w[order][j] - expected[order][j]).abs() < 1e-9,
                    "m2q8 order {order}: {:?}",
                    w[order]
                );
            }
        }
    }
}
