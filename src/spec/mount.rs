//! The vocabulary of the `mount` filesystem operation: mount(8) option
//! words, read into a plain description (no kernel flag here: the fs plan
//! turns it into `MS_*` / `MOUNT_ATTR_*`). Numeric filesystem options are
//! parsed into numbers, so that no text of a profile ever reaches a mount
//! option string.

/// The filesystem types the `mount` operation knows.
pub const FSTYPES: &[&str] = &[
    "bind", "tmpfs", "proc", "sysfs", "devpts", "mqueue", "cgroup2",
];

/// How mount events propagate at the mount point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Private,
    Slave,
    Unbindable,
    /// A peer group of the sandbox's own: hutch init made every mount a
    /// slave of the host's first, so a mount made under a shared one
    /// reaches its peers in the sandbox (and namespaces cloned from it),
    /// never the host.
    Shared,
}

/// Access-time behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Atime {
    Relatime,
    Noatime,
    Strictatime,
}

/// What a list of options asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountOptions {
    pub readonly: bool,
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
    pub nosymfollow: bool,
    pub nodiratime: bool,
    pub atime: Option<Atime>,
    /// bind: also the submounts (`rbind`).
    pub recursive: bool,
    /// (propagation, recursive).
    pub propagation: Option<(Propagation, bool)>,
    /// tmpfs / devpts numbers.
    pub size: Option<u64>,
    pub nr_inodes: Option<u64>,
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub ptmxmode: Option<u32>,
    /// devpts `max=`.
    pub max: Option<u64>,
    /// tmpfs `tmpcopyup` (the OCI runtimes' word: copy what is under the
    /// mount point into the new tmpfs). Only an empty or missing
    /// directory can be copied up; anything else fails the build.
    pub copy_up: bool,
}

/// Read `options` for a mount of type `fstype`. Errors name the option.
pub fn parse_options(fstype: &str, options: &[String]) -> Result<MountOptions, String> {
    if !FSTYPES.contains(&fstype) {
        return Err(format!(
            "unknown fstype {fstype:?}, expected one of {}",
            FSTYPES.join(", ")
        ));
    }
    let mut o = MountOptions::default();
    for word in options {
        let (key, value) = match word.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (word.as_str(), None),
        };
        let takes_value = |allowed: &[&str]| allowed.contains(&fstype);
        match (key, value) {
            ("ro", None) => o.readonly = true,
            ("rw", None) => o.readonly = false,
            ("nosuid", None) => o.nosuid = true,
            ("suid", None) => o.nosuid = false,
            ("nodev", None) => o.nodev = true,
            ("dev", None) => o.nodev = false,
            ("noexec", None) => o.noexec = true,
            ("exec", None) => o.noexec = false,
            ("nosymfollow", None) => o.nosymfollow = true,
            ("symfollow", None) => o.nosymfollow = false,
            ("nodiratime", None) => o.nodiratime = true,
            ("diratime", None) => o.nodiratime = false,
            ("relatime", None) => o.atime = Some(Atime::Relatime),
            ("norelatime", None) | ("atime", None) => o.atime = None,
            ("noatime", None) => o.atime = Some(Atime::Noatime),
            ("strictatime", None) => o.atime = Some(Atime::Strictatime),
            ("bind", None) if fstype == "bind" => o.recursive = false,
            ("rbind", None) if fstype == "bind" => o.recursive = true,
            ("private", None) => o.propagation = Some((Propagation::Private, false)),
            ("rprivate", None) => o.propagation = Some((Propagation::Private, true)),
            ("slave", None) => o.propagation = Some((Propagation::Slave, false)),
            ("rslave", None) => o.propagation = Some((Propagation::Slave, true)),
            ("unbindable", None) => o.propagation = Some((Propagation::Unbindable, false)),
            ("runbindable", None) => o.propagation = Some((Propagation::Unbindable, true)),
            ("shared", None) => o.propagation = Some((Propagation::Shared, false)),
            ("rshared", None) => o.propagation = Some((Propagation::Shared, true)),
            ("newinstance", None) if fstype == "devpts" => {}
            ("tmpcopyup", None) if fstype == "tmpfs" => o.copy_up = true,
            ("size", Some(v)) if takes_value(&["tmpfs"]) => o.size = Some(size(word, v)?),
            ("nr_inodes", Some(v)) if takes_value(&["tmpfs"]) => o.nr_inodes = Some(size(word, v)?),
            ("mode", Some(v)) if takes_value(&["tmpfs", "devpts"]) => {
                o.mode = Some(octal(word, v)?)
            }
            ("ptmxmode", Some(v)) if takes_value(&["devpts"]) => o.ptmxmode = Some(octal(word, v)?),
            ("uid", Some(v)) if takes_value(&["tmpfs", "devpts"]) => o.uid = Some(id(word, v)?),
            ("gid", Some(v)) if takes_value(&["tmpfs", "devpts"]) => o.gid = Some(id(word, v)?),
            ("max", Some(v)) if takes_value(&["devpts"]) => o.max = Some(number(word, v)?),
            _ => {
                return Err(format!(
                    "option {:?} is not supported for fstype {fstype:?}",
                    printable(word)
                ));
            }
        }
    }
    Ok(o)
}

/// A word of the input, safe to print (control characters escaped,
/// bounded).
fn printable(word: &str) -> String {
    word.chars()
        .take(64)
        .flat_map(char::escape_default)
        .collect()
}

fn number(word: &str, v: &str) -> Result<u64, String> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("option {:?}: not a number", printable(word)));
    }
    v.parse()
        .map_err(|_| format!("option {:?}: out of range", printable(word)))
}

/// A count or size with an optional k/m/g suffix (tmpfs's own syntax).
fn size(word: &str, v: &str) -> Result<u64, String> {
    let (digits, mult) = match v.as_bytes().last() {
        Some(b'k' | b'K') => (&v[..v.len() - 1], 1u64 << 10),
        Some(b'm' | b'M') => (&v[..v.len() - 1], 1 << 20),
        Some(b'g' | b'G') => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    let n = number(word, digits)?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("option {:?}: out of range", printable(word)))
}

fn octal(word: &str, v: &str) -> Result<u32, String> {
    let ok = !v.is_empty() && v.len() <= 5 && v.bytes().all(|b| (b'0'..=b'7').contains(&b));
    match ok.then(|| u32::from_str_radix(v, 8)) {
        Some(Ok(m)) if m <= 0o7777 => Ok(m),
        _ => Err(format!(
            "option {:?}: not an octal mode up to 7777",
            printable(word)
        )),
    }
}

fn id(word: &str, v: &str) -> Result<u32, String> {
    let n = number(word, v)?;
    u32::try_from(n)
        .ok()
        .filter(|n| *n != u32::MAX)
        .ok_or_else(|| format!("option {:?}: not a valid id", printable(word)))
}

/// The device kinds of the `device` operation.
pub const DEVICE_KINDS: &[&str] = &["char", "block", "fifo"];

#[cfg(test)]
mod tests {
    use super::*;

    fn o(fstype: &str, words: &[&str]) -> Result<MountOptions, String> {
        parse_options(
            fstype,
            &words.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
        )
    }

    #[test]
    fn words_and_numbers_are_read_strictly() {
        let t = o(
            "tmpfs",
            &["nosuid", "size=65536k", "mode=1777", "strictatime"],
        )
        .unwrap();
        assert!(t.nosuid && !t.nodev);
        assert_eq!(t.size, Some(65536 << 10));
        assert_eq!(t.mode, Some(0o1777));
        assert_eq!(t.atime, Some(Atime::Strictatime));
        let b = o("bind", &["rbind", "ro", "rprivate"]).unwrap();
        assert!(b.recursive && b.readonly);
        assert_eq!(b.propagation, Some((Propagation::Private, true)));
        assert!(o("devpts", &["newinstance", "ptmxmode=0666", "gid=5"]).is_ok());
        for bad in [
            &["size=1,nr_inodes=2"][..],
            &["mode=999"],
            &["uid=-1"],
            &["size="],
            &["context=x"],
        ] {
            assert!(o("tmpfs", bad).is_err(), "{bad:?}");
        }
        assert!(o("bind", &["size=1"]).is_err(), "size is tmpfs's");
        assert!(o("overlay", &[]).is_err());
        let e = o("tmpfs", &["x\u{1b}[31m"]).unwrap_err();
        assert!(!e.contains('\u{1b}'), "{e}");
    }
}
