//! The builder's order, checked through a recording [`FsSys`] (also the
//! base of the launcher's whole-child recorder, `src/launch/tests.rs`).

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;

use super::*;
use crate::sys::{Errno, SysError};

/// Records every call; fds it hands out are real (copies of /dev/null), so
/// the builder owns and closes them as it would real ones.
pub(crate) struct Recorder {
    pub calls: Vec<String>,
    pub missing: Vec<&'static str>,
    /// fds that are not directories (everything else is one).
    pub files: Vec<RawFd>,
    null: std::fs::File,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            calls: Vec::new(),
            missing: Vec::new(),
            files: Vec::new(),
            null: std::fs::File::open("/dev/null").unwrap(),
        }
    }
}

impl Recorder {
    /// A fresh real fd.
    pub fn fd(&self) -> OwnedFd {
        OwnedFd::from(self.null.try_clone().unwrap())
    }
}

fn s(c: &CStr) -> String {
    c.to_string_lossy().into_owned()
}

fn n(fd: BorrowedFd<'_>) -> RawFd {
    fd.as_raw_fd()
}

impl FsSys for Recorder {
    fn mount(
        &mut self,
        src: Option<&CStr>,
        target: &CStr,
        fstype: Option<&CStr>,
        flags: libc::c_ulong,
        data: Option<&CStr>,
    ) -> Result<(), SysError> {
        self.calls.push(format!(
            "mount {} {} {} {flags:#x} {}",
            src.map(s).unwrap_or_default(),
            s(target),
            fstype.map(s).unwrap_or_default(),
            data.map(s).unwrap_or_default()
        ));
        Ok(())
    }
    fn open(
        &mut self,
        dir: Option<BorrowedFd<'_>>,
        path: &CStr,
        _flags: libc::c_int,
        _mode: u32,
        _resolve: u64,
    ) -> Result<OwnedFd, SysError> {
        if self.missing.iter().any(|m| m.as_bytes() == path.to_bytes()) {
            return Err(SysError::new(
                format!("openat2({:?})", s(path)),
                Errno::ENOENT,
            ));
        }
        let fd = self.fd();
        self.calls.push(format!(
            "open {} {} = {}",
            dir.map_or(-100, n),
            s(path),
            fd.as_raw_fd()
        ));
        Ok(fd)
    }
    fn mkdirat(&mut self, dir: BorrowedFd<'_>, name: &CStr, _mode: u32) -> Result<(), SysError> {
        self.calls.push(format!("mkdir {} {}", n(dir), s(name)));
        Ok(())
    }
    fn symlinkat(
        &mut self,
        target: &CStr,
        dir: BorrowedFd<'_>,
        name: &CStr,
    ) -> Result<(), SysError> {
        self.calls
            .push(format!("symlink {} {} {}", s(target), n(dir), s(name)));
        Ok(())
    }
    fn mount_setattr(
        &mut self,
        fd: BorrowedFd<'_>,
        recursive: bool,
        set: u64,
    ) -> Result<(), SysError> {
        self.calls
            .push(format!("setattr {} {recursive} {set:#x}", n(fd)));
        Ok(())
    }
    fn move_mount(&mut self, from: BorrowedFd<'_>, to: &CStr) -> Result<(), SysError> {
        self.calls.push(format!("move_mount {} {}", n(from), s(to)));
        Ok(())
    }
    fn clone_tree(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        recursive: bool,
    ) -> Result<OwnedFd, SysError> {
        let fd = self.fd();
        self.calls.push(format!(
            "clone_tree {} {} {recursive} = {}",
            n(dir),
            s(name),
            fd.as_raw_fd()
        ));
        Ok(fd)
    }
    fn move_mount_at(
        &mut self,
        from: BorrowedFd<'_>,
        dir: BorrowedFd<'_>,
        name: &CStr,
    ) -> Result<(), SysError> {
        self.calls
            .push(format!("move_mount_at {} {} {}", n(from), n(dir), s(name)));
        Ok(())
    }
    fn write_all(&mut self, fd: BorrowedFd<'_>, data: &[u8]) -> Result<(), SysError> {
        self.calls.push(format!("write {} {}", n(fd), data.len()));
        Ok(())
    }
    fn chmod(&mut self, path: &CStr, mode: u32) -> Result<(), SysError> {
        self.calls.push(format!("chmod {} {mode:o}", s(path)));
        Ok(())
    }
    fn is_dir(&mut self, fd: BorrowedFd<'_>) -> Result<bool, SysError> {
        Ok(!self.files.contains(&n(fd)))
    }
    fn readlinkat(&mut self, dir: BorrowedFd<'_>, name: &CStr) -> Result<Vec<u8>, SysError> {
        self.calls.push(format!("readlink {} {}", n(dir), s(name)));
        Err(SysError::new("readlinkat", Errno::EINVAL))
    }
    fn same_file(&mut self, a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> Result<bool, SysError> {
        self.calls.push(format!("same_file {} {}", n(a), n(b)));
        Ok(true)
    }
    fn fchdir(&mut self, fd: BorrowedFd<'_>) -> Result<(), SysError> {
        self.calls.push(format!("fchdir {}", n(fd)));
        Ok(())
    }
    fn pivot_root(&mut self, new_root: &CStr, put_old: &CStr) -> Result<(), SysError> {
        self.calls
            .push(format!("pivot_root {} {}", s(new_root), s(put_old)));
        Ok(())
    }
    fn umount2(&mut self, target: &CStr, flags: libc::c_int) -> Result<(), SysError> {
        self.calls.push(format!("umount2 {} {flags}", s(target)));
        Ok(())
    }
    fn chdir(&mut self, path: &CStr) -> Result<(), SysError> {
        self.calls.push(format!("chdir {}", s(path)));
        Ok(())
    }
    fn unix_listener(&mut self, dir: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, SysError> {
        let fd = self.fd();
        self.calls.push(format!(
            "unix_listener {} {} = {}",
            n(dir),
            s(name),
            fd.as_raw_fd()
        ));
        Ok(fd)
    }
    fn fs_context(
        &mut self,
        fstype: &CStr,
        options: &[(&CStr, Option<&CStr>)],
    ) -> Result<OwnedFd, SysError> {
        let fd = self.fd();
        let opts: Vec<String> = options
            .iter()
            .map(|(k, v)| match v {
                Some(v) => format!("{}={}", s(k), s(v)),
                None => s(k),
            })
            .collect();
        self.calls.push(format!(
            "fs_context {} {} = {}",
            s(fstype),
            opts.join(","),
            fd.as_raw_fd()
        ));
        Ok(fd)
    }
    fn fs_mount(&mut self, fs: BorrowedFd<'_>, attrs: u64) -> Result<OwnedFd, SysError> {
        let fd = self.fd();
        self.calls.push(format!(
            "fs_mount {} {attrs:#x} = {}",
            n(fs),
            fd.as_raw_fd()
        ));
        Ok(fd)
    }

    fn mknodat(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        mode: u32,
        rdev: u64,
    ) -> Result<(), SysError> {
        self.calls
            .push(format!("mknod {} {} {mode:#o} {rdev:#x}", n(dir), s(name)));
        Ok(())
    }
    fn lchown_at(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        uid: u32,
        gid: u32,
    ) -> Result<(), SysError> {
        self.calls
            .push(format!("chown {} {} {uid}:{gid}", n(dir), s(name)));
        Ok(())
    }
    fn stat(&mut self, fd: BorrowedFd<'_>) -> Result<crate::sys::Meta, SysError> {
        self.calls.push(format!("stat {}", n(fd)));
        crate::sys::fstat(fd)
    }
    fn dir_is_empty(&mut self, fd: BorrowedFd<'_>) -> Result<bool, SysError> {
        self.calls.push(format!("empty? {}", n(fd)));
        Ok(true)
    }
}

fn run(
    rec: &mut Recorder,
    p: &Plan,
    handed: Vec<(usize, OwnedFd)>,
    spec: &crate::spec::Spec,
) -> Result<Built, BuildError> {
    let sources = open_sources(rec, p)?;
    build(rec, p, sources, handed, &op_names(spec), None)
}

fn pos(calls: &[String], needle: &str) -> usize {
    calls
        .iter()
        .position(|c| c.contains(needle))
        .unwrap_or_else(|| panic!("no call containing {needle:?} in {calls:#?}"))
}

fn spec_with(ops: Vec<crate::spec::FsOp>) -> crate::spec::Spec {
    crate::spec::Spec {
        fs: ops,
        ..Default::default()
    }
}

#[test]
fn setup_order_is_fixed() {
    use crate::spec::FsOp;
    let spec = spec_with(vec![
        FsOp::RoBind {
            src: "/usr".into(),
            dest: "/usr".into(),
            optional: false,
        },
        FsOp::Proc {
            dest: "/proc".into(),
        },
        crate::spec::workspace_overlay(Path::new("/src/dir,with:odd\\chars"), None),
    ]);
    let p = plan(&spec, false);
    let mut rec = Recorder::default();
    let built = run(&mut rec, &p, Vec::new(), &spec).unwrap();
    let c = &rec.calls;
    let opened_usr = pos(c, "open -100 /usr =");
    let staging = pos(c, "mount tmpfs /tmp tmpfs");
    assert!(
        opened_usr < staging,
        "sources are opened before staging covers /tmp"
    );
    let bind = pos(c, "0x5000"); // MS_BIND|MS_REC
    let ro = pos(c, &format!("true {:#x}", plan::RO_BIND));
    assert!(
        staging < bind && bind < ro,
        "ro attributes follow the bind, recursively"
    );
    let proc = pos(c, "mount proc ");
    let overlay = pos(c, "mount overlay ");
    assert!(bind < proc && proc < overlay, "operations in spec order");
    let pivot = pos(c, "pivot_root . .");
    assert!(overlay < pivot);
    assert_eq!(
        c[pivot + 1],
        "umount2 . 2",
        "old root detached right after pivot"
    );
    assert!(c.last().unwrap().starts_with("chdir /"));
    assert_eq!(built.tmp_upper_fds.len(), 1);
    // The overlay's option string never holds a raw path.
    let data = &c[overlay];
    assert!(
        !data.contains("odd"),
        "raw path leaked into overlay options: {data}"
    );
    assert!(data.contains("lowerdir=/proc/self/fd/") && data.contains(",userxattr"));
}

#[test]
fn missing_source_fails_naming_the_path_and_optional_is_skipped() {
    use crate::spec::FsOp;
    let spec = spec_with(vec![FsOp::Bind {
        src: "/nonexistent/src".into(),
        dest: "/x".into(),
        optional: false,
    }]);
    let mut rec = Recorder {
        missing: vec!["/nonexistent/src"],
        ..Default::default()
    };
    let err = run(&mut rec, &plan(&spec, false), Vec::new(), &spec).unwrap_err();
    let line = err.to_string();
    assert!(
        line.contains("/nonexistent/src") && line.contains("ENOENT"),
        "{line}"
    );
    assert!(
        !rec.calls.iter().any(|c| c.contains("pivot_root")),
        "no half-built sandbox"
    );

    let spec = spec_with(vec![FsOp::Bind {
        src: "/nonexistent/src".into(),
        dest: "/x".into(),
        optional: true,
    }]);
    let mut rec = Recorder {
        missing: vec!["/nonexistent/src"],
        ..Default::default()
    };
    run(&mut rec, &plan(&spec, false), Vec::new(), &spec).unwrap();
    assert!(
        !rec.calls.iter().any(|c| c.contains("0x5000")),
        "optional missing bind is skipped"
    );
}

#[test]
fn idmapped_lowers_are_attached_outside_the_new_root() {
    let spec = spec_with(vec![crate::spec::workspace_overlay(Path::new("/w"), None)]);
    let p = plan(&spec, true);
    let mut rec = Recorder::default();
    let handed = rec.fd();
    let number = handed.as_raw_fd();
    run(&mut rec, &p, vec![(0, handed)], &spec).unwrap();
    let mv = pos(&rec.calls, &format!("move_mount {number} /tmp/s"));
    assert!(mv < pos(&rec.calls, "mount overlay "));
    assert!(
        !rec.calls.iter().any(|c| c.contains("open -100 /w ")),
        "idmapped lower is not reopened from the host path"
    );
}

/// A root launch's proxy door: the supervisor hands over a detached mount
/// of the socket (its directory is host root's only); the child attaches it
/// on a scratch file, never opens the host path itself, and binds from it.
#[test]
fn a_handed_over_file_mount_is_attached_on_a_file_and_bound() {
    let spec = spec_with(vec![crate::spec::FsOp::Bind {
        src: "/run/door/proxy.sock".into(),
        dest: "/run/hutch/proxy.sock".into(),
        optional: false,
    }]);
    let mut p = plan(&spec, true);
    p.sources[0].handed_over = true;
    let mut rec = Recorder::default();
    let handed = rec.fd();
    let h = handed.as_raw_fd();
    rec.files = vec![h];
    run(&mut rec, &p, vec![(0, handed)], &spec).unwrap();
    assert!(
        !rec.calls.iter().any(|c| c.contains("/run/door/proxy.sock")),
        "the host path is not opened by the child: {:?}",
        rec.calls
    );
    let scratch = rec
        .calls
        .iter()
        .find_map(|c| c.strip_prefix(&format!("move_mount {h} /tmp/")))
        .expect("attached under the staging directory")
        .to_string();
    let staging = rec
        .calls
        .iter()
        .find_map(|c| c.strip_prefix("open -100 /tmp = "))
        .expect("staging opened")
        .to_string();
    // An empty file is created to attach on (not a directory)...
    let created = pos(&rec.calls, &format!("open {staging} {scratch} ="));
    assert!(
        created < pos(&rec.calls, &format!("move_mount {h} ")),
        "{:?}",
        rec.calls
    );
    assert!(
        !rec.calls
            .iter()
            .any(|c| c == &format!("mkdir {staging} {scratch}")),
        "{:?}",
        rec.calls
    );
    // ...and the bind's source is the attached mount, reopened.
    let reopened = rec
        .calls
        .iter()
        .find_map(|c| c.strip_prefix(&format!("open -100 /tmp/{scratch} = ")))
        .expect("reopened")
        .to_string();
    pos(&rec.calls, &format!("mount /proc/self/fd/{reopened} "));
}

#[test]
fn dev_gets_only_the_minimal_nodes() {
    let spec = spec_with(vec![crate::spec::FsOp::Dev {
        dest: "/dev".into(),
        layout: Default::default(),
    }]);
    let mut rec = Recorder::default();
    run(&mut rec, &plan(&spec, false), Vec::new(), &spec).unwrap();
    let nodes: Vec<&String> = rec
        .calls
        .iter()
        .filter(|c| c.starts_with("open") && !c.contains(" -100 ") && c.contains(" null ="))
        .collect();
    assert!(!nodes.is_empty());
    assert!(
        rec.calls
            .iter()
            .any(|c| c.contains("mount devpts") && c.contains("newinstance"))
    );
    for forbidden in ["sda", "kmsg", "mem "] {
        assert!(
            !rec.calls.iter().any(|c| c.contains(forbidden)),
            "{forbidden} must not be exposed"
        );
    }
}

#[test]
fn proc_masks_and_dev_nodes_are_flagged_before_they_are_attached() {
    let spec = spec_with(vec![
        crate::spec::FsOp::Proc {
            dest: "/proc".into(),
        },
        crate::spec::FsOp::Dev {
            dest: "/dev".into(),
            layout: Default::default(),
        },
    ]);
    let mut rec = Recorder::default();
    run(&mut rec, &plan(&spec, false), Vec::new(), &spec).unwrap();
    let c = &rec.calls;
    // Every detached copy gets its flags before it is attached.
    let mut attached = 0;
    for (i, call) in c.iter().enumerate() {
        let Some(rest) = call.strip_prefix("clone_tree ") else {
            continue;
        };
        let fd = rest.rsplit(" = ").next().unwrap();
        let flags = c[i..]
            .iter()
            .position(|x| x.starts_with(&format!("setattr {fd} ")))
            .unwrap_or_else(|| panic!("no flags for tree {fd}: {c:#?}"));
        let attach = c[i..]
            .iter()
            .position(|x| {
                x.starts_with(&format!("move_mount_at {fd} "))
                    || x.starts_with(&format!("move_mount {fd} "))
            })
            .unwrap_or_else(|| panic!("tree {fd} never attached: {c:#?}"));
        assert!(flags < attach, "flags after attaching tree {fd}: {c:#?}");
        attached += 1;
    }
    // /dev/null for the proc masks, 4 read-only proc dirs, 6 device nodes.
    assert_eq!(attached, 1 + 4 + 6, "{c:#?}");
    // The first clone is the /dev/null mask, cloned from the host node
    // opened without following symlinks.
    let first = c.iter().position(|x| x.starts_with("clone_tree ")).unwrap();
    assert!(c[first - 1].contains(" null = "), "{c:#?}");
    let null_mask = c[first].rsplit(" = ").next().unwrap().to_string();
    let expected_attrs = format!("{:#x}", plan::RO_BIND | crate::sys::MOUNT_ATTR_NOEXEC);
    assert!(c.contains(&format!("setattr {null_mask} false {expected_attrs}")));
    // The other masked files are binds of the flagged mask (a bind copies
    // the flags of its source).
    let binds = c
        .iter()
        .filter(|x| x.starts_with(&format!("mount /proc/self/fd/{null_mask} ")))
        .count();
    assert_eq!(binds, super::build::PROC_MASKED_FILE_COUNT - 1, "{c:#?}");
}

/// An image run: the layers (handed over, as in a root launch) are
/// attached first, then the overlay of them, top first, over an upper on
/// the root tmpfs becomes the root: every step resolves in it, it is made
/// read-only, and it is what pivot_root enters.
#[test]
fn image_layers_become_the_root_overlay_under_every_step() {
    let spec = spec_with(vec![crate::spec::FsOp::Proc {
        dest: "/proc".into(),
    }]);
    let mut p = plan(&spec, true);
    super::plan::add_image_lowers(
        &mut p,
        &[
            "/store/layers/top/root".into(),
            "/store/layers/low/root".into(),
        ],
        true,
    );
    assert_eq!(p.image_lowers, vec![0, 1]);
    assert!(p.sources.iter().all(|s| s.handed_over && s.directory));
    let mut rec = Recorder::default();
    let (top, low) = (rec.fd(), rec.fd());
    let (t, l) = (top.as_raw_fd(), low.as_raw_fd());
    run(&mut rec, &p, vec![(0, top), (1, low)], &spec).unwrap();
    let c = &rec.calls;
    assert!(
        !c.iter().any(|c| c.contains("/store/")),
        "handed-over layers are not opened by path: {c:#?}"
    );
    let root_tmpfs = c
        .iter()
        .find_map(|c| c.strip_prefix("open -100 /tmp/root = "))
        .unwrap()
        .to_string();
    // The attached layers, reopened, in the order given (top first).
    let reopened = |fd: RawFd| -> String {
        let at = c
            .iter()
            .find_map(|x| x.strip_prefix(&format!("move_mount {fd} ")))
            .unwrap();
        c.iter()
            .find_map(|x| x.strip_prefix(&format!("open -100 {at} = ")))
            .unwrap()
            .to_string()
    };
    let (rt, rl) = (reopened(t), reopened(l));
    let overlay = pos(c, "mount overlay /tmp/image overlay");
    assert!(pos(c, &format!("mkdir {root_tmpfs} upper")) < overlay);
    assert!(pos(c, &format!("mkdir {root_tmpfs} work")) < overlay);
    assert!(
        c[overlay].contains(&format!(
            "lowerdir=/proc/self/fd/{rt}:/proc/self/fd/{rl},upperdir=/proc/self/fd/"
        )) && c[overlay].ends_with(",userxattr,metacopy=off"),
        "{}",
        c[overlay]
    );
    let flags = libc::MS_NOSUID | libc::MS_NODEV;
    assert!(
        c[overlay].contains(&format!(" {flags:#x} ")),
        "{}",
        c[overlay]
    );
    let new_root = c
        .iter()
        .find_map(|c| c.strip_prefix("open -100 /tmp/image = "))
        .unwrap()
        .to_string();
    // The step and the end of the build use the overlay, not the tmpfs.
    assert!(pos(c, &format!("open {new_root} proc =")) > overlay);
    assert!(pos(c, &format!("setattr {new_root} false")) > overlay);
    assert!(pos(c, &format!("fchdir {new_root}")) < pos(c, "pivot_root"));
}

/// A recursive bind of `/` or `/tmp` carries the staging tmpfs mounted on
/// `/tmp`; the builder knows where the copy is, and only for those.
#[test]
fn a_bind_of_a_path_holding_tmp_names_the_staging_copy() {
    use super::builder::staging_under;
    assert_eq!(staging_under(b"/").unwrap().as_bytes(), b"tmp");
    assert_eq!(staging_under(b"/tmp").unwrap().as_bytes(), b"");
    assert_eq!(staging_under(b"/tmp/").unwrap().as_bytes(), b"");
    assert!(staging_under(b"/tmpx").is_none());
    assert!(staging_under(b"/usr").is_none());
    assert!(staging_under(b"/tmp/a").is_none());
}

#[test]
fn a_symlink_conflicts_target_is_escaped_and_read_back() {
    let target = b"/x\ny\"z)";
    let hint = super::build::symlink_conflict_hint(target);
    assert!(!hint.contains('\n'), "{hint}");
    let line = format!("fs[2] (symlink /tmp/l): symlinkat(...) => EEXIST: File exists ({hint})");
    assert_eq!(
        super::build::symlink_conflict_target(&line).as_deref(),
        Some("/x\ny\"z)")
    );
    assert_eq!(super::build::symlink_conflict_target("fs[2] (tmpfs /x): mount(...) => EPERM"), None);
}
