//! The cluster mediator's split of a point query by the groups of workers its stencils
//! reach (Kanov et al. §3.3), in one pass over the points instead of numpy passes over
//! every (shard combination, time table) column. The data model (groups, tables, units)
//! belongs to `turbdb.cluster.routing`; this is its hot loop.

use crate::error::{Error, Result};

/// Where each point's stencil lies: per axis, the shards it touches as an `(N, K_axis)`
/// row-major table, `-1` where a column repeats an earlier one; column 0 is the shard the
/// stencil starts in.
pub struct Reach<'a> {
    pub columns: [&'a [i32]; 3],
    pub widths: [usize; 3],
}

/// The points of every group, ordered by group, then by the shard each point lies in, then
/// by index; which shards each group holds that some stencil reaches, per time table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointSplit {
    /// Point indices, group after group.
    pub rows: Vec<i64>,
    /// Group `g`'s points are `rows[offsets[g]..offsets[g + 1]]`.
    pub offsets: Vec<usize>,
    /// `(tables, groups, shards)` row-major: table `u` maps a reached shard to group `g`.
    pub touched: Vec<bool>,
}

/// Splits `N` points by group. `shards` is the shard grid `(nx, ny, nz)`; `tables` holds
/// `U` tables of `nx·ny·nz` group indices below `groups`, one per distinct time table.
/// A point goes to each group once, however many of its shards (at however many time
/// levels) the group holds.
pub fn split_points(
    reach: &Reach<'_>,
    shards: [usize; 3],
    tables: &[i32],
    groups: usize,
) -> Result<PointSplit> {
    let invalid = |m: String| Error::InvalidArgument(m);
    let count = shards[0] * shards[1] * shards[2];
    if count == 0 || !tables.len().is_multiple_of(count) {
        return Err(invalid(format!(
            "group tables must hold {count} shards each, not {} entries in all",
            tables.len()
        )));
    }
    let n_tables = tables.len() / count;
    if let Some(&g) = tables.iter().find(|&&g| g < 0 || g as usize >= groups) {
        return Err(invalid(format!("group index {g} outside 0..{groups}")));
    }
    let mut n = None;
    for a in 0..3 {
        let (col, k) = (reach.columns[a], reach.widths[a]);
        if k == 0 || col.len() % k != 0 {
            return Err(invalid(format!(
                "axis {a}: {} shards do not fill rows of {k}",
                col.len()
            )));
        }
        if *n.get_or_insert(col.len() / k) != col.len() / k {
            return Err(invalid("the three axes must have as many points".into()));
        }
        if let Some(&s) = col.iter().find(|&&s| s < -1 || s >= shards[a] as i32) {
            return Err(invalid(format!(
                "axis {a}: shard {s} outside 0..{}",
                shards[a]
            )));
        }
        if (0..col.len() / k).any(|i| col[i * k] < 0) {
            return Err(invalid(format!(
                "axis {a}: the first shard of a point is missing"
            )));
        }
    }
    let n = n.unwrap_or(0);
    let [kx, ky, kz] = reach.widths;
    let [xs, ys, zs] = reach.columns;
    let (nx, ny) = (shards[0], shards[1]);

    // Each point's distinct groups (few: the shards a stencil reaches times the tables),
    // kept point after point for the second pass.
    let mut touched = vec![false; n_tables * groups * count];
    let mut found: Vec<u32> = Vec::with_capacity(n + n / 2);
    let mut ends: Vec<usize> = Vec::with_capacity(n);
    // A stable counting sort by (group, home shard): count, then place.
    let mut starts = vec![0usize; groups * count + 1];
    for i in 0..n {
        let first = found.len();
        for &cx in &xs[i * kx..(i + 1) * kx] {
            for &cy in &ys[i * ky..(i + 1) * ky] {
                for &cz in &zs[i * kz..(i + 1) * kz] {
                    if cx < 0 || cy < 0 || cz < 0 {
                        continue;
                    }
                    let shard = cx as usize + nx * (cy as usize + ny * cz as usize);
                    for u in 0..n_tables {
                        let g = tables[u * count + shard] as usize;
                        touched[(u * groups + g) * count + shard] = true;
                        if !found[first..].contains(&(g as u32)) {
                            found.push(g as u32);
                        }
                    }
                }
            }
        }
        ends.push(found.len());
        let home = xs[i * kx] as usize + nx * (ys[i * ky] as usize + ny * zs[i * kz] as usize);
        for &g in &found[first..] {
            starts[g as usize * count + home + 1] += 1;
        }
    }
    for k in 1..starts.len() {
        starts[k] += starts[k - 1];
    }
    let offsets = (0..=groups).map(|g| starts[g * count]).collect();
    let mut rows = vec![0i64; found.len()];
    let mut next = starts;
    let mut first = 0;
    for (i, &end) in ends.iter().enumerate() {
        let home = xs[i * kx] as usize + nx * (ys[i * ky] as usize + ny * zs[i * kz] as usize);
        for &g in &found[first..end] {
            let slot = &mut next[g as usize * count + home];
            rows[*slot] = i as i64;
            *slot += 1;
        }
        first = end;
    }
    Ok(PointSplit {
        rows,
        offsets,
        touched,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two shards along x, one table putting shard 0 in group 1 and shard 1 in group 0.
    #[test]
    fn points_are_ordered_by_group_then_home_shard_then_index() {
        let xs = [1, -1, 0, 1, 1, -1, 0, -1];
        let zero = [0, -1, 0, -1, 0, -1, 0, -1];
        let reach = Reach {
            columns: [&xs, &zero, &zero],
            widths: [2, 2, 2],
        };
        let split = split_points(&reach, [2, 1, 1], &[1, 0], 2).unwrap();
        // Group 0 (shard 1): point 1 (home shard 0) first, then 0 and 2; group 1: 1 and 3.
        assert_eq!(split.offsets, vec![0, 3, 5]);
        assert_eq!(split.rows, vec![1, 0, 2, 1, 3]);
        assert_eq!(split.touched, vec![false, true, true, false]);
    }

    #[test]
    fn a_group_index_outside_the_groups_is_an_error() {
        let xs = [0];
        let reach = Reach {
            columns: [&xs, &xs, &xs],
            widths: [1, 1, 1],
        };
        assert!(split_points(&reach, [1, 1, 1], &[3], 2).is_err());
        assert!(split_points(&reach, [1, 1, 1], &[0, 0], 2).is_ok());
        assert!(split_points(&reach, [2, 1, 1], &[0], 1).is_err());
    }
}
