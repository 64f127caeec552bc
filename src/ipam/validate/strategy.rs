//! `spec.allocationStrategy` (docs/compatibility.md D20), with Metal3's two rules for `Random`: refused for a subnet
//! too large to count with an int64, and never changed to or from after creation.

use super::{FieldError, quote};
use crate::ipam::{AllocationStrategy, IpPoolConfig, STATUS_COUNT_CAP};

const FIELD: &str = "spec.allocationStrategy";

/// What is wrong with the strategy of `config`, set on create or changed from `before` on update.
pub fn allocation_strategy_findings(config: &IpPoolConfig, before: Option<AllocationStrategy>) -> Vec<FieldError> {
    let strategy = config.strategy();
    let mut errs = Vec::new();
    if let Some(before) = before
        && before != strategy
        && AllocationStrategy::Random.is_one_of(before, strategy)
    {
        errs.push(FieldError::invalid(
            FIELD,
            quote(strategy.name()),
            format!(
                "cannot be changed from {} to {} after creation{}",
                quote(before.name()),
                quote(strategy.name()),
                if AllocationStrategy::Sequential.is_one_of(before, strategy) {
                    " (no allocationStrategy is Sequential)"
                } else {
                    ""
                }
            ),
        ));
    }
    if strategy == AllocationStrategy::Random
        && let Some((i, size)) =
            config.subnet_allocatable().map(|a| a.len()).enumerate().find(|(_, size)| *size > STATUS_COUNT_CAP)
    {
        let subnet = if i == 0 { "spec.addresses".to_owned() } else { format!("spec.subnets[{}]", i - 1) };
        errs.push(FieldError::invalid(
            FIELD,
            quote(strategy.name()),
            format!("cannot be used with a subnet of more than 2^63 - 1 addresses: {subnet} has {}", size_text(size)),
        ));
    }
    errs
}

/// A count that may not fit an int64, as a power of two when it is the whole space.
fn size_text(size: u128) -> String {
    if size == u128::MAX { "2^128".to_owned() } else { size.to_string() }
}

impl AllocationStrategy {
    fn is_one_of(self, a: AllocationStrategy, b: AllocationStrategy) -> bool {
        self == a || self == b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipam::{IpPoolSpec, IpSubnetSpec};

    fn config(addresses: &str, prefix: i64, strategy: AllocationStrategy, subnets: Vec<IpSubnetSpec>) -> IpPoolConfig {
        IpPoolConfig::new(&IpPoolSpec {
            addresses: vec![addresses.into()],
            prefix,
            allocation_strategy: strategy,
            subnets,
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn random_is_refused_for_a_subnet_of_more_than_2_63_minus_1_addresses_as_metal3_refuses_it() {
        use AllocationStrategy::*;
        // A /65 without its anycast address holds 2^63 - 1: admitted. A /64 holds 2^64 - 1: refused.
        assert_eq!(allocation_strategy_findings(&config("fd00::/65", 65, Random, vec![]), None), vec![]);
        let errs = allocation_strategy_findings(&config("fd00::/64", 64, Random, vec![]), None);
        assert_eq!(
            errs.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec![
                "spec.allocationStrategy: Invalid value: \"Random\": cannot be used with a subnet of more than 2^63 - \
                 1 addresses: spec.addresses has 18446744073709551615"
            ]
        );
        let second = IpSubnetSpec { addresses: vec!["fd01::/63".into()], prefix: 63, ..Default::default() };
        let errs = allocation_strategy_findings(&config("fd00::/120", 120, Random, vec![second.clone()]), None);
        assert!(errs[0].detail.ends_with("spec.subnets[0] has 36893488147419103231"), "{errs:?}");
        for other in [Sequential, LeastRecentlyReleased] {
            assert_eq!(allocation_strategy_findings(&config("fd00::/120", 120, other, vec![second.clone()]), None), []);
        }
    }

    #[test]
    fn random_cannot_be_set_or_unset_after_creation_and_the_other_strategies_may_change() {
        use AllocationStrategy::*;
        let small = |s| config("10.0.0.0/24", 24, s, vec![]);
        for (before, after) in [(Sequential, Random), (Random, Sequential), (LeastRecentlyReleased, Random)] {
            let errs = allocation_strategy_findings(&small(after), Some(before));
            assert_eq!(errs.len(), 1, "{before:?} → {after:?}");
            assert_eq!(errs[0].field, "spec.allocationStrategy");
            assert!(
                errs[0].detail.starts_with(&format!(
                    "cannot be changed from \"{}\" to \"{}\" after creation",
                    before.name(),
                    after.name()
                )),
                "{}",
                errs[0].detail
            );
            let absent_is_sequential = errs[0].detail.ends_with(" (no allocationStrategy is Sequential)");
            assert_eq!(absent_is_sequential, before == Sequential || after == Sequential);
        }
        for (before, after) in
            [(Random, Random), (Sequential, LeastRecentlyReleased), (LeastRecentlyReleased, Sequential)]
        {
            assert_eq!(allocation_strategy_findings(&small(after), Some(before)), [], "{before:?} → {after:?}");
        }
    }
}
