//! Property tests of Morton codes: they round trip, and sorting by code keeps every aligned
//! power-of-two cube contiguous (what makes a shard one sequential range of atoms).

use proptest::prelude::*;
use turbdb_core::morton::{decode, encode, MAX_COORD};

proptest! {
    #[test]
    fn encode_then_decode_is_identity(x in 0..=MAX_COORD, y in 0..=MAX_COORD, z in 0..=MAX_COORD) {
        prop_assert_eq!(decode(encode(x, y, z)), (x, y, z));
    }

    #[test]
    fn aligned_cubes_are_contiguous_code_ranges(
        level in 0u32..6, cx in 0u32..64, cy in 0u32..64, cz in 0u32..64,
        dx in 0u32..64, dy in 0u32..64, dz in 0u32..64,
    ) {
        let side = 1u32 << level;
        let base = encode(cx * side, cy * side, cz * side);
        let code = encode(cx * side + dx % side, cy * side + dy % side, cz * side + dz % side);
        prop_assert!(code >= base && code < base + u64::from(side).pow(3));
    }

    #[test]
    fn code_order_is_monotone_in_each_axis(x in 0..MAX_COORD, y in 0..=MAX_COORD, z in 0..=MAX_COORD) {
        prop_assert!(encode(x + 1, y, z) > encode(x, y, z));
    }
}
