//! Private id ranges of root launches (`docs/images.md`, "Id ranges"):
//! a root launch that needs more than one id and has no `/etc/subuid`
//! range for root gets 65 536 host ids of its own, as systemd-nspawn's
//! `--private-users=pick` does.
//!
//! A range is chosen from [`REGION_START`]..[`REGION_END`], in steps of
//! [`RANGE_SIZE`], never overlapping a range of `/etc/subuid` or
//! `/etc/subgid` (anyone's), a user of `/etc/passwd` or a group of
//! `/etc/group`, or a range another live holder has. The allocation is a
//! record file `RANGES_DIR/START.json` written under an exclusive flock of
//! `RANGES_DIR/.lock`, naming its holders: processes (the supervisor, then
//! also the sandbox's pid 1, so an OCI-created sandbox whose launcher is
//! gone keeps it) and, for a session, the session's directory. A record
//! whose holders are all gone (a supervisor killed by SIGKILL) is reclaimed
//! by the next allocation; a dropped [`Allocation`] removes its record.
//!
//! The records are host-wide, in root's runtime directory whatever
//! `HUTCH_RUNTIME_DIR` says: two root launches with different runtime
//! directories must still never share a range.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::subid;
use crate::registry::ProcessRef;
use crate::sys;

/// Ids in one range.
pub const RANGE_SIZE: u32 = 0x1_0000;
/// The first host id a range may start at (nspawn's `UID_SHIFT_PICK_MIN`).
pub const REGION_START: u32 = 0x0008_0000;
/// The end (exclusive) of the region ranges are taken from (nspawn's
/// `UID_SHIFT_PICK_MAX`).
pub const REGION_END: u32 = 0x6FFF_0000;

/// Where the records are (root's runtime directory).
const RANGES_DIR: &str = "/run/hutch/ranges";
const LOCK_FILE: &str = ".lock";
/// The largest record read (a few holders).
const MAX_RECORD: u64 = 64 * 1024;

/// Why no range could be allocated.
#[derive(Debug, thiserror::Error)]
pub enum IdRangeError {
    #[error(
        "allocating a private id range: {what} {}: {err} (root's runtime directory must be writable; see `hutch check`)",
        path.display()
    )]
    Io {
        what: &'static str,
        path: PathBuf,
        err: std::io::Error,
    },
    #[error("allocating a private id range: {0}")]
    Sys(#[from] sys::SysError),
    #[error(
        "allocating a private id range: every 65536-id range of {REGION_START:#x}..{REGION_END:#x} overlaps /etc/subuid, /etc/subgid, a host user or group, or a live sandbox; end some sandboxes or give root a range in /etc/subuid and /etc/subgid"
    )]
    Exhausted,
    #[error(
        "id range {start} (held for {holder}) is not recorded in {RANGES_DIR} and is no longer free (another holder, /etc/subuid or a host user has it now): close the session and create it again"
    )]
    NotHeld { start: u32, holder: String },
}

/// What a record file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    start: u32,
    count: u32,
    /// Processes that hold the range while any of them lives.
    #[serde(default)]
    processes: Vec<ProcessRef>,
    /// Sessions' directories: held while any exists. More than one when
    /// a session was forked: the children's layers are the parent's,
    /// files owned by this range's ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    sessions: Vec<PathBuf>,
}

impl Record {
    fn is_live(&self) -> bool {
        self.processes.iter().any(ProcessRef::is_alive)
            || self.sessions.iter().any(|d| d.is_dir())
    }
}

/// A range this process allocated: its record is removed when dropped,
/// unless handed to a session ([`Allocation::keep_for_session`]).
#[derive(Debug)]
pub(crate) struct Allocation {
    start: u32,
    dir: PathBuf,
    /// False once a session holds it (nothing is removed on drop).
    owned: bool,
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> IdRangeError {
    let path = path.to_path_buf();
    move |err| IdRangeError::Io { what, path, err }
}

/// The records' directory (created 0700) and its lock, held exclusively.
fn locked(dir: &Path) -> Result<std::fs::File, IdRangeError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io("create", dir))?;
    let lock = dir.join(LOCK_FILE);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&lock)
        .map_err(io("open", &lock))?;
    sys::flock_exclusive(f.as_fd(), true)?;
    Ok(f)
}

fn record_path(dir: &Path, start: u32) -> PathBuf {
    dir.join(format!("{start}.json"))
}

fn read_record(path: &Path) -> Option<Record> {
    use std::io::Read;
    let f = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    f.take(MAX_RECORD).read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

fn write_record(dir: &Path, r: &Record) -> Result<(), IdRangeError> {
    let path = record_path(dir, r.start);
    let tmp = dir.join(format!(".tmp-{}-{}", r.start, std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(io("write", &tmp))?;
    f.write_all(&serde_json::to_vec(r).expect("records serialize"))
        .map_err(io("write", &tmp))?;
    drop(f);
    std::fs::rename(&tmp, &path).map_err(io("rename", &path))
}

/// Ranges of live records; records whose holders are all gone are
/// removed (reclaimed). The caller holds the lock.
fn live_ranges(dir: &Path) -> Result<Vec<(u32, u32)>, IdRangeError> {
    let mut live = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io("read", dir))? {
        let entry = entry.map_err(io("read", dir))?;
        let name = entry.file_name();
        let Some(start) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        match read_record(&entry.path()) {
            Some(r) if r.start == start && r.is_live() => live.push((r.start, r.count)),
            // Gone holders, or a record torn by a crash mid-write (the
            // rename makes that unlikely): the range is free again.
            _ => {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    Ok(live)
}

/// Ids the host already uses: every range of /etc/subuid and /etc/subgid
/// (anyone's) as (start, count), and every uid and gid of /etc/passwd and
/// /etc/group.
fn host_ids(etc: &Path) -> (Vec<(u32, u32)>, BTreeSet<u32>) {
    let mut ranges = Vec::new();
    for file in ["subuid", "subgid"] {
        ranges.extend(subid::all_ranges(&etc.join(file)).iter().map(|r| (r.start, r.count)));
    }
    let mut ids = BTreeSet::new();
    for (file, fields) in [("passwd", &[2usize, 3][..]), ("group", &[2][..])] {
        let Some(text) = subid::read_small(&etc.join(file)) else {
            continue;
        };
        for line in text.lines() {
            let f: Vec<&str> = line.split(':').collect();
            ids.extend(fields.iter().filter_map(|i| f.get(*i)?.parse::<u32>().ok()));
        }
    }
    (ranges, ids)
}

fn overlaps(a: (u32, u32), b: (u32, u32)) -> bool {
    let (a0, a1) = (u64::from(a.0), u64::from(a.0) + u64::from(a.1));
    let (b0, b1) = (u64::from(b.0), u64::from(b.0) + u64::from(b.1));
    a0 < b1 && b0 < a1
}

/// The number of candidate ranges in the region.
const CANDIDATES: u32 = (REGION_END - REGION_START) / RANGE_SIZE;

/// The first free candidate from index `first` on (wrapping), if any.
fn pick(first: u32, taken: &[(u32, u32)], host_ids: &BTreeSet<u32>) -> Option<u32> {
    (0..CANDIDATES).find_map(|k| {
        let start = REGION_START + ((first + k) % CANDIDATES) * RANGE_SIZE;
        let r = (start, RANGE_SIZE);
        let free = !taken.iter().any(|t| overlaps(r, *t))
            && host_ids.range(start..start + RANGE_SIZE).next().is_none();
        free.then_some(start)
    })
}

impl Allocation {
    /// A new range held by this process.
    pub(crate) fn allocate() -> Result<Allocation, IdRangeError> {
        Self::allocate_in(Path::new(RANGES_DIR), Path::new("/etc"))
    }

    fn allocate_in(dir: &Path, etc: &Path) -> Result<Allocation, IdRangeError> {
        let _lock = locked(dir)?;
        let mut taken = live_ranges(dir)?;
        let (ranges, ids) = host_ids(etc);
        taken.extend(ranges);
        // A random first candidate, as nspawn does: a range just released
        // is not the next one given out.
        let mut b = [0u8; 4];
        sys::getrandom(&mut b)?;
        let first = u32::from_le_bytes(b) % CANDIDATES;
        let start = pick(first, &taken, &ids).ok_or(IdRangeError::Exhausted)?;
        let me = ProcessRef::of(std::process::id() as i32)
            .expect("this process is in /proc");
        write_record(
            dir,
            &Record {
                start,
                count: RANGE_SIZE,
                processes: vec![me],
                sessions: Vec::new(),
            },
        )?;
        Ok(Allocation {
            start,
            dir: dir.to_path_buf(),
            owned: true,
        })
    }

    /// A session's range again, for one of its commands (held by this
    /// process too until dropped; the session's hold stays).
    pub(crate) fn resume(start: u32, session: &Path) -> Result<Allocation, IdRangeError> {
        Self::resume_in(Path::new(RANGES_DIR), start, session)
    }

    fn resume_in(dir: &Path, start: u32, session: &Path) -> Result<Allocation, IdRangeError> {
        let _lock = locked(dir)?;
        let path = record_path(dir, start);
        let not_held = || IdRangeError::NotHeld {
            start,
            holder: session.display().to_string(),
        };
        let mut r = match read_record(&path) {
            Some(r) => r,
            // The records are in /run, the sessions survive a reboot: the
            // session's range is taken again if nothing else has it now.
            None => {
                let mut taken = live_ranges(dir)?;
                let (ranges, ids) = host_ids(Path::new("/etc"));
                taken.extend(ranges);
                let index = start.wrapping_sub(REGION_START) / RANGE_SIZE;
                if !start.is_multiple_of(RANGE_SIZE)
                    || !(REGION_START..REGION_END).contains(&start)
                    || pick(index, &taken, &ids) != Some(start)
                {
                    return Err(not_held());
                }
                Record {
                    start,
                    count: RANGE_SIZE,
                    processes: Vec::new(),
                    sessions: vec![session.to_path_buf()],
                }
            }
        };
        if !r.sessions.iter().any(|s| s == session) {
            return Err(not_held());
        }
        r.processes.retain(ProcessRef::is_alive);
        r.processes
            .extend(ProcessRef::of(std::process::id() as i32));
        write_record(dir, &r)?;
        Ok(Allocation {
            start,
            dir: dir.to_path_buf(),
            // The session's: never removed by a command.
            owned: false,
        })
    }

    /// The first host id of the range.
    pub(crate) fn start(&self) -> u32 {
        self.start
    }

    /// `pid` (the sandbox's pid 1) holds the range too, while it lives.
    pub(crate) fn add_holder(&self, pid: libc::pid_t) -> Result<(), IdRangeError> {
        let _lock = locked(&self.dir)?;
        let path = record_path(&self.dir, self.start);
        let mut r = read_record(&path).ok_or_else(|| IdRangeError::NotHeld {
            start: self.start,
            holder: format!("pid {}", std::process::id()),
        })?;
        r.processes.extend(ProcessRef::of(pid));
        write_record(&self.dir, &r)
    }

    /// The sandbox's pid 1 (added by [`Allocation::add_holder`]) holds
    /// the range alone from now on: dropping this removes nothing, and the
    /// range is reclaimed once the sandbox is gone.
    pub(crate) fn leave_to_sandbox(&mut self) {
        self.owned = false;
    }

    /// The session at `session` (its directory) holds the range from now
    /// on, until [`release_session`]; dropping this removes nothing.
    pub(crate) fn keep_for_session(mut self, session: &Path) -> Result<u32, IdRangeError> {
        let _lock = locked(&self.dir)?;
        let path = record_path(&self.dir, self.start);
        let mut r = read_record(&path).ok_or_else(|| IdRangeError::NotHeld {
            start: self.start,
            holder: session.display().to_string(),
        })?;
        r.sessions = vec![session.to_path_buf()];
        write_record(&self.dir, &r)?;
        self.owned = false;
        Ok(self.start)
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // Under the lock, so an allocation never reads a half-gone state.
        if let Ok(_lock) = locked(&self.dir) {
            let _ = std::fs::remove_file(record_path(&self.dir, self.start));
        }
    }
}

/// A range for a new session of an image, held by its directory
/// `session` until [`release_session`] (None: the caller is not root, or
/// root's /etc/subuid and /etc/subgid ranges win).
pub(crate) fn for_session(session: &Path) -> Result<Option<u32>, IdRangeError> {
    let etc = Path::new("/etc");
    if sys::geteuid() != 0
        || (subid::range_for(&etc.join("subuid"), Some("root"), 0).is_some()
            && subid::range_for(&etc.join("subgid"), Some("root"), 0).is_some())
    {
        return Ok(None);
    }
    Allocation::allocate()?.keep_for_session(session).map(Some)
}

/// A fork of the session at `holder`, at `child`, holds its range too:
/// the layers they share keep their owners, and the range stays taken
/// until the last of them is closed.
pub(crate) fn share_with_session(
    start: u32,
    holder: &Path,
    child: &Path,
) -> Result<(), IdRangeError> {
    share_with_session_in(Path::new(RANGES_DIR), start, holder, child)
}

fn share_with_session_in(
    dir: &Path,
    start: u32,
    holder: &Path,
    child: &Path,
) -> Result<(), IdRangeError> {
    let _lock = locked(dir)?;
    let path = record_path(dir, start);
    let mut r = read_record(&path)
        .filter(|r| r.sessions.iter().any(|s| s == holder))
        .ok_or_else(|| IdRangeError::NotHeld {
            start,
            holder: holder.display().to_string(),
        })?;
    if !r.sessions.iter().any(|s| s == child) {
        r.sessions.push(child.to_path_buf());
    }
    write_record(dir, &r)
}

/// A session is gone: it no longer holds its range, which is free once
/// no other session (a fork) holds it (nothing when it had none).
pub(crate) fn release_session(start: u32, session: &Path) -> Result<(), IdRangeError> {
    release_session_in(Path::new(RANGES_DIR), start, session)
}

fn release_session_in(dir: &Path, start: u32, session: &Path) -> Result<(), IdRangeError> {
    let _lock = locked(dir)?;
    let path = record_path(dir, start);
    let Some(mut r) = read_record(&path).filter(|r| r.sessions.iter().any(|s| s == session))
    else {
        return Ok(());
    };
    r.sessions.retain(|s| s != session);
    if r.sessions.is_empty() {
        std::fs::remove_file(&path).map_err(io("remove", &path))?;
    } else {
        write_record(dir, &r)?;
    }
    Ok(())
}

/// For `hutch check`: how many ranges are held now, and the first free
/// one (None: the region is full). Allocates nothing.
pub(crate) fn survey() -> Result<(usize, Option<u32>), IdRangeError> {
    let dir = Path::new(RANGES_DIR);
    let mut taken = if dir.exists() {
        let _lock = locked(dir)?;
        live_ranges(dir)?
    } else {
        Vec::new()
    };
    let held = taken.len();
    let (ranges, ids) = host_ids(Path::new("/etc"));
    taken.extend(ranges);
    Ok((held, pick(0, &taken, &ids)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hutch-range-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("etc")).unwrap();
        d
    }

    #[test]
    fn ranges_avoid_host_ids_and_each_other() {
        let d = scratch("avoid");
        let etc = d.join("etc");
        std::fs::write(etc.join("subuid"), format!("alice:{REGION_START}:65536\n")).unwrap();
        std::fs::write(etc.join("subgid"), "").unwrap();
        // A user inside the second candidate.
        std::fs::write(
            etc.join("passwd"),
            format!("odd:x:{}:0::/:/bin/sh\n", REGION_START + RANGE_SIZE + 7),
        )
        .unwrap();
        std::fs::write(etc.join("group"), "").unwrap();
        let ids = host_ids(&etc);
        let mut taken = ids.0.clone();
        assert_eq!(
            pick(0, &taken, &ids.1),
            Some(REGION_START + 2 * RANGE_SIZE)
        );
        taken.push((REGION_START + 2 * RANGE_SIZE, RANGE_SIZE));
        assert_eq!(
            pick(0, &taken, &ids.1),
            Some(REGION_START + 3 * RANGE_SIZE)
        );
        // Wraps around from the last candidate.
        assert_eq!(
            pick(CANDIDATES - 1, &taken, &ids.1),
            Some(REGION_START + (CANDIDATES - 1) * RANGE_SIZE)
        );
        let all: Vec<(u32, u32)> = vec![(REGION_START, REGION_END - REGION_START)];
        assert_eq!(pick(5, &all, &ids.1), None);

        let runs = d.join("ranges");
        let a = Allocation::allocate_in(&runs, &etc).unwrap();
        let b = Allocation::allocate_in(&runs, &etc).unwrap();
        assert_ne!(a.start(), b.start());
        assert!(!overlaps((a.start(), RANGE_SIZE), (b.start(), RANGE_SIZE)));
        assert!(record_path(&runs, a.start()).exists());
        let a_start = a.start();
        drop(a);
        assert!(!record_path(&runs, a_start).exists());
        drop(b);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_dead_holders_range_is_reclaimed_and_a_sessions_kept() {
        let d = scratch("reclaim");
        let runs = d.join("ranges");
        std::fs::create_dir_all(&runs).unwrap();
        // A holder that has exited: its pid with a start time it never had.
        let gone = ProcessRef {
            pid: std::process::id() as i32,
            start_time: u64::MAX,
        };
        let dead = Record {
            start: REGION_START,
            count: RANGE_SIZE,
            processes: vec![gone],
            sessions: Vec::new(),
        };
        write_record(&runs, &dead).unwrap();
        let session = d.join("session");
        std::fs::create_dir(&session).unwrap();
        let kept = Record {
            start: REGION_START + RANGE_SIZE,
            count: RANGE_SIZE,
            processes: vec![gone],
            sessions: vec![session.clone()],
        };
        write_record(&runs, &kept).unwrap();
        let live = live_ranges(&runs).unwrap();
        assert_eq!(live, vec![(REGION_START + RANGE_SIZE, RANGE_SIZE)]);
        assert!(!record_path(&runs, REGION_START).exists());

        let again = Allocation::resume_in(&runs, REGION_START + RANGE_SIZE, &session).unwrap();
        drop(again);
        // A command's end leaves the session's hold.
        assert!(record_path(&runs, REGION_START + RANGE_SIZE).exists());
        release_session_in(&runs, REGION_START + RANGE_SIZE, &session).unwrap();
        assert!(!record_path(&runs, REGION_START + RANGE_SIZE).exists());
        // After a reboot (/run emptied) a session takes its free range again.
        drop(Allocation::resume_in(&runs, REGION_START + RANGE_SIZE, &session).unwrap());
        let r = read_record(&record_path(&runs, REGION_START + RANGE_SIZE)).unwrap();
        assert_eq!(r.sessions, vec![session.clone()]);
        // Not a range someone else holds now.
        let other = d.join("other");
        std::fs::create_dir(&other).unwrap();
        assert!(matches!(
            Allocation::resume_in(&runs, REGION_START + RANGE_SIZE, &other),
            Err(IdRangeError::NotHeld { .. })
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_forks_hold_keeps_the_range_until_the_last_session_is_closed() {
        let d = scratch("fork");
        let runs = d.join("ranges");
        std::fs::create_dir_all(&runs).unwrap();
        let (parent, child, other) = (d.join("parent"), d.join("child"), d.join("other"));
        for s in [&parent, &child, &other] {
            std::fs::create_dir(s).unwrap();
        }
        let start = Allocation::allocate_in(&runs, &d)
            .unwrap()
            .keep_for_session(&parent)
            .unwrap();
        // Only a holder can share it.
        assert!(matches!(
            share_with_session_in(&runs, start, &other, &child),
            Err(IdRangeError::NotHeld { .. })
        ));
        share_with_session_in(&runs, start, &parent, &child).unwrap();
        drop(Allocation::resume_in(&runs, start, &child).unwrap());
        // The parent closes first: the child still holds the range.
        release_session_in(&runs, start, &parent).unwrap();
        assert_eq!(live_ranges(&runs).unwrap(), vec![(start, RANGE_SIZE)]);
        assert!(matches!(
            Allocation::resume_in(&runs, start, &parent),
            Err(IdRangeError::NotHeld { .. })
        ));
        drop(Allocation::resume_in(&runs, start, &child).unwrap());
        release_session_in(&runs, start, &child).unwrap();
        assert!(!record_path(&runs, start).exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
