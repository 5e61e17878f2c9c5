//! The cuts of the last point queries, kept so that a query asked again with the same
//! points — a probe array asked at every time step, a figure redrawn — is not cut again.
//! The cut ([`PointWork`]: the points sorted by atom, each stencil's atoms, each atom's
//! points) does not depend on the time step or on the data, only on the points, the
//! method, the operator and the grid; for a small query it costs as much as serving it
//! from the cache.
//!
//! A few cuts are kept, the most recently used first, bounded by their points; a query is
//! matched exactly (every coordinate), so a kept cut is always the one the query would get.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::engine::subquery::PointWork;
use crate::error::Result;
use crate::interp::method::{Method, Operator};
use crate::storage::axis::Axis;
use crate::storage::geometry::{FieldGeometry, ShardPos};

/// Most points kept over all cuts (a lag8 cut holds about 100 bytes a point).
const MAX_POINTS: usize = 1 << 18;
/// Most cuts kept.
const MAX_CUTS: usize = 16;

/// What a cut depends on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CutKey<'a> {
    pub(crate) points: &'a [[f64; 3]],
    pub(crate) method: Method,
    pub(crate) operator: Operator,
    pub(crate) axes: [Axis; 3],
    pub(crate) geometry: &'a FieldGeometry,
    pub(crate) partitions: Option<&'a [ShardPos]>,
}

impl CutKey<'_> {
    /// The query cut anew.
    pub(crate) fn cut(&self) -> Result<PointWork> {
        PointWork::new(
            self.points,
            self.method,
            self.operator,
            self.axes,
            self.geometry.clone(),
            self.partitions,
        )
    }
}

struct Kept {
    points: Vec<[f64; 3]>,
    method: Method,
    operator: Operator,
    axes: [Axis; 3],
    geometry: FieldGeometry,
    partitions: Option<Vec<ShardPos>>,
    work: Arc<PointWork>,
}

impl Kept {
    fn matches(&self, key: &CutKey<'_>) -> bool {
        // The cheap differences first; the points last (usually their first one differs).
        self.points.len() == key.points.len()
            && self.method == key.method
            && self.operator == key.operator
            && self.axes == key.axes
            && self.geometry == *key.geometry
            && self.partitions.as_deref() == key.partitions
            && self.points == key.points
    }
}

/// The kept cuts, most recently used first.
#[derive(Default)]
pub(crate) struct RecentCuts {
    kept: VecDeque<Kept>,
    points: usize,
    reused: u64,
}

impl RecentCuts {
    /// The kept cut of `key`, if there is one (it becomes the most recent).
    pub(crate) fn find(&mut self, key: &CutKey<'_>) -> Option<Arc<PointWork>> {
        let at = self.kept.iter().position(|k| k.matches(key))?;
        let kept = self.kept.remove(at)?;
        let work = Arc::clone(&kept.work);
        self.kept.push_front(kept);
        self.reused += 1;
        Some(work)
    }

    /// Keeps `work`, the cut of `key`, dropping the least recently used cuts to make room.
    /// A query too large to keep is not kept.
    pub(crate) fn keep(&mut self, key: &CutKey<'_>, work: &Arc<PointWork>) {
        let n = key.points.len();
        if n > MAX_POINTS / 4 || self.kept.iter().any(|k| k.matches(key)) {
            return;
        }
        while self.kept.len() >= MAX_CUTS || self.points + n > MAX_POINTS {
            let Some(old) = self.kept.pop_back() else {
                break;
            };
            self.points -= old.points.len();
        }
        self.points += n;
        self.kept.push_front(Kept {
            points: key.points.to_vec(),
            method: key.method,
            operator: key.operator,
            axes: key.axes,
            geometry: key.geometry.clone(),
            partitions: key.partitions.map(<[ShardPos]>::to_vec),
            work: Arc::clone(work),
        });
    }

    /// Queries that were not cut again.
    pub(crate) fn reused(&self) -> u64 {
        self.reused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axes() -> [Axis; 3] {
        [Axis::unit(32, true); 3]
    }

    fn cut(key: &CutKey<'_>) -> Arc<PointWork> {
        Arc::new(key.cut().unwrap())
    }

    #[test]
    fn the_same_query_gets_the_kept_cut_and_any_difference_gets_none() {
        let geometry = FieldGeometry::new([32; 3], 3, 8, 16).unwrap();
        let other_geometry = FieldGeometry::new([32; 3], 1, 8, 16).unwrap();
        let points = vec![[1.5, 2.25, 3.0], [10.0, 20.0, 30.0]];
        let moved = vec![[1.5, 2.25, 3.0], [10.0, 20.0, 30.000001]];
        let shard: [ShardPos; 1] = [[0, 0, 0]];
        let key = CutKey {
            points: &points,
            method: Method::Lagrange(8),
            operator: Operator::Field,
            axes: axes(),
            geometry: &geometry,
            partitions: None,
        };
        let mut cuts = RecentCuts::default();
        assert!(cuts.find(&key).is_none());
        let work = cut(&key);
        cuts.keep(&key, &work);
        assert!(Arc::ptr_eq(&cuts.find(&key).unwrap(), &work));
        let mut stretched = axes();
        stretched[1].spacing = 2.0;
        let others = [
            CutKey {
                points: &moved,
                ..key
            },
            CutKey {
                points: &points[..1],
                ..key
            },
            CutKey {
                method: Method::Lagrange(4),
                ..key
            },
            CutKey {
                operator: Operator::Gradient,
                ..key
            },
            CutKey {
                axes: stretched,
                ..key
            },
            CutKey {
                geometry: &other_geometry,
                ..key
            },
            CutKey {
                partitions: Some(&shard),
                ..key
            },
        ];
        for other in &others {
            assert!(
                cuts.find(other).is_none(),
                "{other:?} got the cut of {key:?}"
            );
        }
        assert_eq!(cuts.reused(), 1);
    }

    #[test]
    fn the_least_recently_used_cuts_go_first_and_the_points_kept_stay_bounded() {
        let geometry = FieldGeometry::new([32; 3], 1, 8, 16).unwrap();
        let queries: Vec<Vec<[f64; 3]>> = (0..MAX_CUTS + 2)
            .map(|i| vec![[i as f64, 0.0, 0.0]])
            .collect();
        let key = |points| CutKey {
            points,
            method: Method::Lagrange(4),
            operator: Operator::Field,
            axes: axes(),
            geometry: &geometry,
            partitions: None,
        };
        let mut cuts = RecentCuts::default();
        for (i, points) in queries.iter().enumerate() {
            cuts.keep(&key(points), &cut(&key(points)));
            if i == MAX_CUTS - 1 {
                // The cache is full; the first query is used again: the second is now the
                // oldest.
                assert!(cuts.find(&key(&queries[0])).is_some());
            }
        }
        assert!(cuts.find(&key(&queries[0])).is_some());
        assert!(cuts.find(&key(&queries[1])).is_none());
        assert!(cuts.find(&key(&queries[2])).is_none());
        assert!(cuts.find(&key(&queries[MAX_CUTS + 1])).is_some());
        assert_eq!(cuts.kept.len(), MAX_CUTS);
        assert_eq!(cuts.points, MAX_CUTS);

        let large: Vec<[f64; 3]> = (0..MAX_POINTS / 4 + 1)
            .map(|i| [(i % 32) as f64, 0.0, 0.0])
            .collect();
        cuts.keep(&key(&large), &cut(&key(&queries[0])));
        assert!(
            cuts.find(&key(&large)).is_none(),
            "a query too large to keep is not kept"
        );
    }
}
