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

/// Four positions, one per lane: the three axes of a point (and a spare lane) evaluated by
/// one pass of vector arithmetic instead of three scalar passes.
pub type Lanes = [f64; 4];

/// `f` applied lane by lane (written so the compiler emits one vector operation).
#[inline(always)]
fn lanewise(f: impl Fn(usize) -> f64) -> Lanes {
    std::array::from_fn(f)
}

impl LagrangeBasis {
    /// The basis of `N` nodes (`N` must be this basis's node count) at four positions at
    /// once: `value[j][lane] = L_j(x[lane])`, and `first`, `second` the same for the
    /// derivatives when asked for. The operations per lane are those of [`Self::eval`], in
    /// the same order, so the results are bit for bit the same.
    #[inline(always)]
    pub fn eval_lanes<const N: usize>(
        &self,
        x: Lanes,
        value: &mut [Lanes; N],
        first: Option<&mut [Lanes; N]>,
        second: Option<&mut [Lanes; N]>,
    ) {
        debug_assert_eq!(N, self.n);
        if first.is_none() && second.is_none() {
            // The prefix products stay in registers: written to `value` in pieces and read
            // back whole, they stalled on store-to-load forwarding.
            let mut prefix = [[1.0; 4]; N];
            for j in 1..N {
                prefix[j] = lanewise(|l| prefix[j - 1][l] * (x[l] - (j - 1) as f64));
            }
            let mut suffix = [1.0; 4];
            for j in (0..N).rev() {
                value[j] = lanewise(|l| prefix[j][l] * (suffix[l] * self.weights[j]));
                suffix = lanewise(|l| suffix[l] * (x[l] - j as f64));
            }
            return;
        }
        // Jets (value, first, second) lane by lane, as `jets_any` does them one at a time.
        let one = ([1.0; 4], [0.0; 4], [0.0; 4]);
        let times_factor = |a: (Lanes, Lanes, Lanes), d: Lanes| {
            (
                lanewise(|l| a.0[l] * d[l]),
                lanewise(|l| a.1[l] * d[l] + a.0[l]),
                lanewise(|l| a.2[l] * d[l] + 2.0 * a.1[l]),
            )
        };
        let mut prefix = [one; N];
        for j in 1..N {
            let d = lanewise(|l| x[l] - (j - 1) as f64);
            prefix[j] = times_factor(prefix[j - 1], d);
        }
        let mut suffix = one;
        let mut jets = [one; N];
        for j in (0..N).rev() {
            let (p, s) = (prefix[j], suffix);
            jets[j] = (
                lanewise(|l| p.0[l] * s.0[l]),
                lanewise(|l| p.1[l] * s.0[l] + p.0[l] * s.1[l]),
                lanewise(|l| p.2[l] * s.0[l] + 2.0 * p.1[l] * s.1[l] + p.0[l] * s.2[l]),
            );
            suffix = times_factor(suffix, lanewise(|l| x[l] - j as f64));
        }
        for j in 0..N {
            value[j] = lanewise(|l| self.weights[j] * jets[j].0[l]);
        }
        if let Some(first) = first {
            for j in 0..N {
                first[j] = lanewise(|l| self.weights[j] * jets[j].1[l]);
            }
        }
        if let Some(second) = second {
            for j in 0..N {
                second[j] = lanewise(|l| self.weights[j] * jets[j].2[l]);
            }
        }
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
    fn four_positions_in_lanes_equal_four_evaluations_bit_for_bit() {
        fn check<const N: usize>() {
            let basis = LagrangeBasis::new(N);
            for xs in [
                [0.0, 0.3, 3.25, 2.999999999],
                [-0.5, N as f64 - 1.0, 1.5, N as f64 + 0.4],
            ] {
                let (mut v, mut d1, mut d2) = ([[0.0; 4]; N], [[0.0; 4]; N], [[0.0; 4]; N]);
                basis.eval_lanes::<N>(xs, &mut v, Some(&mut d1), Some(&mut d2));
                let mut values_only = [[0.0; 4]; N];
                basis.eval_lanes::<N>(xs, &mut values_only, None, None);
                for (lane, &x) in xs.iter().enumerate() {
                    let (mut e, mut e1, mut e2) =
                        ([0.0; MAX_NODES], [0.0; MAX_NODES], [0.0; MAX_NODES]);
                    basis.eval(x, &mut e, Some(&mut e1), Some(&mut e2));
                    let mut e0 = [0.0; MAX_NODES];
                    basis.eval(x, &mut e0, None, None);
                    for j in 0..N {
                        assert_eq!(
                            values_only[j][lane].to_bits(),
                            e0[j].to_bits(),
                            "N={N} x={x}"
                        );
                        assert_eq!(v[j][lane].to_bits(), e[j].to_bits(), "N={N} x={x}");
                        assert_eq!(d1[j][lane].to_bits(), e1[j].to_bits(), "N={N} x={x}");
                        assert_eq!(d2[j][lane].to_bits(), e2[j].to_bits(), "N={N} x={x}");
                    }
                }
            }
        }
        check::<4>();
        check::<6>();
        check::<8>();
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
