//! Lagrange basis polynomials through the integer nodes 0, 1, …, n−1 and their first and
//! second derivatives at any position, in O(n) per evaluation: the barycentric weights
//! (the denominators) are computed once per node count, and the node nearest the position
//! is kept out of every reciprocal so a position on (or next to) a node is exact.

/// Most nodes a basis may have (fd8noint needs 9).
pub const MAX_NODES: usize = 10;

/// The barycentric weights `w_j = 1 / ∏_{k≠j} (j − k)` of `n` consecutive integer nodes.
#[derive(Debug, Clone)]
pub struct LagrangeBasis {
    n: usize,
    weights: [f64; MAX_NODES],
}

impl LagrangeBasis {
    /// The basis through nodes `0..n`.
    pub fn new(n: usize) -> Self {
        assert!(
            (1..=MAX_NODES).contains(&n),
            "1..={MAX_NODES} nodes supported"
        );
        let mut weights = [0.0; MAX_NODES];
        for j in 0..n {
            let denominator: f64 = (0..n)
                .filter(|&k| k != j)
                .map(|k| j as f64 - k as f64)
                .product();
            weights[j] = 1.0 / denominator;
        }
        Self { n, weights }
    }

    /// Writes `L_j(x)`, `L_j'(x)` and (if `second`) `L_j''(x)` for every node `j` into
    /// `value`, `first` and `second`.
    #[inline(always)]
    pub fn eval(
        &self,
        x: f64,
        value: &mut [f64],
        first: Option<&mut [f64]>,
        second: Option<&mut [f64]>,
    ) {
        let n = self.n;
        if first.is_none() && second.is_none() {
            // The common widths with a fixed trip count, which the compiler unrolls.
            match n {
                4 => self.values::<4>(x, value),
                6 => self.values::<6>(x, value),
                8 => self.values::<8>(x, value),
                _ => self.values_any(n, x, value),
            }
            return;
        }
        // m: the node nearest x, whose distance may be zero; r_k = 1/(x − k) for the others.
        let m = (x.round().max(0.0) as usize).min(n - 1);
        let dm = x - m as f64;
        let mut r = [0.0; MAX_NODES];
        let mut lm = 1.0; // ∏_{k≠m} (x − k)
        let (mut sum_r, mut sum_r2) = (0.0, 0.0);
        for k in (0..n).filter(|&k| k != m) {
            let d = x - k as f64;
            lm *= d;
            r[k] = 1.0 / d;
            sum_r += r[k];
            sum_r2 += r[k] * r[k];
        }
        for j in 0..n {
            value[j] = if j == m {
                self.weights[m] * lm
            } else {
                self.weights[j] * lm * dm * r[j]
            };
        }
        if let Some(first) = first {
            for j in 0..n {
                first[j] = if j == m {
                    value[m] * sum_r
                } else {
                    // L_j·Σ_{k≠j} r_k with the r_m term multiplied out: L_j·r_m = w_j ℓ_m r_j.
                    value[j] * (sum_r - r[j]) + self.weights[j] * lm * r[j]
                };
            }
        }
        if let Some(second) = second {
            for j in 0..n {
                second[j] = if j == m {
                    value[m] * (sum_r * sum_r - sum_r2)
                } else {
                    let s = sum_r - r[j];
                    let q = sum_r2 - r[j] * r[j];
                    value[j] * (s * s - q) + 2.0 * self.weights[j] * lm * r[j] * s
                };
            }
        }
    }
}

impl LagrangeBasis {
    /// Values only: `L_j = w_j ∏_{k≠j} (x − k)` from prefix and suffix products, without a
    /// division and exact on the nodes.
    #[inline(always)]
    fn values_any(&self, n: usize, x: f64, value: &mut [f64]) {
        let mut prefix = 1.0;
        for j in 0..n {
            value[j] = prefix;
            prefix *= x - j as f64;
        }
        let mut suffix = 1.0;
        for j in (0..n).rev() {
            value[j] *= suffix * self.weights[j];
            suffix *= x - j as f64;
        }
    }

    /// [`Self::values_any`] for `N` nodes.
    #[inline(always)]
    fn values<const N: usize>(&self, x: f64, value: &mut [f64]) {
        self.values_any(N, x, &mut value[..N]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(n: usize, x: f64) -> Vec<[f64; 3]> {
        // value, first and second derivative by the textbook product formulas
        (0..n)
            .map(|j| {
                let others: Vec<f64> = (0..n).filter(|&k| k != j).map(|k| k as f64).collect();
                let denominator: f64 = others.iter().map(|&k| j as f64 - k).product();
                let value: f64 = others.iter().map(|&k| x - k).product();
                let mut first = 0.0;
                let mut second = 0.0;
                for (a, _) in others.iter().enumerate() {
                    first += others
                        .iter()
                        .enumerate()
                        .filter(|&(i, _)| i != a)
                        .map(|(_, &k)| x - k)
                        .product::<f64>();
                    for (b, _) in others.iter().enumerate().filter(|&(b, _)| b != a) {
                        second += others
                            .iter()
                            .enumerate()
                            .filter(|&(i, _)| i != a && i != b)
                            .map(|(_, &k)| x - k)
                            .product::<f64>();
                    }
                }
                [
                    value / denominator,
                    first / denominator,
                    second / denominator,
                ]
            })
            .collect()
    }

    #[test]
    fn matches_the_product_formulas_on_and_between_nodes() {
        for n in 2..=9 {
            let basis = LagrangeBasis::new(n);
            for &x in &[
                0.0,
                0.3,
                1.0,
                1.5,
                2.999999999,
                3.25,
                n as f64 - 1.0,
                -0.5,
                n as f64 + 0.4,
            ] {
                let (mut v, mut d1, mut d2) =
                    ([0.0; MAX_NODES], [0.0; MAX_NODES], [0.0; MAX_NODES]);
                basis.eval(x, &mut v, Some(&mut d1), Some(&mut d2));
                let mut values_only = [0.0; MAX_NODES];
                basis.eval(x, &mut values_only, None, None);
                for (j, expected) in naive(n, x).iter().enumerate() {
                    assert!(
                        (values_only[j] - expected[0]).abs() < 1e-11,
                        "n={n} x={x} j={j} value only"
                    );
                    let tol = 1e-9 * (1.0 + expected[2].abs());
                    assert!(
                        (v[j] - expected[0]).abs() < 1e-11,
                        "n={n} x={x} j={j} value"
                    );
                    assert!(
                        (d1[j] - expected[1]).abs() < tol,
                        "n={n} x={x} j={j} first {} {}",
                        d1[j],
                        expected[1]
                    );
                    assert!(
                        (d2[j] - expected[2]).abs() < tol,
                        "n={n} x={x} j={j} second {} {}",
                        d2[j],
                        expected[2]
                    );
                }
            }
        }
    }

    #[test]
    fn five_point_basis_at_its_centre_is_the_fourth_order_central_difference() {
        let basis = LagrangeBasis::new(5);
        let (mut v, mut d1, mut d2) = ([0.0; MAX_NODES], [0.0; MAX_NODES], [0.0; MAX_NODES]);
        basis.eval(2.0, &mut v, Some(&mut d1), Some(&mut d2));
        let expected1 = [1.0 / 12.0, -2.0 / 3.0, 0.0, 2.0 / 3.0, -1.0 / 12.0];
        let expected2 = [-1.0 / 12.0, 4.0 / 3.0, -5.0 / 2.0, 4.0 / 3.0, -1.0 / 12.0];
        for j in 0..5 {
            assert!((d1[j] - expected1[j]).abs() < 1e-14);
            assert!((d2[j] - expected2[j]).abs() < 1e-13);
            assert_eq!(v[j], if j == 2 { 1.0 } else { 0.0 });
        }
    }
}
