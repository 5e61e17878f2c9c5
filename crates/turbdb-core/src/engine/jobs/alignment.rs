//! Pairwise alignment of two jobs' query sequences by Needleman–Wunsch (Wang et al. §IV-B,
//! Fig. 3): the alignment that pairs the most queries sharing data, where a pair that shares
//! scores 1, any other pair 0 and skipping a query costs nothing. The aligned pairs that
//! share become candidate gating edges; an alignment never crosses itself, so the pairs are
//! consistent with both jobs' order.

/// The pairs `(i, j)` of an optimal alignment of sequences of `n` and `m` queries where
/// `shares(i, j)` says whether query `i` of the first and `j` of the second share data;
/// ascending in both `i` and `j`.
pub fn align(n: usize, m: usize, shares: impl Fn(usize, usize) -> bool) -> Vec<(usize, usize)> {
    // score[i][j]: the best alignment of the first i and the first j queries.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn regions(a: &[u8], b: &[u8]) -> Vec<(usize, usize)> {
        align(a.len(), b.len(), |i, j| a[i] == b[j])
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
        // A job that iterates over steps 10…19 against one on 15…24: five steps shared.
        let a: Vec<u8> = (10..20).collect();
        let b: Vec<u8> = (15..25).collect();
        assert_eq!(
            regions(&a, &b),
            (0..5).map(|k| (k + 5, k)).collect::<Vec<_>>()
        );
    }
}
