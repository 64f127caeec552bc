//! The allocator: address grammar, range sets, allocatable sets, first-free allocation, status counts, prefix
//! carving and the validation rules of pool specs. Pure: no I/O and no Kubernetes types, so every rule is tested
//! as a plain function and every controller and webhook shares the same code.

pub mod address;
pub mod ip_pool;
pub mod prefix_pool;
mod rangeset;
pub mod strategy;
pub mod validate;

pub use address::{Family, format_ranges, parse_entry, parse_list};
pub use ip_pool::{
    Exhausted, FamilyChanged, IpPoolAllocator, IpPoolConfig, IpPoolSpec, IpSubnetSpec, NotAllocatable, ReserveError,
};
pub use prefix_pool::{Allocation, PrefixExhausted, PrefixPoolAllocator, PrefixPoolConfig, PrefixPoolSpec};
pub use rangeset::RangeSet;
pub use strategy::{AllocationStrategy, SplitMix64};

/// The largest count a pool status can show: the CRD fields are int64.
pub const STATUS_COUNT_CAP: u128 = i64::MAX as u128;

/// Saturates an exact count to the int64 a status field can hold.
pub fn status_count(n: u128) -> i64 {
    i64::try_from(n.min(STATUS_COUNT_CAP)).unwrap_or(i64::MAX)
}

/// The pool status numbers of docs/compatibility.md D4.
///
/// `total` is the size of the allocatable set, `used` the number of IPAddresses of the pool, `out_of_range` those whose
/// address is not allocatable any more, and `free = total − (used − out_of_range)`, never negative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounts {
    pub total: i64,
    pub used: i64,
    pub free: i64,
    pub out_of_range: i64,
}

impl PoolCounts {
    pub fn new(total: u128, used: u64, out_of_range: u64) -> Self {
        let in_range = used.saturating_sub(out_of_range);
        Self {
            total: status_count(total),
            used: status_count(u128::from(used)),
            free: status_count(total.saturating_sub(u128::from(in_range))),
            out_of_range: status_count(u128::from(out_of_range)),
        }
    }
}

#[cfg(test)]
mod tests;
