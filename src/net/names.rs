//! The name ↔ synthetic address table of one sandbox (`transparent`
//! egress): the resolver hands out addresses from 198.18.0.0/15 (reserved
//! for benchmarking, never routed on the Internet, and refused as a
//! destination by [`super::addr`]), and a captured connection's original
//! destination maps back to the name it was handed out for. An address is
//! never reused during the sandbox's life, so a cached answer never points
//! at another name.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Mutex;

/// The synthetic range: 198.18.0.0/15.
pub const SYNTHETIC_NET: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);
pub const SYNTHETIC_PREFIX: u8 = 15;
/// Most names one sandbox may resolve; a hostile sandbox asking for
/// endless names under an allowed wildcard gets REFUSED past it (a few
/// MiB of table at most).
pub const MAX_NAMES: usize = 16 * 1024;

const BASE: u32 = u32::from_be_bytes([198, 18, 0, 0]);

/// Is `ip` in the synthetic range?
pub fn is_synthetic(ip: Ipv4Addr) -> bool {
    u32::from(ip) >> (32 - SYNTHETIC_PREFIX) == BASE >> (32 - SYNTHETIC_PREFIX)
}

#[derive(Default)]
struct Inner {
    by_name: HashMap<String, Ipv4Addr>,
    /// Index i holds the name of BASE + 1 + i.
    by_index: Vec<String>,
}

/// Names handed out so far.
#[derive(Default)]
pub struct Names {
    inner: Mutex<Inner>,
}

/// What [`Names::address_for`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assigned {
    /// The name already had this address.
    Known(Ipv4Addr),
    /// The name got this new address.
    New(Ipv4Addr),
    /// The table is full.
    Full,
}

impl Names {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The address of `name` (canonical), assigned on first use.
    pub fn address_for(&self, name: &str) -> Assigned {
        let mut t = self.lock();
        if let Some(a) = t.by_name.get(name) {
            return Assigned::Known(*a);
        }
        if t.by_index.len() >= MAX_NAMES {
            return Assigned::Full;
        }
        let a = Ipv4Addr::from(BASE + 1 + t.by_index.len() as u32);
        t.by_index.push(name.to_string());
        t.by_name.insert(name.to_string(), a);
        Assigned::New(a)
    }

    /// The name `ip` was handed out for, if any.
    pub fn name_of(&self, ip: Ipv4Addr) -> Option<String> {
        if !is_synthetic(ip) {
            return None;
        }
        let i = u32::from(ip).checked_sub(BASE + 1)? as usize;
        self.lock().by_index.get(i).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_their_address_and_map_back() {
        let n = Names::default();
        let a = match n.address_for("a.example") {
            Assigned::New(a) => a,
            other => panic!("{other:?}"),
        };
        assert_eq!(a, Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(n.address_for("a.example"), Assigned::Known(a));
        let Assigned::New(b) = n.address_for("b.example") else {
            panic!()
        };
        assert_ne!(a, b);
        assert_eq!(n.name_of(b).as_deref(), Some("b.example"));
        assert_eq!(n.name_of(Ipv4Addr::new(198, 18, 0, 0)), None);
        assert_eq!(n.name_of(Ipv4Addr::new(198, 18, 9, 9)), None);
        assert_eq!(n.name_of(Ipv4Addr::new(10, 0, 0, 1)), None);
        assert!(is_synthetic(Ipv4Addr::new(198, 19, 255, 255)));
        assert!(!is_synthetic(Ipv4Addr::new(198, 20, 0, 0)));
        assert!(!is_synthetic(Ipv4Addr::new(198, 17, 255, 255)));
    }

    #[test]
    fn the_table_is_bounded() {
        let n = Names::default();
        for i in 0..MAX_NAMES {
            assert!(matches!(
                n.address_for(&format!("n{i}.example")),
                Assigned::New(_)
            ));
        }
        assert_eq!(n.address_for("one-more.example"), Assigned::Full);
        let last = Ipv4Addr::from(BASE + MAX_NAMES as u32);
        assert!(is_synthetic(last));
    }
}
