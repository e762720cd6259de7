//! A session's per-command counters (`STATE/ID/progress`), written in
//! place at the end of every command instead of rewriting `session.json`.
//!
//! `session.json` is replaced by a rename, and on ext4 a rename over an
//! existing file starts the write-back of the new file's data
//! (`auto_da_alloc`, what makes the rename safe across a crash): 0.4 ms
//! and more per command, on the report's path. The counters that change
//! with every command (`commands_run`, `used_unix_ms`, `disk_usage`) go
//! here instead, with one `pwrite` of an already allocated block.
//!
//! The file is two slots of [`SLOT`] bytes, each one sector: a record, a
//! tab, the first 16 hex digits of its sha256, spaces, a newline. Record
//! `seq` goes to slot `seq % 2`, so a write torn by a crash spoils only
//! the slot it wrote and the other still holds the record before it;
//! a reader takes the valid slot with the highest `seq`. `session.json`
//! stays the description of the session: whoever loads it merges these
//! counters in ([`merge`]), the newer of the two winning, and every
//! rewrite of `session.json` carries the merged values.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileExt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::disk::DiskUsage;
use super::error::{Result, WorkspaceError};
use super::info::SessionInfo;
use crate::sys;

/// The file's name in the session directory.
pub const PROGRESS: &std::ffi::CStr = c"progress";
/// Bytes of one slot: a sector, which a disk writes whole.
pub const SLOT: usize = 512;
/// Hex digits of the checksum.
const SUM_DIGITS: usize = 16;

/// The counters after a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Bumped by every write; picks the slot.
    pub seq: u64,
    pub commands_run: u64,
    pub used_unix_ms: u64,
    pub disk_usage: Option<DiskUsage>,
}

fn checksum(record: &[u8]) -> String {
    hex::encode(Sha256::digest(record))[..SUM_DIGITS].to_string()
}

/// One slot's bytes for `p`.
fn encode(p: &Progress) -> Vec<u8> {
    let record = serde_json::to_vec(p).expect("progress serializes");
    let mut slot = record.clone();
    slot.push(b'\t');
    slot.extend_from_slice(checksum(&record).as_bytes());
    // A record is ~150 bytes; one that does not fit would be a bug here.
    assert!(slot.len() < SLOT, "a progress record fits its slot");
    slot.resize(SLOT - 1, b' ');
    slot.push(b'\n');
    slot
}

/// The record in one slot, if it is whole and its checksum matches.
fn decode(slot: &[u8]) -> Option<Progress> {
    let text = slot.trim_ascii_end();
    let tab = text.iter().rposition(|b| *b == b'\t')?;
    let (record, sum) = (&text[..tab], &text[tab + 1..]);
    if sum != checksum(record).as_bytes() {
        return None;
    }
    serde_json::from_slice(record).ok()
}

/// The newest whole record of the session directory `dir`; None when
/// there is no file or no whole slot (then `session.json` alone counts).
pub fn read(dir: BorrowedFd<'_>) -> Result<Option<Progress>> {
    let data = match super::layers::read_regular(dir, PROGRESS, 2 * SLOT as u64, b"progress") {
        Ok(d) => d,
        Err(WorkspaceError::Sys(e)) if e.errno == sys::Errno::ENOENT => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(data.chunks(SLOT).filter_map(decode).max_by_key(|p| p.seq))
}

/// Write `p` into its slot (`p.seq % 2`) in place. The caller holds the
/// session lock.
pub fn write(dir: BorrowedFd<'_>, p: &Progress) -> Result<()> {
    let fd = sys::open_beneath(dir, PROGRESS, libc::O_RDWR | libc::O_CREAT, 0o600)?;
    if !sys::fstat(fd.as_fd())?.is_file() {
        return Err(WorkspaceError::Unsupported {
            path: "progress".into(),
            reason: "not a regular file".into(),
        });
    }
    let file = std::fs::File::from(fd);
    let offset = (p.seq % 2) * SLOT as u64;
    file.write_all_at(&encode(p), offset)
        .map_err(|e| WorkspaceError::io("write the session's progress", e))
}

/// Merge `p` into `info` (loaded from `session.json`): the counters only
/// grow, and the disk use is that of the newer of the two.
pub fn merge(info: &mut SessionInfo, p: &Progress) {
    if p.used_unix_ms >= info.used_unix_ms {
        info.disk_usage = p.disk_usage.or(info.disk_usage);
    }
    info.commands_run = info.commands_run.max(p.commands_run);
    info.used_unix_ms = info.used_unix_ms.max(p.used_unix_ms);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(seq: u64) -> Progress {
        Progress {
            seq,
            commands_run: seq.saturating_mul(3),
            used_unix_ms: 1_700_000_000_000 + seq % 1000,
            disk_usage: seq.is_multiple_of(2).then_some(DiskUsage {
                used_bytes: u64::MAX,
                limit_bytes: u64::MAX,
                limit_hit: true,
            }),
        }
    }

    #[test]
    fn a_slot_round_trips_and_fits_a_sector() {
        for seq in [0, 7, u64::MAX - 1, u64::MAX] {
            let slot = encode(&p(seq));
            assert_eq!(slot.len(), SLOT);
            assert_eq!(decode(&slot), Some(p(seq)));
        }
    }

    /// A write torn anywhere (the new slot's first bytes over the old
    /// one's) reads as one of the two records or as nothing, never as a
    /// third; a torn record itself never reads.
    #[test]
    fn a_torn_or_altered_slot_is_not_read() {
        for (older, newer) in [(p(7), p(8)), (p(8), p(9)), (p(9), p(123_456_789_012))] {
            let (old, new) = (encode(&older), encode(&newer));
            let record_end = new.iter().position(|b| *b == b'\t').unwrap();
            for cut in 0..=SLOT {
                let mut torn = new[..cut].to_vec();
                torn.extend_from_slice(&old[cut..]);
                let got = decode(&torn);
                assert!(
                    got.is_none() || got == Some(older) || got == Some(newer),
                    "cut at {cut}: {got:?}"
                );
                if torn[..record_end] != new[..record_end]
                    && torn[..record_end] != old[..record_end]
                {
                    assert_eq!(got, None, "cut at {cut}");
                }
            }
        }
        assert_eq!(decode(&[b' '; SLOT]), None);
        assert_eq!(decode(&[0; SLOT]), None);
    }

    #[test]
    fn the_newest_whole_slot_wins_on_disk() {
        let dir = std::env::temp_dir().join(format!("hutch-progress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fd = std::fs::File::open(&dir).unwrap();
        assert_eq!(read(fd.as_fd()).unwrap(), None);
        for seq in 1..=5 {
            write(fd.as_fd(), &p(seq)).unwrap();
            assert_eq!(read(fd.as_fd()).unwrap(), Some(p(seq)));
        }
        // A crash tore the newest slot (5 is in slot 1): the one before.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("progress"))
            .unwrap();
        file.write_all_at(b"\0\0\0\0", SLOT as u64 + 20).unwrap();
        assert_eq!(read(fd.as_fd()).unwrap(), Some(p(4)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn merging_keeps_the_larger_counters_and_the_newer_disk_use() {
        let json = r#"{"id":"x","source":{"kind":"dir","path":"/s"},"fingerprint":"f",
            "files":0,"created_unix_ms":1,"used_unix_ms":50,"deadline_unix_ms":null,
            "max_commands":null,"commands_run":9}"#;
        let mut info: SessionInfo = serde_json::from_str(json).unwrap();
        let mut older = p(1);
        older.used_unix_ms = 10;
        merge(&mut info, &older);
        assert_eq!((info.commands_run, info.used_unix_ms), (9, 50));
        assert_eq!(info.disk_usage, None);
        merge(&mut info, &p(4));
        assert_eq!(info.commands_run, 12);
        assert_eq!(info.disk_usage, p(4).disk_usage);
    }
}
