//! `--rlimit NAME=VALUE`: names, and the list applied inside the sandbox.

/// (name, resource) of every rlimit a Spec may set.
pub const NAMES: &[(&str, u32)] = &[
    ("as", libc::RLIMIT_AS),
    ("core", libc::RLIMIT_CORE),
    ("cpu", libc::RLIMIT_CPU),
    ("data", libc::RLIMIT_DATA),
    ("fsize", libc::RLIMIT_FSIZE),
    ("locks", libc::RLIMIT_LOCKS),
    ("memlock", libc::RLIMIT_MEMLOCK),
    ("msgqueue", libc::RLIMIT_MSGQUEUE),
    ("nice", libc::RLIMIT_NICE),
    ("nofile", libc::RLIMIT_NOFILE),
    ("nproc", libc::RLIMIT_NPROC),
    ("rss", libc::RLIMIT_RSS),
    ("rtprio", libc::RLIMIT_RTPRIO),
    ("rttime", libc::RLIMIT_RTTIME),
    ("sigpending", libc::RLIMIT_SIGPENDING),
    ("stack", libc::RLIMIT_STACK),
];

/// The resource number of an rlimit name (`nofile`).
pub fn resource(name: &str) -> Option<libc::c_int> {
    NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, r)| *r as libc::c_int)
}

/// Check one `name = value` pair; the error is a message for the key.
pub fn check(name: &str, value: u64) -> Result<(), String> {
    let Some(r) = resource(name) else {
        let names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
        return Err(format!(
            "unknown rlimit {name:?}; known: {}",
            names.join(", ")
        ));
    };
    let max = match r as u32 {
        libc::RLIMIT_NICE => Some(40),
        libc::RLIMIT_RTPRIO => Some(99),
        // The kernel refuses more than fs.nr_open (at most 2^30).
        libc::RLIMIT_NOFILE => Some(1 << 30),
        _ => None,
    };
    if let Some(max) = max
        && value > max
    {
        return Err(format!("{value} is above the maximum {max} for {name}"));
    }
    Ok(())
}

/// Add or lower `(resource, value)` in `list` (the smaller value wins).
pub fn merge_min(list: &mut Vec<(libc::c_int, u64)>, resource: libc::c_int, value: u64) {
    match list.iter_mut().find(|(r, _)| *r == resource) {
        Some(entry) => entry.1 = entry.1.min(value),
        None => list.push((resource, value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(resource("nofile"), Some(libc::RLIMIT_NOFILE as i32));
        assert!(check("nofile", 1024).is_ok());
        assert!(check("nofiles", 1).unwrap_err().contains("known: as, core"));
        assert!(check("nice", 41).is_err());
        let mut l = vec![(1, 10)];
        merge_min(&mut l, 1, 5);
        merge_min(&mut l, 2, 7);
        assert_eq!(l, vec![(1, 5), (2, 7)]);
    }

    /// The Spec's list of byte-valued rlimits names real rlimits, and the
    /// kernel counts exactly those in bytes.
    #[test]
    fn size_rlimits_are_rlimits() {
        for name in crate::spec::SIZE_RLIMITS {
            assert!(resource(name).is_some(), "{name}");
        }
        let bytes: Vec<&str> = NAMES
            .iter()
            .filter(|(_, r)| {
                matches!(
                    *r,
                    libc::RLIMIT_AS
                        | libc::RLIMIT_DATA
                        | libc::RLIMIT_FSIZE
                        | libc::RLIMIT_MEMLOCK
                        | libc::RLIMIT_MSGQUEUE
                        | libc::RLIMIT_RSS
                        | libc::RLIMIT_STACK
                )
            })
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(bytes, crate::spec::SIZE_RLIMITS);
    }
}
