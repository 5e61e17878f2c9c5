//! Where a cell block's z planes start, so that a stencil's rows do not crowd into a few
//! sets of the L1 cache.
//!
//! A block of 64 × 64 nodes of three float32 components has planes of 48 KiB, a multiple
//! of 4 KiB: row `y` of every plane then falls in the same L1 sets (a set is picked by
//! address bits 6–11), so the eight planes of a lag8 stencil fill all eight ways of a few
//! sets, and the next point's stencil evicts rows this one still needs. A few nodes of
//! padding per plane spread the stencil over all the sets.
//!
//! Measured with `kernel_profile` (2-core AMD EPYC with AVX-512, a Zen 4 class core; lag8
//! velocity at 10⁶ uniform points on syn256, 1 thread, the build without padding run
//! alternately): the summing phase went from 198 to 163 ns a point on the AVX2 path and
//! from 219 to 176 on AVX-512 (docs/queries.md has the table).

/// Bytes in a cache line.
const LINE: usize = 64;
/// Sets of the L1 data cache (32 KiB, 8 ways, 64-byte lines on every x86 and Arm core we
/// run on; a cache with more sets is only helped by the same spread).
const SETS: usize = 64;

/// Nodes from one z plane of a block to the next: `row × rows` (nodes per row × rows per
/// plane), plus the padding that spreads the rows of a `width`³ stencil most evenly over
/// the L1 sets. `node_bytes` is the size of one node (all its components).
pub(crate) fn padded_plane(row: usize, rows: usize, node_bytes: usize, width: usize) -> usize {
    let dense = row * rows;
    if node_bytes == 0 || width == 0 || rows < width {
        return dense;
    }
    // One set period (4 KiB) of padding is every distinct placement there is.
    let candidates = (SETS * LINE).div_ceil(node_bytes);
    (0..candidates)
        .min_by_key(|&pad| {
            crowding(
                row * node_bytes,
                (dense + pad) * node_bytes,
                node_bytes,
                width,
            )
        })
        .map_or(dense, |pad| dense + pad)
}

/// How crowded the L1 sets are under the lines of a `width`³ stencil, for every place its
/// first node can take in a line (the x offset varies from point to point): the fullest
/// set's line count, then the sum of the squared counts (lower is more even). The
/// fullest set counts first: at the eight ways a set holds, the stencil alone fills it,
/// and the next point's stencil, its weights and its sums evict rows still needed.
/// Row and plane strides are in bytes.
fn crowding(
    row_bytes: usize,
    plane_bytes: usize,
    node_bytes: usize,
    width: usize,
) -> (usize, usize) {
    let run = width * node_bytes;
    let (mut fullest, mut squares) = (0, 0);
    for offset in (0..LINE).step_by(node_bytes.clamp(1, LINE)) {
        let mut lines = [0usize; SETS];
        for z in 0..width {
            for y in 0..width {
                let start = offset + z * plane_bytes + y * row_bytes;
                for line in start / LINE..=(start + run - 1) / LINE {
                    lines[line % SETS] += 1;
                }
            }
        }
        fullest = fullest.max(*lines.iter().max().unwrap_or(&0));
        squares += lines.iter().map(|&n| n * n).sum::<usize>();
    }
    (fullest, squares)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ways of each L1 set.
    const WAYS: usize = 8;

    #[test]
    fn planes_a_multiple_of_four_kib_apart_get_padded_until_the_stencil_spreads() {
        // 64 × 64 nodes of 3 float32: 48 KiB planes, row y of every plane on the same sets,
        // which the eight planes of a lag8 stencil fill to all eight ways.
        let (row, rows, node) = (64, 64, 12);
        let dense = crowding(row * node, row * rows * node, node, 8);
        assert_eq!(dense.0, WAYS);
        let plane = padded_plane(row, rows, node, 8);
        assert!(plane > row * rows && plane <= row * rows + 4096 / node + 1);
        let padded = crowding(row * node, plane * node, node, 8);
        // About 160 lines over 64 sets: three or four a set at best.
        assert!(
            padded.0 <= 4,
            "padded planes should spread the stencil: {padded:?}"
        );
        assert!(padded.1 < dense.1);
    }

    #[test]
    fn padding_never_crowds_more_and_thin_blocks_keep_their_planes() {
        // Fewer rows than the stencil is wide: no padding.
        assert_eq!(padded_plane(64, 4, 12, 8), 256);
        for (row, rows, node, width) in [
            (15, 15, 12, 8),
            (40, 24, 24, 6),
            (64, 64, 4, 4),
            (32, 32, 8, 8),
        ] {
            let dense = crowding(row * node, row * rows * node, node, width);
            let plane = padded_plane(row, rows, node, width);
            assert!(plane >= row * rows && plane < row * rows + 4096 / node + 1);
            assert!(crowding(row * node, plane * node, node, width) <= dense);
        }
    }
}
