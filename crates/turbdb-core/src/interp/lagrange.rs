//! Lagrange basis polynomials through the integer nodes 0, 1, …, n−1 and their first and
//! second derivatives at any position, in O(n) per evaluation: the barycentric weights
//! (the denominators) are computed once per node count, and the products over the other
//! nodes come from prefix and suffix products, so there is no division and a position on
//! (or next to) a node is exact.

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

    /// Nodes of the basis.
    pub fn nodes(&self) -> usize {
        self.n
    }

    /// The barycentric weights `w_j`, one per node.
    pub fn barycentric(&self) -> &[f64] {
        &self.weights[..self.n]
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
        // The common widths with a fixed trip count, which the compiler unrolls.
        match n {
            4 => self.jets::<4>(x, value, first, second),
            6 => self.jets::<6>(x, value, first, second),
            8 => self.jets::<8>(x, value, first, second),
            _ => self.jets_any(n, x, value, first, second),
        }
    }
}

/// A value and its first two derivatives: a truncated Taylor series in x.
#[derive(Clone, Copy)]
struct Jet(f64, f64, f64);

impl Jet {
    const ONE: Jet = Jet(1.0, 0.0, 0.0);

    /// This times the factor `(x − k)`, whose derivative is 1, with `d = x − k`.
    #[inline(always)]
    fn times_factor(self, d: f64) -> Jet {
        Jet(self.0 * d, self.1 * d + self.0, self.2 * d + 2.0 * self.1)
    }

    /// The product of two jets (Leibniz's rule).
    #[inline(always)]
    fn times(self, o: Jet) -> Jet {
        Jet(
            self.0 * o.0,
            self.1 * o.0 + self.0 * o.1,
            self.2 * o.0 + 2.0 * self.1 * o.1 + self.0 * o.2,
        )
    }
}

impl LagrangeBasis {
    /// Values and derivatives: `L_j = w_j ∏_{k≠j} (x − k)` and its derivatives from prefix
    /// and suffix products of jets (value, first, second derivative), without a division
    /// and exact on the nodes.
    #[inline(always)]
    fn jets_any(
        &self,
        n: usize,
        x: f64,
        value: &mut [f64],
        first: Option<&mut [f64]>,
        second: Option<&mut [f64]>,
    ) {
        let mut prefix = [Jet::ONE; MAX_NODES];
        for j in 1..n {
            prefix[j] = prefix[j - 1].times_factor(x - (j - 1) as f64);
        }
        let mut l = [Jet::ONE; MAX_NODES];
        let mut suffix = Jet::ONE;
        for j in (0..n).rev() {
            l[j] = prefix[j].times(suffix);
            suffix = suffix.times_factor(x - j as f64);
        }
        for j in 0..n {
            value[j] = self.weights[j] * l[j].0;
        }
        if let Some(first) = first {
            for j in 0..n {
                first[j] = self.weights[j] * l[j].1;
            }
        }
        if let Some(second) = second {
            for j in 0..n {
                second[j] = self.weights[j] * l[j].2;
            }
        }
    }

    /// [`Self::jets_any`] for `N` nodes.
    #[inline(always)]
    fn jets<const N: usize>(
        &self,
        x: f64,
        value: &mut [f64],
        first: Option<&mut [f64]>,
        second: Option<&mut [f64]>,
    ) {
        self.jets_any(N, x, &mut value[..N], first, second);
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
