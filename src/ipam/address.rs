//! IP families, conversions between addresses and integers, and the address grammar of pool specs:
//! a single IP (`10.0.0.5`), an inclusive range (`10.0.0.10-10.0.0.20`) or a CIDR with host bits allowed
//! (`10.0.0.1/24` means all of `10.0.0.0/24`). CIDRs are parsed into `ipnet` networks; the ranges of a pool
//! are integers (`RangeSet`), where the allocator works.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::RangeSet;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: &IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    /// Number of bits in an address of this family.
    pub fn bits(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }

    /// The highest address value of this family.
    pub fn max_value(self) -> u128 {
        match self {
            Family::V4 => u32::MAX as u128,
            Family::V6 => u128::MAX,
        }
    }

    /// The address with integer value `v` (which must fit the family).
    pub fn addr(self, v: u128) -> IpAddr {
        match self {
            Family::V4 => IpAddr::V4(Ipv4Addr::from(v as u32)),
            Family::V6 => IpAddr::V6(Ipv6Addr::from(v)),
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        })
    }
}

/// The integer value of an address (IPv4 in `0..=u32::MAX`).
pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The netmask of a prefix length as an integer of the family (`prefix <= family.bits()`).
pub fn mask(family: Family, prefix: u8) -> u128 {
    let bits = family.bits();
    let host_bits = bits - prefix.min(bits);
    let all = family.max_value();
    if host_bits >= 128 { 0 } else { all & !((1u128 << host_bits) - 1) }
}

/// The first and last value of the block `value/prefix`: integer arithmetic, since the allocator calls it in its
/// loops (what is parsed from text goes through `ipnet`).
pub fn block(family: Family, value: u128, prefix: u8) -> (u128, u128) {
    let m = mask(family, prefix);
    let start = value & m;
    (start, start | (family.max_value() & !m))
}

/// Parses one address as Go's `netip.ParseAddr` does, which the Go provider uses for every address it reads: an IPv6
/// address may carry a non-empty zone (`fe80::1%eth0`, as link-local gateways are written). The zone plays no part in
/// the arithmetic (the Go provider's address sets drop it too), so it is dropped here; a gateway is still copied to
/// the IPAddresses as written.
pub fn parse_ip(s: &str) -> Result<IpAddr, String> {
    let parsed = match s.split_once('%') {
        None => s.parse().ok(),
        Some((addr, zone)) if !zone.is_empty() => addr.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6),
        Some(_) => None,
    };
    parsed.ok_or_else(|| format!("ParseAddr({s:?}): unable to parse IP"))
}

/// Whether an address is written with an IPv6 zone (Go's address sets contain no zoned address).
pub fn has_zone(s: &str) -> bool {
    s.contains('%')
}

/// One entry of the address grammar: an inclusive range of one family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressRange {
    pub family: Family,
    pub start: u128,
    pub end: u128,
}

impl AddressRange {
    pub fn single(ip: IpAddr) -> Self {
        let v = to_u128(ip);
        Self { family: Family::of(&ip), start: v, end: v }
    }

    pub fn first(&self) -> IpAddr {
        self.family.addr(self.start)
    }

    pub fn last(&self) -> IpAddr {
        self.family.addr(self.end)
    }
}

/// Why an entry of the address grammar did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    #[error("{0:?} is not an IP address")]
    BadAddress(String),
    #[error("range {0:?} must have exactly one '-' between two addresses")]
    BadRange(String),
    #[error("range {0:?} mixes IPv4 and IPv6")]
    MixedRange(String),
    #[error("range {0:?} starts after it ends")]
    ReversedRange(String),
    #[error("CIDR {0:?} has an invalid prefix length")]
    BadPrefixLength(String),
}

/// Parses a single IP, an inclusive `a-b` range or a CIDR (host bits allowed; the masked block is used).
pub fn parse_entry(entry: &str) -> Result<AddressRange, EntryError> {
    // Split at the first '-', each end read as netip.ParseAddr reads it (zones dropped), as netipx.ParseIPRange does:
    // a second '-' can only be part of a zone.
    if let Some((a, b)) = entry.split_once('-') {
        let bad_range = || EntryError::BadRange(entry.to_owned());
        let a = parse_ip(a).map_err(|_| bad_range())?;
        let b = parse_ip(b).map_err(|_| bad_range())?;
        if Family::of(&a) != Family::of(&b) {
            return Err(EntryError::MixedRange(entry.to_owned()));
        }
        let (start, end) = (to_u128(a), to_u128(b));
        if start > end {
            return Err(EntryError::ReversedRange(entry.to_owned()));
        }
        return Ok(AddressRange { family: Family::of(&a), start, end });
    }
    if let Some((addr, len)) = entry.split_once('/') {
        let ip: IpAddr = addr.parse().map_err(|_| EntryError::BadAddress(entry.to_owned()))?;
        let net = parse_prefix_length(len)
            .and_then(|len| IpNet::new(ip, len).ok())
            .ok_or_else(|| EntryError::BadPrefixLength(entry.to_owned()))?;
        let (start, end) = (to_u128(net.network()), to_u128(net.broadcast()));
        return Ok(AddressRange { family: Family::of(&ip), start, end });
    }
    let ip = parse_ip(entry).map_err(|_| EntryError::BadAddress(entry.to_owned()))?;
    Ok(AddressRange::single(ip))
}

/// A decimal prefix length without sign or leading zeros (as Go's netip accepts it).
pub fn parse_prefix_length(s: &str) -> Option<u8> {
    if s.is_empty() || s.len() > 3 || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    s.parse().ok()
}

/// A network-aligned IPv6 or IPv4 CIDR, exactly as written (`fd00::/48`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub family: Family,
    pub base: u128,
    pub len: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error("{0:?} is not a CIDR")]
    NotCidr(String),
    #[error("{0:?} is not network-aligned")]
    NotAligned(String),
}

/// Parses `address/length`; `aligned` rejects host bits.
pub fn parse_cidr(s: &str, aligned: bool) -> Result<Cidr, CidrError> {
    let (addr, len) = s.split_once('/').ok_or_else(|| CidrError::NotCidr(s.to_owned()))?;
    let ip: IpAddr = addr.parse().map_err(|_| CidrError::NotCidr(s.to_owned()))?;
    // Go's grammar for the length (no sign, no leading zero); ipnet for the rest.
    let net = parse_prefix_length(len)
        .and_then(|len| IpNet::new(ip, len).ok())
        .ok_or_else(|| CidrError::NotCidr(s.to_owned()))?;
    if aligned && net.trunc() != net {
        return Err(CidrError::NotAligned(s.to_owned()));
    }
    Ok(Cidr { family: Family::of(&ip), base: to_u128(net.network()), len: net.prefix_len() })
}

/// A parsed list of grammar entries: their union, and the family of each entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressList {
    pub entries: Vec<AddressRange>,
    pub set: RangeSet,
}

impl AddressList {
    /// The family shared by every entry; `Err(())` when both families occur, `Ok(None)` when the list is empty.
    #[allow(clippy::result_unit_err)]
    pub fn family(&self) -> Result<Option<Family>, ()> {
        let mut family = None;
        for e in &self.entries {
            match family {
                None => family = Some(e.family),
                Some(f) if f != e.family => return Err(()),
                Some(_) => {}
            }
        }
        Ok(family)
    }
}

/// An entry of a list that did not parse, with its index.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("entry {index}: {error}")]
pub struct ListError {
    pub index: usize,
    pub error: EntryError,
}

/// Parses every entry; the union is taken over values, so callers must check the family first when it matters.
pub fn parse_list<S: AsRef<str>>(entries: &[S]) -> Result<AddressList, ListError> {
    let parsed = entries
        .iter()
        .enumerate()
        .map(|(index, e)| parse_entry(e.as_ref()).map_err(|error| ListError { index, error }))
        .collect::<Result<Vec<_>, _>>()?;
    let set = RangeSet::from_ranges(parsed.iter().map(|r| (r.start, r.end)));
    Ok(AddressList { entries: parsed, set })
}

/// Formats ranges the way the Go provider prints an IP set's ranges: `[a-b c-c]`.
pub fn format_ranges(family: Family, set: &RangeSet) -> String {
    let parts: Vec<String> = set.iter().map(|(s, e)| format!("{}-{}", family.addr(s), family.addr(e))).collect();
    format!("[{}]", parts.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> u128 {
        to_u128(s.parse().unwrap())
    }

    #[test]
    fn grammar_single_range_cidr() {
        let r = parse_entry("10.0.0.5").unwrap();
        assert_eq!((r.family, r.start, r.end), (Family::V4, v4("10.0.0.5"), v4("10.0.0.5")));
        let r = parse_entry("10.0.0.10-10.0.0.20").unwrap();
        assert_eq!((r.start, r.end), (v4("10.0.0.10"), v4("10.0.0.20")));
        let r = parse_entry("192.168.1.1/24").unwrap();
        assert_eq!((r.start, r.end), (v4("192.168.1.0"), v4("192.168.1.255")));
        let r = parse_entry("fe80::1/126").unwrap();
        assert_eq!(r.end - r.start + 1, 4);
        let r = parse_entry("0.0.0.0/0").unwrap();
        assert_eq!((r.start, r.end), (0, u32::MAX as u128));
        let r = parse_entry("::/0").unwrap();
        assert_eq!((r.start, r.end), (0, u128::MAX));
        let r = parse_entry("::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff").unwrap();
        assert_eq!((r.start, r.end), (0, u128::MAX));
        let r = parse_entry("0.0.0.0-255.255.255.255").unwrap();
        assert_eq!((r.start, r.end), (0, u32::MAX as u128));
    }

    #[test]
    fn grammar_rejects_with_reasons() {
        // The invalid strings of the Go provider's AddressesToIPSet test, and more.
        for bad in [
            "192.168.1.1-192.168.1.10-192.168.1.20",
            "192.168.1.1/24-192.168.1.10",
            "192.168.1.10-192.168.1.1",
            "192.168.1.1/33",
            "fd00::/129",
            "192.168.1.1-fd00::1",
            "abc",
            "",
            "10.0.0.1/",
            "10.0.0.1/+8",
            "10.0.0.1/08",
            "fe80::1%",
            "10.0.0.1%eth0",
            "fe80::1%br-lan",
            "fe80::/64%eth0",
            " 10.0.0.1",
        ] {
            assert!(parse_entry(bad).is_err(), "{bad:?} must be rejected");
        }
        // As Go's netip and netipx read them: an IPv6 zone, which plays no part in the arithmetic, and a range split
        // at its first '-' (a later one belongs to a zone).
        for (zoned, plain) in [("fe80::1%eth0", "fe80::1"), ("fe80::1%a-fe80::9%b", "fe80::1-fe80::9")] {
            assert_eq!(parse_entry(zoned), parse_entry(plain), "{zoned}");
        }
        assert_eq!(parse_entry("fe80::1-fe80::9%br-lan"), parse_entry("fe80::1-fe80::9"));
        assert_eq!(
            parse_entry("10.0.0.9-10.0.0.1").unwrap_err().to_string(),
            "range \"10.0.0.9-10.0.0.1\" starts after it ends"
        );
        assert_eq!(
            parse_entry("10.0.0.1-fd00::1").unwrap_err().to_string(),
            "range \"10.0.0.1-fd00::1\" mixes IPv4 and IPv6"
        );
    }

    #[test]
    fn lists_are_unions() {
        let l = parse_list(&["192.168.1.1/24", "192.168.2.1/31"]).unwrap();
        assert_eq!(l.set.len(), 258);
        let l = parse_list(&["10.0.0.1-10.0.0.10", "10.0.0.5-10.0.0.15"]).unwrap();
        assert_eq!(l.set.len(), 15);
        let err = parse_list(&["10.0.0.1", "nope"]).unwrap_err();
        assert_eq!(err.index, 1);
        assert_eq!(parse_list(&["10.0.0.1", "fd00::1"]).unwrap().family(), Err(()));
    }

    #[test]
    fn cidrs_and_masks() {
        assert_eq!(mask(Family::V4, 24), 0xffff_ff00);
        assert_eq!(mask(Family::V4, 0), 0);
        assert_eq!(mask(Family::V6, 128), u128::MAX);
        assert_eq!(mask(Family::V6, 0), 0);
        assert!(parse_cidr("fd00::1/64", true).is_err());
        let c = parse_cidr("fd00:0:0:5::1234/64", false).unwrap();
        assert_eq!(Family::V6.addr(c.base).to_string(), "fd00:0:0:5::");
        assert_eq!(
            format_ranges(Family::V4, &RangeSet::from_ranges([(1, 1), (5, 9)])),
            "[0.0.0.1-0.0.0.1 0.0.0.5-0.0.0.9]"
        );
    }
}
