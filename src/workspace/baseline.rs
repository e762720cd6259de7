//! Building a sealed baseline: files, directories and symlinks written
//! through directory fds into `baseline/tree`, hashed on the way in. Sources: a host directory (walked through fds, links
//! copied as links, never followed) or a git commit (see `git.rs`).

use std::ffi::{CStr, CString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::sys::{self, EntryKind};
use crate::util::quote::display_name;

use super::error::{Result, WorkspaceError};
use super::layers::lstat_opt;
use super::manifest::{MODE_LINK, Manifest, ManifestEntry, git_file_mode};
use super::relpath::join;

/// Caps of a baseline import (`session create --max-files ...`). Exceeding
/// one fails the import whole: nothing of it is left in the state
/// directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportLimits {
    /// Entries: files, symlinks and directories.
    pub max_files: u64,
    /// Bytes of all file contents and symlink targets.
    pub max_bytes: u64,
    /// Bytes of the largest file.
    pub max_file_bytes: u64,
    /// Components of the deepest path.
    pub max_depth: usize,
    /// Bytes of the longest path (relative to the tree, `/`-separated).
    pub max_path_bytes: usize,
}

/// Default of [`ImportLimits::max_files`]: a quarter of a million entries
/// admits the Linux kernel (~95 000 files and directories), LLVM and
/// nearly every repository (most hold fewer than 50 000), while a tree
/// bomb costs the host at most this many inodes. Monorepos beyond it
/// (chromium's ~450 000 files) raise it with `--max-files`.
pub const DEFAULT_MAX_FILES: u64 = 250_000;
/// Default of [`ImportLimits::max_bytes`]: 4 GiB of contents, about three
/// times a Linux kernel checkout (~1.4 GB). A git import briefly stages
/// as much again (the blobs as git printed them), so the defaults bound
/// what an import writes to about 8 GiB and 250 000 inodes.
pub const DEFAULT_MAX_BYTES: u64 = 4 << 30;

impl Default for ImportLimits {
    /// [`DEFAULT_MAX_FILES`] entries, [`DEFAULT_MAX_BYTES`], 4 GiB per
    /// file, 512 levels, 4096-byte paths.
    fn default() -> Self {
        ImportLimits {
            max_files: DEFAULT_MAX_FILES,
            max_bytes: DEFAULT_MAX_BYTES,
            max_file_bytes: 4 << 30,
            max_depth: 512,
            max_path_bytes: 4096,
        }
    }
}

impl ImportLimits {
    /// Refuse a path deeper or longer than the caps (`path` is
    /// `/`-separated, `depth` its number of components).
    pub fn check_path(&self, path: &[u8], depth: usize) -> Result<()> {
        if depth > self.max_depth {
            return Err(WorkspaceError::Refused(
                format!(
                    "the baseline has a path deeper than {} levels ({}...)",
                    self.max_depth,
                    display_name(&path[..path.len().min(64)])
                ),
                "--max-depth N",
            ));
        }
        if path.len() > self.max_path_bytes {
            return Err(WorkspaceError::Refused(
                format!(
                    "the baseline has a path longer than {} bytes ({}...)",
                    self.max_path_bytes,
                    display_name(&path[..64.min(path.len())])
                ),
                "--max-path-bytes N",
            ));
        }
        Ok(())
    }

    fn too_many(&self) -> WorkspaceError {
        WorkspaceError::Refused(
            format!(
                "the baseline has more than {} entries (files, links and directories)",
                self.max_files
            ),
            "--max-files N",
        )
    }

    fn too_big(&self, path: &[u8]) -> WorkspaceError {
        WorkspaceError::Refused(
            format!(
                "{} is larger than {} bytes",
                display_name(path),
                self.max_file_bytes
            ),
            "--max-file-bytes N",
        )
    }

    fn too_much(&self) -> WorkspaceError {
        WorkspaceError::Refused(
            format!("the baseline is larger than {} bytes", self.max_bytes),
            "--max-bytes N",
        )
    }
}

/// Files at most this large are read whole with one call (most of a
/// source tree); larger ones are copied in chunks (or cloned).
const SMALL_FILE: u64 = 1 << 20;
/// Contents at most this large may be handed to the writers as bytes
/// (queued jobs stay bounded in memory: [`QUEUE`] × this).
pub(crate) const QUEUED_BYTES_MAX: u64 = 64 << 10;
/// Jobs handed to a writer thread at once (one wake-up per batch): the
/// files of one directory, so two writers never create files in the same
/// directory at once (they would contend for its lock).
const BATCH: usize = 128;
/// Batches waiting for a writer thread (bounded: memory and fds).
const QUEUE: usize = 2;
/// Writer threads at most (hashing and copying are parallel; the walk is
/// not).
const MAX_WRITERS: usize = 4;

/// What the writer threads share: the byte budget, the first failure.
struct Shared {
    limits: ImportLimits,
    bytes: AtomicU64,
    failed: AtomicBool,
    error: Mutex<Option<WorkspaceError>>,
    /// The process's umask: a created file needs an fchmod only when it
    /// would strip bits of the mode asked for.
    umask: u32,
    /// Whether FICLONE may work here (cleared at its first refusal).
    reflink: AtomicBool,
}

impl Shared {
    fn count_bytes(&self, n: u64) -> Result<()> {
        let total = self.bytes.fetch_add(n, Ordering::Relaxed).saturating_add(n);
        if total > self.limits.max_bytes {
            return Err(self.limits.too_much());
        }
        Ok(())
    }

    fn fail(&self, e: WorkspaceError) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert(e);
        self.failed.store(true, Ordering::Relaxed);
    }
}

/// Where a queued file's content comes from.
pub(crate) enum Content {
    /// Read already (a git blob).
    Bytes(Vec<u8>),
    /// The regular file `name` in the host directory `dir`, which must
    /// still be inode `ino` when opened.
    Host {
        dir: Arc<OwnedFd>,
        name: CString,
        ino: u64,
    },
}

/// One file for a writer thread.
struct Job {
    dir: Arc<OwnedFd>,
    name: CString,
    /// Its path in the tree (for the manifest and messages).
    path: Vec<u8>,
    /// Executable (`None`: as the host file is).
    exec: Option<bool>,
    content: Content,
}

/// The writer threads.
struct Pool {
    tx: Option<SyncSender<Vec<Job>>>,
    /// Jobs not sent yet.
    batch: Vec<Job>,
    workers: Vec<std::thread::JoinHandle<Vec<ManifestEntry>>>,
}

/// Writes a baseline tree and collects its manifest, within
/// [`ImportLimits`]. Files may be written by a few threads (hashing and
/// copying in parallel), started on the first queued file and joined by
/// [`BaselineWriter::finish`].
pub struct BaselineWriter {
    /// The directory chain currently open, from the tree's root.
    chain: sys::DirChain,
    /// The names of the chain's levels below the root.
    names: Vec<CString>,
    /// The chain's current directory, shared with queued jobs.
    current: Option<Arc<OwnedFd>>,
    limits: ImportLimits,
    entries: u64,
    shared: Arc<Shared>,
    pool: Option<Pool>,
    pub manifest: Manifest,
}

impl BaselineWriter {
    /// Start writing into the empty directory `root` with the default caps.
    #[cfg(feature = "internals")]
    pub fn new(root: OwnedFd) -> Result<BaselineWriter> {
        Self::with_limits(root, ImportLimits::default())
    }

    /// Start writing into the empty directory `root`.
    pub fn with_limits(root: OwnedFd, limits: ImportLimits) -> Result<BaselineWriter> {
        Ok(BaselineWriter {
            chain: sys::DirChain::new(root)?,
            names: Vec::new(),
            current: None,
            limits,
            entries: 0,
            shared: Arc::new(Shared {
                limits,
                bytes: AtomicU64::new(0),
                failed: AtomicBool::new(false),
                error: Mutex::new(None),
                umask: sys::current_umask(),
                reflink: AtomicBool::new(true),
            }),
            pool: None,
            manifest: Manifest::default(),
        })
    }

    /// The caps this writer enforces.
    pub fn limits(&self) -> &ImportLimits {
        &self.limits
    }

    fn count_entry(&mut self) -> Result<()> {
        self.entries += 1;
        if self.entries > self.limits.max_files {
            return Err(self.limits.too_many());
        }
        Ok(())
    }

    fn count_bytes(&mut self, n: u64) -> Result<()> {
        self.shared.count_bytes(n)
    }

    /// Make `parents` the open directory chain, creating what is missing
    /// (directories 0755: plain git-like modes, so the workload can change
    /// them through the overlay's copy-up).
    fn enter(&mut self, parents: &[CString]) -> Result<()> {
        let common = self
            .names
            .iter()
            .zip(parents)
            .take_while(|(a, b)| a == b)
            .count();
        if common == self.names.len() && common == parents.len() {
            return Ok(());
        }
        self.current = None;
        while self.names.len() > common {
            self.chain.pop()?;
            self.names.pop();
        }
        for c in &parents[common..] {
            match lstat_opt(self.chain.current(), c)? {
                None => {
                    self.count_entry()?;
                    let cur = self.chain.current();
                    sys::mkdirat(cur, c, 0o755)?;
                    let fd = sys::open_dir_beneath(cur, c)?;
                    if self.shared.umask & 0o755 != 0 {
                        sys::fchmod(fd.as_fd(), 0o755)?;
                    }
                    self.chain.push_fd(fd)?;
                }
                Some(m) if m.is_dir() => self.chain.push(c)?,
                Some(_) => {
                    return Err(WorkspaceError::Unsupported {
                        path: display_name(&join(parents)),
                        reason: "is both a file and a directory in the source".into(),
                    });
                }
            }
            self.names.push(c.clone());
        }
        Ok(())
    }

    /// Check the path caps, count the entry and enter its parents.
    fn start_entry<'p>(&mut self, path: &'p [CString]) -> Result<(&'p CStr, Vec<u8>)> {
        let (name, parents) = split(path)?;
        let shown = join(path);
        self.limits.check_path(&shown, path.len())?;
        self.enter(parents)?;
        self.count_entry()?;
        Ok((name, shown))
    }

    /// An (empty) directory.
    pub fn add_dir(&mut self, path: &[CString]) -> Result<()> {
        self.limits.check_path(&join(path), path.len())?;
        self.enter(path)
    }

    /// A regular file with the content read from `src`, executable or not.
    pub fn add_file(&mut self, path: &[CString], exec: bool, src: &mut dyn Read) -> Result<()> {
        self.check_failed()?;
        let (name, shown) = self.start_entry(path)?;
        let fd = sys::open_beneath(
            self.chain.current(),
            name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o600,
        )?;
        let mut file = std::fs::File::from(fd);
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut size = 0u64;
        loop {
            let n = src
                .read(&mut buf)
                .map_err(|e| WorkspaceError::io(format!("read {}", display_name(&shown)), e))?;
            if n == 0 {
                break;
            }
            size += n as u64;
            if size > self.limits.max_file_bytes {
                return Err(self.limits.too_big(&shown));
            }
            self.count_bytes(n as u64)?;
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n])
                .map_err(|e| WorkspaceError::io(format!("write {}", display_name(&shown)), e))?;
        }
        let mode = if exec { 0o755 } else { 0o644 };
        sys::fchmod(file.as_fd(), mode)?;
        self.manifest.entries.push(ManifestEntry {
            path: shown,
            mode: git_file_mode(mode),
            size,
            sha256: hasher.finalize().into(),
        });
        Ok(())
    }

    /// A regular file written by a writer thread (in order of nothing:
    /// the manifest is sorted at the end). Its content is bytes read
    /// already, or a host file opened by the thread.
    pub(crate) fn queue_file(
        &mut self,
        path: &[CString],
        exec: Option<bool>,
        content: Content,
    ) -> Result<()> {
        self.check_failed()?;
        let (name, shown) = self.start_entry(path)?;
        let dir = match &self.current {
            Some(d) => d.clone(),
            None => {
                let d = Arc::new(
                    self.chain
                        .current()
                        .try_clone_to_owned()
                        .map_err(|e| WorkspaceError::io("dup a directory fd", e))?,
                );
                self.current = Some(d.clone());
                d
            }
        };
        let job = Job {
            dir,
            name: name.to_owned(),
            path: shown,
            exec,
            content,
        };
        let pool = match &mut self.pool {
            Some(p) => p,
            None => {
                let threads = std::thread::available_parallelism()
                    .map_or(1, |n| n.get())
                    .min(MAX_WRITERS);
                if threads <= 1 {
                    // One CPU: no thread, the job is done here.
                    let entry = write_job(&self.shared, job)?;
                    self.manifest.entries.push(entry);
                    return Ok(());
                }
                self.pool.insert(Pool::start(&self.shared, threads)?)
            }
        };
        // A batch holds one directory's files.
        let other_dir = pool
            .batch
            .last()
            .is_some_and(|j| !Arc::ptr_eq(&j.dir, &job.dir));
        if other_dir || pool.batch.len() >= BATCH {
            let batch = std::mem::replace(&mut pool.batch, Vec::with_capacity(BATCH));
            let tx = pool.tx.as_ref().expect("open until finish");
            if tx.send(batch).is_err() {
                // Every writer stopped: one failed.
                return Err(self.take_error());
            }
        }
        pool.batch.push(job);
        Ok(())
    }

    fn check_failed(&self) -> Result<()> {
        if self.shared.failed.load(Ordering::Relaxed) {
            return Err(self.take_error());
        }
        Ok(())
    }

    fn take_error(&self) -> WorkspaceError {
        self.shared
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or(WorkspaceError::WriterFailed)
    }

    /// A symlink with `target` (stored, never resolved).
    pub fn add_symlink(&mut self, path: &[CString], target: &[u8]) -> Result<()> {
        self.check_failed()?;
        let (name, shown) = self.start_entry(path)?;
        self.count_bytes(target.len() as u64)?;
        let t = CString::new(target).map_err(|_| WorkspaceError::Unsupported {
            path: display_name(&shown),
            reason: "symlink target contains NUL".into(),
        })?;
        sys::symlinkat(&t, self.chain.current(), name)?;
        self.manifest.entries.push(ManifestEntry {
            path: shown,
            mode: MODE_LINK,
            size: target.len() as u64,
            sha256: Sha256::digest(target).into(),
        });
        Ok(())
    }

    /// Finish the tree and return the manifest. The tree is sealed by
    /// never being written again: it is only ever an overlay lower, and
    /// the manifest's digest fingerprints it.
    pub fn finish(mut self) -> Result<Manifest> {
        if let Some(mut pool) = self.pool.take() {
            let batch = std::mem::take(&mut pool.batch);
            if let Some(tx) = pool.tx.take()
                && !batch.is_empty()
            {
                let _ = tx.send(batch);
            }
            for w in pool.workers.drain(..) {
                match w.join() {
                    Ok(entries) => self.manifest.entries.extend(entries),
                    Err(_) => self.shared.fail(WorkspaceError::WriterPanicked),
                }
            }
        }
        self.check_failed()?;
        self.current = None;
        while !self.names.is_empty() {
            self.chain.pop()?;
            self.names.pop();
        }
        sys::fchmod(self.chain.current(), 0o755)?;
        Ok(std::mem::take(&mut self.manifest))
    }
}

impl Drop for BaselineWriter {
    /// An import that failed midway: stop and join the writers.
    fn drop(&mut self) {
        if let Some(mut pool) = self.pool.take() {
            self.shared.failed.store(true, Ordering::Relaxed);
            drop(pool.tx.take());
            for w in pool.workers.drain(..) {
                let _ = w.join();
            }
        }
    }
}

impl Pool {
    fn start(shared: &Arc<Shared>, threads: usize) -> Result<Pool> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Job>>(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads {
            let (rx, shared) = (rx.clone(), shared.clone());
            let w = std::thread::Builder::new()
                .name(format!("hutch-baseline-{i}"))
                .spawn(move || {
                    let mut out = Vec::new();
                    loop {
                        let batch = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
                            Ok(b) => b,
                            Err(_) => break,
                        };
                        for job in batch {
                            if shared.failed.load(Ordering::Relaxed) {
                                // Drain without work; the import fails whole.
                                continue;
                            }
                            match write_job(&shared, job) {
                                Ok(e) => out.push(e),
                                Err(e) => shared.fail(e),
                            }
                        }
                    }
                    out
                })
                .map_err(|e| WorkspaceError::io("start a baseline writer thread", e))?;
            workers.push(w);
        }
        Ok(Pool {
            tx: Some(tx),
            batch: Vec::with_capacity(BATCH),
            workers,
        })
    }
}

/// Write one queued file: read (or take) its content, hash it, create it.
fn write_job(shared: &Shared, job: Job) -> Result<ManifestEntry> {
    let shown = || display_name(&job.path);
    let limits = &shared.limits;
    let create = |mode: u32| -> Result<std::fs::File> {
        let fd = sys::open_beneath(
            job.dir.as_fd(),
            &job.name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            mode,
        )?;
        if shared.umask & mode != 0 {
            sys::fchmod(fd.as_fd(), mode)?;
        }
        Ok(std::fs::File::from(fd))
    };
    let entry = |mode: u32, size: u64, sha256: [u8; 32]| ManifestEntry {
        path: job.path.clone(),
        mode: git_file_mode(mode),
        size,
        sha256,
    };
    match &job.content {
        Content::Bytes(data) => {
            let size = data.len() as u64;
            if size > limits.max_file_bytes {
                return Err(limits.too_big(&job.path));
            }
            shared.count_bytes(size)?;
            let mode = if job.exec == Some(true) { 0o755 } else { 0o644 };
            let mut f = create(mode)?;
            f.write_all(data)
                .map_err(|e| WorkspaceError::io(format!("write {}", shown()), e))?;
            Ok(entry(mode, size, Sha256::digest(data).into()))
        }
        Content::Host { dir, name, ino } => {
            let fd = sys::open_beneath(
                dir.as_fd(),
                name,
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
                0,
            )?;
            let m = sys::fstat(fd.as_fd())?;
            if m.ino != *ino || !m.is_file() {
                return Err(WorkspaceError::Unsupported {
                    path: shown(),
                    reason: "changed while being copied".into(),
                });
            }
            if m.size > limits.max_file_bytes {
                return Err(limits.too_big(&job.path));
            }
            shared.count_bytes(m.size)?;
            let exec = job.exec.unwrap_or(m.mode & 0o100 != 0);
            let mode = if exec { 0o755 } else { 0o644 };
            let mut src = std::fs::File::from(fd);
            let mut out = create(mode)?;
            let (size, sha256) = if m.size <= SMALL_FILE {
                // One read of the size fstat gave (and one more only if
                // it came short).
                let mut data = vec![0u8; m.size as usize];
                let mut got = 0;
                while got < data.len() {
                    let n = src
                        .read(&mut data[got..])
                        .map_err(|e| WorkspaceError::io(format!("read {}", shown()), e))?;
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
                data.truncate(got);
                out.write_all(&data)
                    .map_err(|e| WorkspaceError::io(format!("write {}", shown()), e))?;
                (got as u64, Sha256::digest(&data).into())
            } else {
                copy_large(shared, &mut src, &mut out, &job.path)?
            };
            if size != m.size {
                return Err(WorkspaceError::Unsupported {
                    path: shown(),
                    reason: "changed while being copied".into(),
                });
            }
            Ok(entry(mode, size, sha256))
        }
    }
}

/// A large file: cloned where the filesystem shares extents (then hashed
/// from the copy), else copied in chunks, hashed on the way.
fn copy_large(
    shared: &Shared,
    src: &mut std::fs::File,
    out: &mut std::fs::File,
    path: &[u8],
) -> Result<(u64, [u8; 32])> {
    let io = |what: &str, e| WorkspaceError::io(format!("{what} {}", display_name(path)), e);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    if shared.reflink.load(Ordering::Relaxed) {
        match sys::ficlone(out.as_fd(), src.as_fd()) {
            Ok(()) => {
                loop {
                    let n = out.read_at_all(&mut buf, size).map_err(|e| io("read", e))?;
                    if n == 0 {
                        break;
                    }
                    hasher.update(&buf[..n]);
                    size += n as u64;
                }
                return Ok((size, hasher.finalize().into()));
            }
            Err(_) => shared.reflink.store(false, Ordering::Relaxed),
        }
    }
    loop {
        let n = src.read(&mut buf).map_err(|e| io("read", e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(|e| io("write", e))?;
        size += n as u64;
    }
    Ok((size, hasher.finalize().into()))
}

/// Positioned reads (`pread`) into a buffer.
trait ReadAt {
    fn read_at_all(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize>;
}

impl ReadAt for std::fs::File {
    fn read_at_all(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }
}

fn split(path: &[CString]) -> Result<(&CStr, &[CString])> {
    match path.split_last() {
        Some((name, parents)) => Ok((name.as_c_str(), parents)),
        None => Err(WorkspaceError::BadPath {
            path: "\"\"".into(),
            reason: "empty path".into(),
        }),
    }
}

/// Copy the host directory `src` into the writer: regular files,
/// directories and symlinks (as links). A top-level `.git` is skipped (the
/// workspace carries no repository metadata); FIFOs, sockets and devices
/// are refused (never opened). The walk is iterative with a bounded number
/// of open fds, whatever the depth; the writer's caps bound the rest.
/// Entry types come from the directory listing (`d_type`), so most
/// entries need no lstat; files are opened, hashed and copied by the
/// writer's threads, each checked to be the inode the listing named.
pub fn import_dir(src: &Path, writer: &mut BaselineWriter) -> Result<()> {
    let root = sys::open_dir_path(src)?;
    let mut chain = sys::DirChain::new(root)?;
    let mut path: Vec<CString> = Vec::new();
    let mut top = sys::list_dir_typed(chain.current())?;
    top.retain(|(n, _, _)| n.as_bytes() != b".git");
    // Names left per level (reverse-sorted: `pop` gives the next), with
    // the level's directory shared with queued jobs once one needs it.
    let mut pending: Vec<(Vec<Listed>, Option<Arc<OwnedFd>>)> = vec![(sorted_rev(top), None)];
    while let Some((names, shared_dir)) = pending.last_mut() {
        let Some((name, kind, ino)) = names.pop() else {
            pending.pop();
            if !pending.is_empty() {
                chain.pop()?;
                path.pop();
            }
            continue;
        };
        let dir = chain.current();
        let kind = match kind {
            EntryKind::Unknown => match lstat_opt(dir, &name)? {
                None => continue,
                Some(m) if m.is_dir() => EntryKind::Dir,
                Some(m) if m.is_file() => EntryKind::File,
                Some(m) if m.is_symlink() => EntryKind::Symlink,
                Some(_) => EntryKind::Other,
            },
            k => k,
        };
        path.push(name.clone());
        let shown = || {
            let mut p = src.as_os_str().as_bytes().to_vec();
            p.push(b'/');
            p.extend_from_slice(&join(&path));
            display_name(&p)
        };
        match kind {
            EntryKind::Dir => {
                writer.add_dir(&path)?;
                chain.push(&name)?;
                let names = sorted_rev(sys::list_dir_typed(chain.current())?);
                pending.push((names, None));
                continue;
            }
            EntryKind::File => {
                let d = match shared_dir {
                    Some(d) => d.clone(),
                    None => {
                        let d = Arc::new(
                            dir.try_clone_to_owned()
                                .map_err(|e| WorkspaceError::io("dup a directory fd", e))?,
                        );
                        *shared_dir = Some(d.clone());
                        d
                    }
                };
                writer.queue_file(&path, None, Content::Host { dir: d, name, ino })?;
            }
            EntryKind::Symlink => {
                let target = sys::readlink_at(dir, &name)?;
                writer.add_symlink(&path, &target)?;
            }
            EntryKind::Other | EntryKind::Unknown => {
                return Err(WorkspaceError::Unsupported {
                    path: shown(),
                    reason: "FIFOs, sockets and device nodes cannot be part of a baseline".into(),
                });
            }
        }
        path.pop();
    }
    Ok(())
}

/// A directory entry as listed: name, `d_type`, `d_ino`.
type Listed = (CString, EntryKind, u64);

fn sorted_rev(mut names: Vec<Listed>) -> Vec<Listed> {
    names.sort_unstable_by(|a, b| b.0.cmp(&a.0));
    names
}

/// Split a slash-separated path from an untrusted listing into components,
/// refusing empty, `.` and `..` components.
pub fn split_components(path: &[u8]) -> Result<Vec<CString>> {
    let mut out = Vec::new();
    for part in path.split(|&b| b == b'/') {
        if part.is_empty() || part == b"." || part == b".." || part.contains(&0) {
            return Err(WorkspaceError::BadPath {
                path: display_name(path),
                reason: "has an empty, `.` or `..` component".into(),
            });
        }
        out.push(CString::new(part).map_err(|_| WorkspaceError::BadPath {
            path: display_name(path),
            reason: "contains NUL".into(),
        })?);
    }
    Ok(out)
}
