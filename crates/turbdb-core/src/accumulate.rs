//! The inner loop of every strategy: add one atom's contribution to one point's partial
//! sums, walking the atom's rows in memory order with all components together, summing
//! along x first (per derivative order needed) and then weighting by y and z.

use crate::method::Term;
use crate::stencil::{AxisWeights, MAX_WIDTH};

/// Nodes of one point's stencil that lie in one atom, along one axis: runs of
/// `(first stencil node, first atom-local index, length)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Runs {
    runs: [(usize, usize, usize); 3],
    count: usize,
}

impl Runs {
    /// The stencil nodes `base … base+width−1` (wrapped on `n` nodes) that fall in the
    /// atom starting at node `atom_start` of side `atom`.
    #[inline]
    pub fn new(base: i64, width: usize, n: usize, atom_start: usize, atom: usize) -> Self {
        let mut runs = Runs::default();
        let end = (atom_start + atom).min(n);
        let mut k = 0;
        while k < width {
            let node = (base + k as i64).rem_euclid(n as i64) as usize;
            if node >= atom_start && node < end {
                // as many following stencil nodes as stay inside the atom without wrapping
                let len = (end - node).min(width - k);
                runs.runs[runs.count] = (k, node - atom_start, len);
                runs.count += 1;
                k += len;
                if runs.count == runs.runs.len() {
                    break;
                }
            } else {
                k += 1;
            }
        }
        runs
    }

    /// Whether no stencil node falls in the atom.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    #[inline]
    fn iter(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.runs[..self.count].iter().flat_map(|&(k, l, len)| (0..len).map(move |i| (k + i, l + i)))
    }
}

/// What one evaluation needs to know about the operator.
#[derive(Debug, Clone)]
pub struct TermSet {
    terms: Vec<Term>,
    slots: usize,
    x_orders: Vec<usize>,
}

impl TermSet {
    /// The terms of an operator with `slots` outputs per component.
    pub fn new(terms: &[Term], slots: usize) -> Self {
        let mut x_orders: Vec<usize> = terms.iter().map(|t| t.orders[0]).collect();
        x_orders.sort_unstable();
        x_orders.dedup();
        Self { terms: terms.to_vec(), slots, x_orders }
    }

    /// Output values per component.
    pub fn slots(&self) -> usize {
        self.slots
    }
}

/// Adds `scale` × the contribution of one atom (`values`, C order `(z, y, x, c)`, side
/// `atom`) to `out` (`[c * slots + slot]`) for the stencil `w` of one point.
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn accumulate<const NC: usize>(
    values: &[f32],
    atom: usize,
    runs: &[Runs; 3],
    w: &[AxisWeights; 3],
    terms: &TermSet,
    scale: f64,
    out: &mut [f64],
) {
    let row_len = atom * NC;
    for (kz, lz) in runs[2].iter() {
        for (ky, ly) in runs[1].iter() {
            let row = &values[(lz * atom + ly) * row_len..][..row_len];
            let mut sums = [[0.0f64; NC]; 3];
            for &order in &terms.x_orders {
                let wx: &[f64; MAX_WIDTH] = &w[0].w[order];
                let sum = &mut sums[order];
                for &(k, l, len) in &runs[0].runs[..runs[0].count] {
                    let cells = &row[l * NC..(l + len) * NC];
                    for (i, voxel) in cells.chunks_exact(NC).enumerate() {
                        let weight = wx[k + i];
                        for c in 0..NC {
                            sum[c] += weight * f64::from(voxel[c]);
                        }
                    }
                }
            }
            for term in &terms.terms {
                let [ox, oy, oz] = term.orders;
                let factor = scale * w[1].w[oy][ky] * w[2].w[oz][kz];
                for c in 0..NC {
                    out[c * terms.slots + term.slot] += factor * sums[ox][c];
                }
            }
        }
    }
}

/// [`accumulate`] for any component count (specialised for 1 and 3).
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn accumulate_any(
    ncomp: usize,
    values: &[f32],
    atom: usize,
    runs: &[Runs; 3],
    w: &[AxisWeights; 3],
    terms: &TermSet,
    scale: f64,
    out: &mut [f64],
) {
    match ncomp {
        1 => accumulate::<1>(values, atom, runs, w, terms, scale, out),
        3 => accumulate::<3>(values, atom, runs, w, terms, scale, out),
        _ => {
            // Rare component counts: one component at a time through the scalar kernel.
            let mut scalar = vec![0f32; atom * atom * atom];
            let mut partial = vec![0f64; terms.slots];
            for c in 0..ncomp {
                for (v, chunk) in scalar.iter_mut().zip(values.chunks_exact(ncomp)) {
                    *v = chunk[c];
                }
                partial.fill(0.0);
                accumulate::<1>(&scalar, atom, runs, w, terms, scale, &mut partial);
                for s in 0..terms.slots {
                    out[c * terms.slots + s] += partial[s];
                }
            }
        }
    }
}
