//! Block I/O limits (`limits.io`, cgroup v2 `io.max`): validation, the
//! `--io-max` text form, device resolution and the `io.max` lines.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::spec::{ByteSize, IoMax, SpecError};

/// Largest iops value the kernel keeps (it clamps to UINT_MAX silently).
pub const MAX_IOPS: u64 = u32::MAX as u64;

/// `(key, value)` pairs set in `e`, in [`KEYS`] order.
pub fn values(e: &IoMax) -> Vec<(&'static str, u64)> {
    [
        ("rbps", e.rbps.map(|b| b.0)),
        ("wbps", e.wbps.map(|b| b.0)),
        ("riops", e.riops),
        ("wiops", e.wiops),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k, v)))
    .collect()
}

/// Check `limits.io`; errors name the key (`limits.io[1].wbps`).
pub fn validate(entries: &[IoMax]) -> Result<(), SpecError> {
    let err = |k: String, m: String| Err(SpecError::new(format!("limits.{k}"), m));
    if entries.is_empty() {
        return err(
            "io".into(),
            "empty list; name at least one device or omit limits.io".into(),
        );
    }
    for (i, e) in entries.iter().enumerate() {
        let at = format!("io[{i}]");
        if !e.device.is_absolute() {
            return err(
                format!("{at}.device"),
                format!("{:?} must be an absolute path such as /dev/vda", e.device),
            );
        }
        if let Some(j) = entries[..i].iter().position(|o| o.device == e.device) {
            return err(
                format!("{at}.device"),
                format!("{} is already limited by io[{j}]", e.device.display()),
            );
        }
        let set = values(e);
        if set.is_empty() {
            return err(at, "set at least one of rbps, wbps, riops, wiops".into());
        }
        for (k, v) in set {
            // The kernel refuses 0 and 1 (`io.max` reads them as invalid).
            if v < 2 {
                return err(
                    format!("{at}.{k}"),
                    format!("{v} is below the minimum of 2"),
                );
            }
            if k.ends_with("iops") && v > MAX_IOPS {
                return err(
                    format!("{at}.{k}"),
                    format!("{v} is above the maximum of {MAX_IOPS}"),
                );
            }
        }
    }
    Ok(())
}

/// Parse the `--io-max` value `DEVICE:KEY=VALUE[,KEY=VALUE...]`. Sizes take
/// suffixes (`10M`); the device is split off at the last `:` so paths such
/// as `/dev/disk/by-path/pci-0000:00:04.0` work.
pub fn parse_flag(text: &str) -> Result<IoMax, String> {
    let usage = "expected DEVICE:KEY=VALUE[,KEY=VALUE...] with keys rbps wbps riops wiops, e.g. /dev/vda:wbps=10M,riops=200";
    let (device, pairs) = text
        .rsplit_once(':')
        .filter(|(d, p)| !d.is_empty() && !p.is_empty())
        .ok_or_else(|| format!("{text:?}: {usage}"))?;
    let mut e = IoMax {
        device: PathBuf::from(device),
        rbps: None,
        wbps: None,
        riops: None,
        wiops: None,
    };
    for pair in pairs.split(',') {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?}: {usage}"))?;
        let dup = || format!("{k} given twice in {text:?}");
        let count = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{k}={v:?}: not a whole number of operations per second"))
        };
        match k {
            "rbps" | "wbps" => {
                let b = ByteSize::parse(v).map_err(|m| format!("{k}: {m}"))?;
                let slot = if k == "rbps" {
                    &mut e.rbps
                } else {
                    &mut e.wbps
                };
                if slot.replace(b).is_some() {
                    return Err(dup());
                }
            }
            "riops" | "wiops" => {
                let n = count(v)?;
                let slot = if k == "riops" {
                    &mut e.riops
                } else {
                    &mut e.wiops
                };
                if slot.replace(n).is_some() {
                    return Err(dup());
                }
            }
            _ => return Err(format!("unknown key {k:?}: {usage}")),
        }
    }
    Ok(e)
}

/// A device of `limits.io` resolved to its device number.
#[derive(Debug, Clone, PartialEq)]
pub struct IoDevice {
    pub index: usize,
    pub device: PathBuf,
    pub major: u32,
    pub minor: u32,
    /// The line written to `io.max`.
    pub line: String,
}

/// `MAJ:MIN rbps=N wbps=N riops=N wiops=N`, unset keys left out (the
/// kernel keeps them at `max`).
pub fn io_max_line(major: u32, minor: u32, e: &IoMax) -> String {
    let mut s = format!("{major}:{minor}");
    for (k, v) in values(e) {
        s.push_str(&format!(" {k}={v}"));
    }
    s
}

/// Resolve every entry to a whole-disk block device. Err is the index of
/// the bad entry and what is wrong with it.
pub fn resolve(entries: &[IoMax]) -> Result<Vec<IoDevice>, (usize, String)> {
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let (major, minor) = block_device(&e.device).map_err(|m| (i, m))?;
            Ok(IoDevice {
                index: i,
                device: e.device.clone(),
                major,
                minor,
                line: io_max_line(major, minor, e),
            })
        })
        .collect()
}

/// `(major, minor)` of a whole-disk block device (the kernel refuses
/// `io.max` on partitions).
fn block_device(path: &Path) -> Result<(u32, u32), String> {
    let md = std::fs::metadata(path)
        .map_err(|e| format!("cannot stat it: {}", super::error::errno_text(&e)))?;
    let ft = md.file_type();
    if !ft.is_block_device() {
        let kind = if ft.is_char_device() {
            "a character device"
        } else if ft.is_dir() {
            "a directory"
        } else if ft.is_file() {
            "a regular file"
        } else {
            "not a device"
        };
        return Err(format!(
            "not a block device ({kind}); io limits apply to disks such as /dev/vda or /dev/nvme0n1 (see /sys/block)"
        ));
    }
    let rdev = md.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    if Path::new(&format!("/sys/dev/block/{major}:{minor}/partition")).exists() {
        return Err(format!(
            "{major}:{minor} is a partition; the kernel limits whole disks only, name the disk it belongs to"
        ));
    }
    Ok((major, minor))
}

/// Bytes read and written by the cgroup, summed over the devices of
/// `io.stat` (`MAJ:MIN rbytes=N wbytes=N rios=N ...` per line).
pub fn parse_stat(text: &str) -> (u64, u64) {
    let (mut r, mut w) = (0u64, 0u64);
    for field in text.split_whitespace() {
        if let Some((k, v)) = field.split_once('=')
            && let Ok(n) = v.parse::<u64>()
        {
            match k {
                "rbytes" => r = r.saturating_add(n),
                "wbytes" => w = w.saturating_add(n),
                _ => {}
            }
        }
    }
    (r, w)
}
