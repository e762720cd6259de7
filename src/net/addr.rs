//! Address classification: which resolved addresses the proxy may dial.
//!
//! Everything that is not plainly global unicast is refused unless an
//! explicit `allow_address` entry names it: loopback, private, link-local
//! (cloud metadata lives at 169.254.169.254), CGNAT, documentation,
//! benchmarking, multicast, reserved, and every IPv6 form that embeds an
//! IPv4 address (a NAT64 or 6to4 gateway would otherwise carry a request to
//! a private IPv4 target).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// Special IPv4 ranges, most specific names first.
const V4: &[(&str, [u8; 4], u8)] = &[
    ("this-network 0.0.0.0/8", [0, 0, 0, 0], 8),
    ("private 10.0.0.0/8", [10, 0, 0, 0], 8),
    ("cgnat 100.64.0.0/10", [100, 64, 0, 0], 10),
    ("loopback 127.0.0.0/8", [127, 0, 0, 0], 8),
    ("link-local 169.254.0.0/16", [169, 254, 0, 0], 16),
    ("private 172.16.0.0/12", [172, 16, 0, 0], 12),
    ("ietf-protocol 192.0.0.0/24", [192, 0, 0, 0], 24),
    ("test-net-1 192.0.2.0/24", [192, 0, 2, 0], 24),
    ("6to4-relay 192.88.99.0/24", [192, 88, 99, 0], 24),
    ("private 192.168.0.0/16", [192, 168, 0, 0], 16),
    ("benchmarking 198.18.0.0/15", [198, 18, 0, 0], 15),
    ("test-net-2 198.51.100.0/24", [198, 51, 100, 0], 24),
    ("test-net-3 203.0.113.0/24", [203, 0, 113, 0], 24),
    ("multicast 224.0.0.0/4", [224, 0, 0, 0], 4),
    ("broadcast 255.255.255.255/32", [255, 255, 255, 255], 32),
    ("reserved 240.0.0.0/4", [240, 0, 0, 0], 4),
];

/// Special IPv6 ranges, most specific names first.
const V6: &[(&str, [u16; 8], u8)] = &[
    ("unspecified ::/128", [0; 8], 128),
    ("loopback ::1/128", [0, 0, 0, 0, 0, 0, 0, 1], 128),
    (
        "ipv4-mapped ::ffff:0:0/96",
        [0, 0, 0, 0, 0, 0xffff, 0, 0],
        96,
    ),
    ("ipv4-compatible ::/96", [0; 8], 96),
    ("nat64 64:ff9b::/96", [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96),
    (
        "local-nat64 64:ff9b:1::/48",
        [0x64, 0xff9b, 1, 0, 0, 0, 0, 0],
        48,
    ),
    ("discard 100::/64", [0x100, 0, 0, 0, 0, 0, 0, 0], 64),
    ("teredo 2001::/32", [0x2001, 0, 0, 0, 0, 0, 0, 0], 32),
    (
        "documentation 2001:db8::/32",
        [0x2001, 0xdb8, 0, 0, 0, 0, 0, 0],
        32,
    ),
    ("ietf-protocol 2001::/23", [0x2001, 0, 0, 0, 0, 0, 0, 0], 23),
    ("6to4 2002::/16", [0x2002, 0, 0, 0, 0, 0, 0, 0], 16),
    ("documentation 3fff::/20", [0x3fff, 0, 0, 0, 0, 0, 0, 0], 20),
    ("srv6 5f00::/16", [0x5f00, 0, 0, 0, 0, 0, 0, 0], 16),
    ("unique-local fc00::/7", [0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
    ("link-local fe80::/10", [0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
    ("site-local fec0::/10", [0xfec0, 0, 0, 0, 0, 0, 0, 0], 10),
    ("multicast ff00::/8", [0xff00, 0, 0, 0, 0, 0, 0, 0], 8),
];

/// The special range `ip` falls in, or `None` when it is global unicast.
pub fn special_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(a) => V4
            .iter()
            .find(|(_, net, len)| in_v4(a, Ipv4Addr::from(*net), *len))
            .map(|(name, _, _)| *name),
        IpAddr::V6(a) => V6
            .iter()
            .find(|(_, net, len)| in_v6(a, Ipv6Addr::from(*net), *len))
            .map(|(name, _, _)| *name)
            .or_else(|| {
                // Only 2000::/3 is allocated as global unicast.
                (a.segments()[0] & 0xe000 != 0x2000).then_some("reserved outside 2000::/3")
            }),
    }
}

fn in_v4(a: Ipv4Addr, net: Ipv4Addr, len: u8) -> bool {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    u32::from(a) & mask == u32::from(net) & mask
}

fn in_v6(a: Ipv6Addr, net: Ipv6Addr, len: u8) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    u128::from(a) & mask == u128::from(net) & mask
}

/// Parse an `allow_address` entry: an address or a CIDR.
pub fn parse_allowed(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    if let Ok(net) = s.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    let bare = s
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(s);
    match bare.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => Ok(IpNet::V4(Ipv4Net::from(a))),
        Ok(IpAddr::V6(a)) => Ok(IpNet::V6(Ipv6Net::from(a))),
        Err(_) => Err(format!("{s:?} is neither an IP address nor a CIDR")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_table() {
        let table: &[(&str, Option<&str>)] = &[
            ("1.1.1.1", None),
            ("93.184.216.34", None),
            ("2606:4700::1111", None),
            ("2a00:1450:4001:80b::200e", None),
            ("127.0.0.1", Some("loopback")),
            ("127.255.255.254", Some("loopback")),
            ("0.0.0.0", Some("this-network")),
            ("0.1.2.3", Some("this-network")),
            ("10.0.0.1", Some("private")),
            ("172.16.0.1", Some("private")),
            ("172.31.255.255", Some("private")),
            ("172.32.0.1", None),
            ("192.168.1.1", Some("private")),
            ("100.64.0.1", Some("cgnat")),
            ("100.127.255.255", Some("cgnat")),
            ("100.128.0.1", None),
            ("169.254.169.254", Some("link-local")),
            ("192.0.0.8", Some("ietf-protocol")),
            ("192.0.2.1", Some("test-net-1")),
            ("198.51.100.7", Some("test-net-2")),
            ("203.0.113.9", Some("test-net-3")),
            ("198.18.0.1", Some("benchmarking")),
            ("198.19.255.255", Some("benchmarking")),
            ("224.0.0.251", Some("multicast")),
            ("239.1.1.1", Some("multicast")),
            ("240.0.0.1", Some("reserved")),
            ("255.255.255.255", Some("broadcast")),
            ("::", Some("unspecified")),
            ("::1", Some("loopback")),
            ("::ffff:169.254.169.254", Some("ipv4-mapped")),
            ("::ffff:1.1.1.1", Some("ipv4-mapped")),
            ("::127.0.0.1", Some("ipv4-compatible")),
            ("64:ff9b::a9fe:a9fe", Some("nat64")),
            ("64:ff9b:1::1", Some("local-nat64")),
            ("2001::1", Some("teredo")),
            ("2001:db8::1", Some("documentation")),
            ("2002:a9fe:a9fe::1", Some("6to4")),
            ("fd00::1", Some("unique-local")),
            ("fc00::1", Some("unique-local")),
            ("fe80::1", Some("link-local")),
            ("febf::1", Some("link-local")),
            ("fec0::1", Some("site-local")),
            ("ff02::1", Some("multicast")),
            ("100::1", Some("discard")),
            ("4000::1", Some("reserved")),
            ("1::1", Some("reserved")),
        ];
        for (addr, want) in table {
            let ip: IpAddr = addr.parse().unwrap();
            let got = special_range(ip);
            match want {
                None => assert_eq!(got, None, "{addr}"),
                Some(prefix) => {
                    let g = got.unwrap_or_else(|| panic!("{addr} classified public"));
                    assert!(g.starts_with(prefix), "{addr}: {g} (want {prefix})");
                }
            }
        }
    }

    #[test]
    fn allowed_entries() {
        assert_eq!(
            parse_allowed("127.0.0.1").unwrap(),
            "127.0.0.1/32".parse::<IpNet>().unwrap()
        );
        assert_eq!(
            parse_allowed("10.1.2.3/8").unwrap(),
            "10.0.0.0/8".parse::<IpNet>().unwrap()
        );
        assert_eq!(
            parse_allowed("[::1]").unwrap(),
            "::1/128".parse::<IpNet>().unwrap()
        );
        assert!(parse_allowed("localhost").is_err());
        assert!(parse_allowed("10.0.0.0/33").is_err());
    }
}
