//! Pairwise alignment of two jobs' query sequences by Needleman–Wunsch (Wang et al. §IV-B,
//! Fig. 3): the alignment that pairs the most queries sharing data, where a pair that shares
//! scores 1, any other pair 0 and skipping a query costs nothing. The aligned pairs that
//! share become candidate gating edges; an alignment never crosses itself, so the pairs are
//! consistent with both jobs' order.
//!
//! With these scores the alignment is a longest common subsequence under the relation
//! "shares", so its table is computed 64 cells to a machine word (Allison and Dix's
//! bit-vector recurrence, which holds for any relation): two 1 024-query jobs cost 16 384
//! word operations instead of a million cells, which made each long job's declaration
//! cost the engine's thread milliseconds per running job it was aligned with.

/// Which queries of one job share data with which of another's: row `i` is a bitset over
/// the other job's queries `j`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matches {
    rows: usize,
    columns: usize,
    words: usize,
    bits: Vec<u64>,
}

impl Matches {
    /// An empty relation of `rows × columns`.
    pub fn new(rows: usize, columns: usize) -> Self {
        let words = columns.div_ceil(64);
        Self {
            rows,
            columns,
            words,
            bits: vec![0; rows * words],
        }
    }

    /// The relation `shares(i, j)` (one call per cell: for tests and small jobs).
    pub fn from_fn(rows: usize, columns: usize, shares: impl Fn(usize, usize) -> bool) -> Self {
        let mut matches = Self::new(rows, columns);
        for i in 0..rows {
            for j in (0..columns).filter(|&j| shares(i, j)) {
                matches.row_mut(i)[j / 64] |= 1 << (j % 64);
            }
        }
        matches
    }

    /// The number of words a row takes.
    pub fn words(&self) -> usize {
        self.words
    }

    /// Row `i`'s words, to set bits in (bit `j % 64` of word `j / 64` for column `j`).
    pub fn row_mut(&mut self, i: usize) -> &mut [u64] {
        &mut self.bits[i * self.words..(i + 1) * self.words]
    }

    fn row(&self, i: usize) -> &[u64] {
        &self.bits[i * self.words..(i + 1) * self.words]
    }

    fn get(&self, i: usize, j: usize) -> bool {
        self.row(i)[j / 64] >> (j % 64) & 1 == 1
    }
}

/// The pairs `(i, j)` of an optimal alignment of sequences of `n` and `m` queries where
/// `shares(i, j)` says whether query `i` of the first and `j` of the second share data;
/// ascending in both `i` and `j`.
pub fn align(n: usize, m: usize, shares: impl Fn(usize, usize) -> bool) -> Vec<(usize, usize)> {
    align_matches(&Matches::from_fn(n, m, shares))
}

/// [`align`] of a relation given as bitsets.
pub fn align_matches(matches: &Matches) -> Vec<(usize, usize)> {
    let (n, m, words) = (matches.rows, matches.columns, matches.words);
    // Row i of the table as a bit vector V_i: the score of the first i and the first j
    // queries is the number of zero bits among V_i's first j (each zero is a column where
    // the row's score steps up). V_0 is all ones; V_i = (V + (V & M_i)) | (V & !M_i).
    let mut table = vec![u64::MAX; (n + 1) * words];
    for i in 0..n {
        let (done, rest) = table.split_at_mut((i + 1) * words);
        let (before, after) = (&done[i * words..], &mut rest[..words]);
        let mut carry = 0u64;
        for ((&v, &mask), out) in before.iter().zip(matches.row(i)).zip(after.iter_mut()) {
            let (sum, c1) = v.overflowing_add(v & mask);
            let (sum, c2) = sum.overflowing_add(carry);
            carry = u64::from(c1 | c2);
            *out = sum | (v & !mask);
        }
    }
    let score = |i: usize, j: usize| -> u32 {
        let row = &table[i * words..(i + 1) * words];
        let ones: u32 = row[..j / 64].iter().map(|w| w.count_ones()).sum::<u32>()
            + if j.is_multiple_of(64) {
                0
            } else {
                (row[j / 64] & ((1u64 << (j % 64)) - 1)).count_ones()
            };
        j as u32 - ones
    };
    let mut pairs = Vec::new();
    let (mut i, mut j) = (n, m);
    while i > 0 && j > 0 {
        let here = score(i, j);
        if matches.get(i - 1, j - 1) && here == score(i - 1, j - 1) + 1 {
            pairs.push((i - 1, j - 1));
            i -= 1;
            j -= 1;
        } else if here == score(i - 1, j) {
            i -= 1;
        } else {
            j -= 1;
        }
    }
    pairs.reverse();
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regions(a: &[u8], b: &[u8]) -> Vec<(usize, usize)> {
        align(a.len(), b.len(), |i, j| a[i] == b[j])
    }

    /// The alignment cell by cell, as it was first written (the reference).
    fn align_by_cells(
        n: usize,
        m: usize,
        shares: impl Fn(usize, usize) -> bool,
    ) -> Vec<(usize, usize)> {
        let width = m + 1;
        let mut score = vec![0u32; (n + 1) * width];
        for i in 1..=n {
            for j in 1..=m {
                let diagonal = score[(i - 1) * width + j - 1] + u32::from(shares(i - 1, j - 1));
                let up = score[(i - 1) * width + j];
                let left = score[i * width + j - 1];
                score[i * width + j] = diagonal.max(up).max(left);
            }
        }
        let mut pairs = Vec::new();
        let (mut i, mut j) = (n, m);
        while i > 0 && j > 0 {
            let here = score[i * width + j];
            if shares(i - 1, j - 1) && here == score[(i - 1) * width + j - 1] + 1 {
                pairs.push((i - 1, j - 1));
                i -= 1;
                j -= 1;
            } else if here == score[(i - 1) * width + j] {
                i -= 1;
            } else {
                j -= 1;
            }
        }
        pairs.reverse();
        pairs
    }

    #[test]
    fn the_alignment_pairs_the_most_shared_queries_without_crossing() {
        // The paper's Figure 3: j1 = R1 R2 R3 R4, j2 = R1 R3 R4.
        assert_eq!(
            regions(&[1, 2, 3, 4], &[1, 3, 4]),
            vec![(0, 0), (2, 1), (3, 2)]
        );
        // Crossing pairs cannot both be kept: A B against B A aligns one of them.
        assert_eq!(regions(&[1, 2], &[2, 1]).len(), 1);
        // Nothing shared, nothing aligned; empty jobs align to nothing.
        assert!(regions(&[1, 2, 3], &[4, 5]).is_empty());
        assert!(regions(&[], &[1]).is_empty());
        assert!(regions(&[1], &[]).is_empty());
        // A job that iterates over steps 10…19 against one on 15…24: five steps shared.
        let a: Vec<u8> = (10..20).collect();
        let b: Vec<u8> = (15..25).collect();
        assert_eq!(
            regions(&a, &b),
            (0..5).map(|k| (k + 5, k)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn long_jobs_in_step_align_query_by_query_across_word_boundaries() {
        let a: Vec<u16> = (0..1024).map(|i| i % 8).collect();
        let pairs = align(a.len(), a.len(), |i, j| a[i] == a[j]);
        assert_eq!(pairs, (0..1024).map(|k| (k, k)).collect::<Vec<_>>());
        // Shifted by 100 queries (past a word): the other job's first 924 queries pair.
        let b: Vec<u16> = (100..1124).map(|i| i % 1000).collect();
        let pairs = align(b.len(), b.len(), |i, j| b[i] == (j as u16 + 200) % 1000);
        assert_eq!(pairs.len(), 924);
        assert_eq!(
            pairs,
            align_by_cells(b.len(), b.len(), |i, j| b[i] == (j as u16 + 200) % 1000)
        );
    }

    proptest::proptest! {
        /// Any relation (not only equality of steps: a query reading two steps shares with
        /// queries on either), any sizes across word boundaries: the same pairs as the
        /// table computed cell by cell.
        #[test]
        fn bit_vectors_give_the_alignment_of_the_cell_by_cell_table(
            n in 0usize..150,
            m in 0usize..150,
            density in 0.0f64..1.0,
            seed in 0u64..u64::MAX,
        ) {
            let cell = |i: usize, j: usize| {
                let h = (seed ^ (i as u64) << 32 ^ j as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                ((h >> 11) as f64) / ((1u64 << 53) as f64) < density
            };
            proptest::prop_assert_eq!(align(n, m, cell), align_by_cells(n, m, cell));
        }
    }
}
