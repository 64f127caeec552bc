//! A set of `u128` values kept as disjoint, non-adjacent inclusive ranges in a B-tree.
//!
//! IPv4 addresses live in `0..=u32::MAX`, IPv6 addresses use the whole `u128`; a pool only ever holds one family.
//! Point and range updates and the lookups an allocator needs are O(log n) in the number of ranges; the set
//! operations between two sets are linear merges.

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Included, Unbounded};

/// Sorted, merged inclusive ranges `start..=end` of `u128` values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    /// start -> end (inclusive). Invariant: ranges are disjoint and never adjacent (`end + 1 < next start`).
    ranges: BTreeMap<u128, u128>,
}

impl std::fmt::Debug for RangeSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.ranges.iter().map(|(s, e)| s..=e)).finish()
    }
}

impl RangeSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a set from ranges in any order, overlapping or not (O(n log n)).
    pub fn from_ranges(ranges: impl IntoIterator<Item = (u128, u128)>) -> Self {
        let mut sorted: Vec<(u128, u128)> = ranges.into_iter().filter(|(s, e)| s <= e).collect();
        sorted.sort_unstable();
        let mut merged: Vec<(u128, u128)> = Vec::with_capacity(sorted.len());
        for (s, e) in sorted {
            match merged.last_mut() {
                Some(last) if s <= last.1.saturating_add(1) => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        Self::from_sorted_disjoint(merged)
    }

    /// Builds a set from ranges that are already sorted, disjoint and non-adjacent.
    fn from_sorted_disjoint(ranges: Vec<(u128, u128)>) -> Self {
        Self { ranges: ranges.into_iter().collect() }
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Number of disjoint ranges.
    pub fn range_count(&self) -> usize {
        self.ranges.len()
    }

    /// Number of values, saturating at `u128::MAX` (only the whole IPv6 space, 2^128 values, saturates).
    pub fn len(&self) -> u128 {
        self.ranges.iter().fold(0u128, |acc, (s, e)| acc.saturating_add((e - s).saturating_add(1)))
    }

    /// The ranges in ascending order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (u128, u128)> + '_ {
        self.ranges.iter().map(|(s, e)| (*s, *e))
    }

    /// The range containing `v`, if any.
    pub fn range_containing(&self, v: u128) -> Option<(u128, u128)> {
        self.ranges.range(..=v).next_back().filter(|(_, e)| **e >= v).map(|(s, e)| (*s, *e))
    }

    pub fn contains(&self, v: u128) -> bool {
        self.range_containing(v).is_some()
    }

    /// Whether every value of `start..=end` is in the set.
    pub fn contains_range(&self, start: u128, end: u128) -> bool {
        self.range_containing(start).is_some_and(|(_, e)| e >= end)
    }

    /// Whether any value of `start..=end` is in the set.
    pub fn overlaps(&self, start: u128, end: u128) -> bool {
        self.first_at_or_above(start).is_some_and(|v| v <= end)
    }

    /// The lowest value in the set.
    pub fn first(&self) -> Option<u128> {
        self.ranges.first_key_value().map(|(s, _)| *s)
    }

    /// The highest value in the set.
    pub fn last(&self) -> Option<u128> {
        self.ranges.last_key_value().map(|(_, e)| *e)
    }

    /// The `k`-th lowest value (from 0), counting through the ranges: O(ranges).
    pub fn nth(&self, mut k: u128) -> Option<u128> {
        for (s, e) in self.iter() {
            let size = e - s;
            if k <= size {
                return Some(s + k);
            }
            k -= size + 1;
        }
        None
    }

    /// The lowest value in the set that is `>= v`.
    pub fn first_at_or_above(&self, v: u128) -> Option<u128> {
        if self.contains(v) {
            return Some(v);
        }
        self.ranges.range((Excluded(v), Unbounded)).next().map(|(s, _)| *s)
    }

    /// Adds one value; returns false when it was already present.
    pub fn insert(&mut self, v: u128) -> bool {
        if self.contains(v) {
            return false;
        }
        self.insert_range(v, v);
        true
    }

    /// Removes one value; returns false when it was absent.
    pub fn remove(&mut self, v: u128) -> bool {
        if !self.contains(v) {
            return false;
        }
        self.remove_range(v, v);
        true
    }

    /// Adds `start..=end`, merging with overlapping and adjacent ranges.
    pub fn insert_range(&mut self, start: u128, end: u128) {
        if start > end {
            return;
        }
        let (mut new_start, mut new_end) = (start, end);
        // A range that starts at or before `start` and reaches `start - 1` or beyond absorbs the new one's start.
        if let Some((&s, &e)) = self.ranges.range(..=start).next_back()
            && e.saturating_add(1) >= start
        {
            new_start = s;
            new_end = new_end.max(e);
        }
        // Every range starting inside `new_start..=end + 1` is absorbed.
        let absorbed: Vec<(u128, u128)> =
            self.ranges.range((Included(new_start), Included(end.saturating_add(1)))).map(|(s, e)| (*s, *e)).collect();
        for (s, e) in absorbed {
            self.ranges.remove(&s);
            new_end = new_end.max(e);
        }
        self.ranges.insert(new_start, new_end);
    }

    /// Removes `start..=end`, splitting ranges that straddle its edges.
    pub fn remove_range(&mut self, start: u128, end: u128) {
        if start > end {
            return;
        }
        // The range that starts before `start` may reach into the removed span.
        if let Some((&s, &e)) = self.ranges.range(..start).next_back()
            && e >= start
        {
            self.ranges.insert(s, start - 1);
            if e > end {
                self.ranges.insert(end + 1, e);
                return;
            }
        }
        let inside: Vec<(u128, u128)> =
            self.ranges.range((Included(start), Included(end))).map(|(s, e)| (*s, *e)).collect();
        for (s, e) in inside {
            self.ranges.remove(&s);
            if e > end {
                self.ranges.insert(end + 1, e);
            }
        }
    }

    /// Removes and returns the lowest value.
    pub fn pop_first(&mut self) -> Option<u128> {
        let (s, e) = self.ranges.pop_first()?;
        if s < e {
            self.ranges.insert(s + 1, e);
        }
        Some(s)
    }

    /// The values in either set (linear merge).
    pub fn union(&self, other: &RangeSet) -> RangeSet {
        let mut all: Vec<(u128, u128)> = Vec::with_capacity(self.range_count() + other.range_count());
        let (mut a, mut b) = (self.iter().peekable(), other.iter().peekable());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x <= y => a.next(),
                (Some(_), Some(_)) => b.next(),
                (Some(_), None) => a.next(),
                (None, Some(_)) => b.next(),
                (None, None) => break,
            };
            let Some((s, e)) = next else { break };
            match all.last_mut() {
                Some(last) if s <= last.1.saturating_add(1) => last.1 = last.1.max(e),
                _ => all.push((s, e)),
            }
        }
        Self::from_sorted_disjoint(all)
    }

    /// The values of `self` that are not in `other` (linear sweep).
    pub fn difference(&self, other: &RangeSet) -> RangeSet {
        let mut out = Vec::with_capacity(self.range_count());
        let mut cut = other.iter().peekable();
        for (s, e) in self.iter() {
            let mut cur = s;
            let mut exhausted = false;
            // Skip cuts entirely below the current range.
            while cut.peek().is_some_and(|&(_, ce)| ce < cur) {
                cut.next();
            }
            while let Some(&(cs, ce)) = cut.peek() {
                if cs > e {
                    break;
                }
                if cs > cur {
                    out.push((cur, cs - 1));
                }
                if ce >= e {
                    exhausted = true;
                    break;
                }
                cur = ce + 1;
                cut.next();
            }
            if !exhausted {
                out.push((cur, e));
            }
        }
        Self::from_sorted_disjoint(out)
    }

    /// The values in both sets.
    pub fn intersection(&self, other: &RangeSet) -> RangeSet {
        let mut out = Vec::new();
        let (mut a, mut b) = (self.iter().peekable(), other.iter().peekable());
        while let (Some(&(as_, ae)), Some(&(bs, be))) = (a.peek(), b.peek()) {
            let (s, e) = (as_.max(bs), ae.min(be));
            if s <= e {
                out.push((s, e));
            }
            if ae < be {
                a.next();
            } else {
                b.next();
            }
        }
        Self::from_sorted_disjoint(out)
    }

    /// The values of `self` inside `start..=end`.
    pub fn clipped(&self, start: u128, end: u128) -> RangeSet {
        self.intersection(&RangeSet::from_ranges([(start, end)]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(r: &[(u128, u128)]) -> RangeSet {
        RangeSet::from_ranges(r.iter().copied())
    }

    #[test]
    fn from_ranges_merges_overlapping_and_adjacent() {
        let s = set(&[(5, 15), (1, 10), (17, 20), (16, 16), (30, 31)]);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(1, 20), (30, 31)]);
        assert_eq!(s.len(), 22);
        assert_eq!(s.range_count(), 2);
    }

    #[test]
    fn insert_and_remove_split_and_merge() {
        let mut s = set(&[(10, 20)]);
        s.remove_range(12, 14);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(10, 11), (15, 20)]);
        s.insert(13);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(10, 11), (13, 13), (15, 20)]);
        s.insert_range(12, 14);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(10, 20)]);
        assert!(!s.insert(15));
        assert!(s.remove(20));
        assert!(!s.remove(20));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(10, 19)]);
        s.remove_range(0, 100);
        assert!(s.is_empty());
    }

    #[test]
    fn edges_of_the_value_space() {
        let mut s = set(&[(0, 0), (u128::MAX, u128::MAX)]);
        assert_eq!(s.len(), 2);
        s.insert_range(1, u128::MAX - 1);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(0, u128::MAX)]);
        assert_eq!(s.len(), u128::MAX, "the whole space saturates");
        s.remove(u128::MAX);
        s.remove(0);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(1, u128::MAX - 1)]);
        assert_eq!(s.first_at_or_above(u128::MAX), None);
        assert_eq!(s.pop_first(), Some(1));
        assert_eq!(s.first(), Some(2));
    }

    #[test]
    fn queries() {
        let s = set(&[(10, 20), (30, 40)]);
        assert!(s.contains(10) && s.contains(40) && !s.contains(25));
        assert!(s.contains_range(31, 40) && !s.contains_range(15, 35));
        assert!(s.overlaps(0, 10) && s.overlaps(21, 30) && !s.overlaps(21, 29));
        assert_eq!(s.first_at_or_above(0), Some(10));
        assert_eq!(s.first_at_or_above(15), Some(15));
        assert_eq!(s.first_at_or_above(21), Some(30));
        assert_eq!(s.first_at_or_above(41), None);
        assert_eq!(s.last(), Some(40));
        assert_eq!([0, 10, 11, 21, 22].map(|k| s.nth(k)), [Some(10), Some(20), Some(30), Some(40), None]);
    }

    #[test]
    fn set_algebra() {
        let a = set(&[(0, 10), (20, 30), (40, 50)]);
        let b = set(&[(5, 22), (29, 45)]);
        assert_eq!(a.union(&b).iter().collect::<Vec<_>>(), vec![(0, 50)]);
        assert_eq!(a.difference(&b).iter().collect::<Vec<_>>(), vec![(0, 4), (23, 28), (46, 50)]);
        assert_eq!(a.intersection(&b).iter().collect::<Vec<_>>(), vec![(5, 10), (20, 22), (29, 30), (40, 45)]);
        assert_eq!(a.clipped(8, 21).iter().collect::<Vec<_>>(), vec![(8, 10), (20, 21)]);
    }
}
