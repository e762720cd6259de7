//! Capabilities: parse `--cap-add` names, and drop everything else.

use std::str::FromStr;

use caps::{Capability, CapsHashSet};

/// Parse capability names (`CAP_NET_RAW`, `net_raw`, or `ALL`).
pub fn parse_cap_list(names: &[String]) -> Result<CapsHashSet, String> {
    let mut set = CapsHashSet::new();
    for name in names {
        if name.eq_ignore_ascii_case("all") {
            set.extend(caps::all());
            continue;
        }
        let upper = name.to_ascii_uppercase();
        let full = if upper.starts_with("CAP_") {
            upper
        } else {
            format!("CAP_{upper}")
        };
        let cap = Capability::from_str(&full).map_err(|_| {
            format!("unknown capability {name:?} (expected a name like CAP_NET_RAW, or ALL)")
        })?;
        set.insert(cap);
    }
    Ok(set)
}

/// The five named sets of `security.capabilities`, in the order
/// bounding, effective, permitted, inheritable, ambient.
pub fn sets(s: &crate::spec::CapabilitySets) -> [(&'static str, &Vec<String>); 5] {
    [
        ("bounding", &s.bounding),
        ("effective", &s.effective),
        ("permitted", &s.permitted),
        ("inheritable", &s.inheritable),
        ("ambient", &s.ambient),
    ]
}

/// Bit N for capability N.
pub fn mask(set: &CapsHashSet) -> u64 {
    set.iter().fold(0, |m, c| m | c.bitmask())
}
