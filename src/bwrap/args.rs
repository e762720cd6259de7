//! bubblewrap's command line, parsed as bubblewrap 0.11 parses it
//! (`parse_args_recurse` in bubblewrap.c): options in order, `--args FD`
//! read when it is met (NUL-separated; an `--args` inside such a file is
//! refused, as bubblewrap does), the same checks and messages. Parsing
//! only records what was asked; [`super::translate`] turns it into a Spec.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use super::error::BwrapError;

/// bubblewrap's cap on the number of arguments (`MAX_ARGS`).
pub const MAX_ARGS: usize = 9000;
/// bubblewrap's cap on `--size` (`MAX_TMPFS_BYTES`: SIZE_MAX >> 1).
pub const MAX_TMPFS_BYTES: u64 = (usize::MAX >> 1) as u64;

/// Reads the whole content of an fd the command line names (`--args`,
/// `--file`, `--seccomp`...). The real one reads the process's fds; the
/// tests and the fuzzer use a table.
pub trait FdReader {
    fn read_fd(&mut self, fd: i32) -> std::io::Result<Vec<u8>>;
}

/// What the command line asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Run,
    Help,
    Version,
}

/// Which kind of bind (`--bind`, `--ro-bind`, `--dev-bind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindKind {
    ReadWrite,
    ReadOnly,
    Dev,
}

/// One setup operation, in command-line order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Bind {
        kind: BindKind,
        src: OsString,
        dest: OsString,
        /// `--*-bind-try`: skip when the source is missing.
        allow_missing: bool,
    },
    /// `--bind-fd` / `--ro-bind-fd`: the directory open at `fd`.
    BindFd {
        fd: i32,
        dest: OsString,
        read_only: bool,
    },
    RemountRo(OsString),
    Proc(OsString),
    Dev(OsString),
    Tmpfs {
        dest: OsString,
        perms: u32,
        size: Option<u64>,
    },
    Mqueue(OsString),
    Dir {
        dest: OsString,
        perms: u32,
    },
    /// `--file FD DEST`: a copy of the fd's content.
    File {
        fd: i32,
        dest: OsString,
        perms: u32,
    },
    /// `--bind-data` / `--ro-bind-data FD DEST`.
    BindData {
        fd: i32,
        dest: OsString,
        perms: u32,
        read_only: bool,
    },
    Symlink {
        target: OsString,
        dest: OsString,
    },
    Chmod {
        perms: u32,
        dest: OsString,
    },
    /// `--overlay-src...` then `--overlay RWSRC WORKDIR DEST`.
    Overlay {
        lowers: Vec<OsString>,
        upper: OsString,
        work: OsString,
        dest: OsString,
    },
    TmpOverlay {
        lowers: Vec<OsString>,
        dest: OsString,
    },
    RoOverlay {
        lowers: Vec<OsString>,
        dest: OsString,
    },
}

/// An environment change, applied in order to the caller's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvOp {
    Set(OsString, OsString),
    Unset(OsString),
    Clear,
}

/// A capability change, applied in order to the default set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapOp {
    /// `ALL` or one capability number.
    Add(Option<u32>),
    Drop(Option<u32>),
}

/// The parsed command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    pub action: Option<Action>,
    pub argv0: Option<OsString>,
    pub level_prefix: bool,
    pub unshare_user: bool,
    pub unshare_user_try: bool,
    pub unshare_ipc: bool,
    pub unshare_pid: bool,
    pub unshare_net: bool,
    pub unshare_uts: bool,
    pub unshare_cgroup: bool,
    pub unshare_cgroup_try: bool,
    pub userns_fd: Option<i32>,
    pub userns2_fd: Option<i32>,
    pub pidns_fd: Option<i32>,
    pub disable_userns: bool,
    pub assert_userns_disabled: bool,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub hostname: Option<OsString>,
    pub chdir: Option<OsString>,
    pub env: Vec<EnvOp>,
    pub lock_files: Vec<OsString>,
    pub sync_fd: Option<i32>,
    pub block_fd: Option<i32>,
    pub userns_block_fd: Option<i32>,
    pub info_fd: Option<i32>,
    pub json_status_fd: Option<i32>,
    /// `--seccomp FD`.
    pub seccomp_fd: Option<i32>,
    /// `--add-seccomp-fd FD`, in order.
    pub add_seccomp_fds: Vec<i32>,
    pub exec_label: Option<OsString>,
    pub file_label: Option<OsString>,
    pub new_session: bool,
    pub die_with_parent: bool,
    pub as_pid_1: bool,
    pub caps: Vec<CapOp>,
    pub ops: Vec<Op>,
    /// Warnings bubblewrap prints while parsing (`--chdir` given twice...).
    pub warnings: Vec<String>,
    /// The command and its arguments.
    pub command: Vec<OsString>,
}

fn die(msg: impl Into<String>) -> BwrapError {
    BwrapError::die(msg)
}

fn show(a: &[u8]) -> String {
    String::from_utf8_lossy(a).into_owned()
}

/// `strtol (s, &end, 10)` with bubblewrap's checks: the whole string, not
/// negative.
fn parse_fd(s: &[u8]) -> Result<i32, BwrapError> {
    let bad = || die(format!("Invalid fd: {}", show(s)));
    let text = std::str::from_utf8(s).map_err(|_| bad())?;
    // strtol skips leading white space and takes a sign.
    let t = text.trim_start();
    if text.is_empty() {
        return Err(bad());
    }
    let v: i64 = t.parse().map_err(|_| bad())?;
    if v < 0 {
        return Err(bad());
    }
    // strtol's long is truncated to int by bubblewrap; a huge value is no fd.
    i32::try_from(v).map_err(|_| bad())
}

/// `strtoul (s, &end, 8)` for `--perms` / `--chmod`.
fn parse_octal(s: &[u8], msg: &str) -> Result<u32, BwrapError> {
    let t = std::str::from_utf8(s).unwrap_or("").trim_start();
    let t = t.strip_prefix('+').unwrap_or(t);
    if s.is_empty() || t.is_empty() {
        return Err(die(msg));
    }
    match u32::from_str_radix(t, 8) {
        Ok(v) if v <= 0o7777 => Ok(v),
        _ => Err(die(msg)),
    }
}

/// `--size`: strtoull base 0 (decimal, 0x hex, 0 octal), first char a digit.
fn parse_size(s: &[u8]) -> Result<u64, BwrapError> {
    let bad = || die("--size takes a non-zero number of bytes");
    if !s.first().is_some_and(u8::is_ascii_digit) {
        return Err(bad());
    }
    let t = std::str::from_utf8(s).map_err(|_| bad())?;
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        u64::from_str_radix(&t[1..], 8)
    } else {
        t.parse()
    }
    .map_err(|_| bad())?;
    if v == 0 {
        return Err(bad());
    }
    if v > MAX_TMPFS_BYTES {
        return Err(die(format!(
            "--size (for tmpfs) is limited to {MAX_TMPFS_BYTES}"
        )));
    }
    Ok(v)
}

/// `--uid` / `--gid`: strtol base 10, the whole string, >= 0.
fn parse_id(s: &[u8], what: &str) -> Result<u32, BwrapError> {
    let bad = || die(format!("Invalid {what}: {}", show(s)));
    let t = std::str::from_utf8(s).map_err(|_| bad())?;
    if t.is_empty() {
        return Err(bad());
    }
    let v: i64 = t.trim_start().parse().map_err(|_| bad())?;
    u32::try_from(v).map_err(|_| bad())
}

/// libcap's `cap_from_name`: a name (`cap_net_raw`, any case) or a number.
pub fn cap_from_name(s: &[u8]) -> Option<u32> {
    let t = std::str::from_utf8(s).ok()?;
    if let Ok(n) = t.parse::<u32>() {
        return (n <= 63).then_some(n);
    }
    let upper = t.to_ascii_uppercase();
    if !upper.starts_with("CAP_") {
        return None;
    }
    use std::str::FromStr;
    caps::Capability::from_str(&upper)
        .ok()
        .map(|c| c.index() as u32)
}

/// What `--label` options do on a host without SELinux (bubblewrap's
/// `die_unless_label_valid`): hutch never runs with SELinux labels.
const NO_LABELS: &str = "labeling not supported on this system";

struct State {
    next_perms: Option<u32>,
    next_size: Option<u64>,
    overlay_srcs: Vec<OsString>,
    total: usize,
}

/// Parse bubblewrap's argv (without the program name).
pub fn parse(args: Vec<OsString>, fds: &mut dyn FdReader) -> Result<Parsed, BwrapError> {
    let args: Vec<Vec<u8>> = args.into_iter().map(OsStringExt::into_vec).collect();
    let mut p = Parsed::default();
    let mut st = State {
        next_perms: None,
        next_size: None,
        overlay_srcs: Vec::new(),
        total: args.len(),
    };
    let rest = parse_recurse(&args, false, &mut p, &mut st, fds)?;
    // bubblewrap's parse_args: the command (or the end) after an
    // --overlay-src that no overlay took.
    if p.action.is_none() && !st.overlay_srcs.is_empty() {
        return Err(die(
            "--overlay-src must be followed by another --overlay-src or one of --overlay, --tmp-overlay, or --ro-overlay",
        ));
    }
    if p.action.is_none() {
        p.action = Some(Action::Run);
        p.command = rest.iter().cloned().map(OsString::from_vec).collect();
    }
    Ok(p)
}

/// One level of `parse_args_recurse`; returns what is left (the command).
fn parse_recurse<'a>(
    mut argv: &'a [Vec<u8>],
    in_file: bool,
    p: &mut Parsed,
    st: &mut State,
    fds: &mut dyn FdReader,
) -> Result<&'a [Vec<u8>], BwrapError> {
    if st.total > MAX_ARGS {
        return Err(die(format!(
            "Exceeded maximum number of arguments {MAX_ARGS}"
        )));
    }
    while let Some(first) = argv.first() {
        let arg = first.as_slice();
        let name = show(arg);
        let n = argv.len();
        let need = |k: usize, msg: &str| -> Result<(), BwrapError> {
            if n < k + 1 { Err(die(msg)) } else { Ok(()) }
        };
        let a = |i: usize| OsString::from_vec(argv[i].clone());
        // How many arguments this option consumed after itself.
        let mut used = 0usize;
        match arg {
            b"--help" => {
                p.action = Some(Action::Help);
                return Ok(&[]);
            }
            b"--version" => {
                p.action = Some(Action::Version);
                return Ok(&[]);
            }
            b"--args" => {
                if in_file {
                    return Err(die("--args not supported in arguments file"));
                }
                need(1, "--args takes an argument")?;
                let fd = parse_fd(&argv[1])?;
                let data = fds
                    .read_fd(fd)
                    .map_err(|e| BwrapError::io("Can't read --args data", &e))?;
                let mut inner: Vec<Vec<u8>> = Vec::new();
                let mut rest = data.as_slice();
                while !rest.is_empty() {
                    st.total += 1;
                    if st.total > MAX_ARGS {
                        return Err(die(format!(
                            "Exceeded maximum number of arguments {MAX_ARGS}"
                        )));
                    }
                    match rest.iter().position(|&b| b == 0) {
                        Some(i) => {
                            inner.push(rest[..i].to_vec());
                            rest = &rest[i + 1..];
                        }
                        None => {
                            inner.push(rest.to_vec());
                            rest = &[];
                        }
                    }
                }
                // What the file leaves unparsed is dropped, as bubblewrap
                // does (its recursion's remainder is not the command).
                parse_recurse(&inner, true, p, st, fds)?;
                if p.action.is_some() {
                    return Ok(&[]);
                }
                used = 1;
            }
            b"--argv0" => {
                need(1, "--argv0 takes one argument")?;
                if p.argv0.is_some() {
                    return Err(die("--argv0 used multiple times"));
                }
                p.argv0 = Some(a(1));
                used = 1;
            }
            b"--level-prefix" => p.level_prefix = true,
            // bubblewrap 0.12: forgive a submount's failed read-only
            // remount (an automount that does not answer). hutch makes a
            // bind read-only with one recursive mount_setattr, which visits
            // no submount on its own, so there is nothing to forgive; every
            // setup failure stays fatal (fail closed).
            b"--not-a-security-boundary" => {}
            b"--unshare-all" => {
                p.unshare_user_try = true;
                p.unshare_ipc = true;
                p.unshare_pid = true;
                p.unshare_uts = true;
                p.unshare_cgroup_try = true;
                p.unshare_net = true;
            }
            b"--unshare-user" => p.unshare_user = true,
            b"--unshare-user-try" => p.unshare_user_try = true,
            b"--unshare-ipc" => p.unshare_ipc = true,
            b"--unshare-pid" => p.unshare_pid = true,
            b"--unshare-net" => p.unshare_net = true,
            b"--unshare-uts" => p.unshare_uts = true,
            b"--unshare-cgroup" => p.unshare_cgroup = true,
            b"--unshare-cgroup-try" => p.unshare_cgroup_try = true,
            b"--share-net" => p.unshare_net = false,
            b"--chdir" => {
                need(1, "--chdir takes one argument")?;
                if p.chdir.is_some() {
                    p.warnings
                        .push("Only the last --chdir option will take effect".into());
                }
                p.chdir = Some(a(1));
                used = 1;
            }
            b"--disable-userns" => p.disable_userns = true,
            b"--assert-userns-disabled" => p.assert_userns_disabled = true,
            b"--remount-ro" => {
                need(1, "--remount-ro takes one argument")?;
                p.ops.push(Op::RemountRo(a(1)));
                used = 1;
            }
            b"--bind" | b"--bind-try" | b"--ro-bind" | b"--ro-bind-try" | b"--dev-bind"
            | b"--dev-bind-try" => {
                need(2, &format!("{name} takes two arguments"))?;
                let kind = match arg {
                    b"--bind" | b"--bind-try" => BindKind::ReadWrite,
                    b"--ro-bind" | b"--ro-bind-try" => BindKind::ReadOnly,
                    _ => BindKind::Dev,
                };
                p.ops.push(Op::Bind {
                    kind,
                    src: a(1),
                    dest: a(2),
                    allow_missing: arg.ends_with(b"-try"),
                });
                used = 2;
            }
            b"--bind-fd" | b"--ro-bind-fd" => {
                need(2, "--bind-fd takes two arguments")?;
                let fd = parse_fd(&argv[1])?;
                p.ops.push(Op::BindFd {
                    fd,
                    dest: a(2),
                    read_only: arg == b"--ro-bind-fd",
                });
                used = 2;
            }
            b"--overlay-src" => {
                // bubblewrap counts the sources here and reads them back
                // from argv at the overlay; an --overlay-src without a path
                // then reads past the end, so it needs one.
                need(1, "--overlay-src takes an argument")?;
                st.overlay_srcs.push(a(1));
                used = 1;
            }
            b"--overlay" => {
                need(3, "--overlay takes three arguments")?;
                if st.overlay_srcs.is_empty() {
                    return Err(die("--overlay requires at least one --overlay-src"));
                }
                p.ops.push(Op::Overlay {
                    lowers: std::mem::take(&mut st.overlay_srcs),
                    upper: a(1),
                    work: a(2),
                    dest: a(3),
                });
                used = 3;
            }
            b"--tmp-overlay" => {
                need(1, "--tmp-overlay takes an argument")?;
                if st.overlay_srcs.is_empty() {
                    return Err(die("--tmp-overlay requires at least one --overlay-src"));
                }
                p.ops.push(Op::TmpOverlay {
                    lowers: std::mem::take(&mut st.overlay_srcs),
                    dest: a(1),
                });
                used = 1;
            }
            b"--ro-overlay" => {
                need(1, "--ro-overlay takes an argument")?;
                if st.overlay_srcs.len() < 2 {
                    return Err(die("--ro-overlay requires at least two --overlay-src"));
                }
                p.ops.push(Op::RoOverlay {
                    lowers: std::mem::take(&mut st.overlay_srcs),
                    dest: a(1),
                });
                used = 1;
            }
            b"--proc" => {
                need(1, "--proc takes an argument")?;
                p.ops.push(Op::Proc(a(1)));
                used = 1;
            }
            b"--exec-label" => {
                need(1, "--exec-label takes an argument")?;
                return Err(die(NO_LABELS));
            }
            b"--file-label" => {
                need(1, "--file-label takes an argument")?;
                return Err(die(NO_LABELS));
            }
            b"--dev" => {
                need(1, "--dev takes an argument")?;
                p.ops.push(Op::Dev(a(1)));
                used = 1;
            }
            b"--tmpfs" => {
                need(1, "--tmpfs takes an argument")?;
                p.ops.push(Op::Tmpfs {
                    dest: a(1),
                    perms: st.next_perms.take().unwrap_or(0o755),
                    size: st.next_size.take(),
                });
                used = 1;
            }
            b"--mqueue" => {
                need(1, "--mqueue takes an argument")?;
                p.ops.push(Op::Mqueue(a(1)));
                used = 1;
            }
            b"--dir" => {
                need(1, "--dir takes an argument")?;
                p.ops.push(Op::Dir {
                    dest: a(1),
                    perms: st.next_perms.take().unwrap_or(0o755),
                });
                used = 1;
            }
            b"--file" => {
                need(2, "--file takes two arguments")?;
                let fd = parse_fd(&argv[1])?;
                p.ops.push(Op::File {
                    fd,
                    dest: a(2),
                    perms: st.next_perms.take().unwrap_or(0o666),
                });
                used = 2;
            }
            b"--bind-data" | b"--ro-bind-data" => {
                need(2, &format!("{name} takes two arguments"))?;
                let fd = parse_fd(&argv[1])?;
                p.ops.push(Op::BindData {
                    fd,
                    dest: a(2),
                    perms: st.next_perms.take().unwrap_or(0o600),
                    read_only: arg == b"--ro-bind-data",
                });
                used = 2;
            }
            b"--symlink" => {
                need(2, "--symlink takes two arguments")?;
                p.ops.push(Op::Symlink {
                    target: a(1),
                    dest: a(2),
                });
                used = 2;
            }
            b"--lock-file" => {
                need(1, "--lock-file takes an argument")?;
                p.lock_files.push(a(1));
                used = 1;
            }
            b"--sync-fd" | b"--block-fd" | b"--userns-block-fd" | b"--info-fd"
            | b"--json-status-fd" | b"--userns" | b"--userns2" | b"--pidns" => {
                need(1, &format!("{name} takes an argument"))?;
                let fd = parse_fd(&argv[1])?;
                let slot = match arg {
                    b"--sync-fd" => &mut p.sync_fd,
                    b"--block-fd" => &mut p.block_fd,
                    b"--userns-block-fd" => &mut p.userns_block_fd,
                    b"--info-fd" => &mut p.info_fd,
                    b"--json-status-fd" => &mut p.json_status_fd,
                    b"--userns" => &mut p.userns_fd,
                    b"--userns2" => &mut p.userns2_fd,
                    _ => &mut p.pidns_fd,
                };
                if slot.is_some() {
                    // bubblewrap closes the earlier fd and keeps the last.
                    p.warnings
                        .push(format!("Only the last {name} option will take effect"));
                }
                *slot = Some(fd);
                used = 1;
            }
            b"--seccomp" => {
                need(1, "--seccomp takes an argument")?;
                if !p.add_seccomp_fds.is_empty() {
                    return Err(die("--seccomp cannot be combined with --add-seccomp-fd"));
                }
                if p.seccomp_fd.is_some() {
                    p.warnings
                        .push("Only the last --seccomp option will take effect".into());
                }
                p.seccomp_fd = Some(parse_fd(&argv[1])?);
                used = 1;
            }
            b"--add-seccomp-fd" => {
                need(1, "--add-seccomp-fd takes an argument")?;
                if p.seccomp_fd.is_some() {
                    return Err(die("--add-seccomp-fd cannot be combined with --seccomp"));
                }
                p.add_seccomp_fds.push(parse_fd(&argv[1])?);
                used = 1;
            }
            b"--clearenv" => p.env.push(EnvOp::Clear),
            b"--setenv" => {
                need(2, "--setenv takes two arguments")?;
                p.env.push(EnvOp::Set(a(1), a(2)));
                used = 2;
            }
            b"--unsetenv" => {
                need(1, "--unsetenv takes an argument")?;
                p.env.push(EnvOp::Unset(a(1)));
                used = 1;
            }
            b"--uid" => {
                need(1, "--uid takes an argument")?;
                p.uid = Some(parse_id(&argv[1], "uid")?);
                used = 1;
            }
            b"--gid" => {
                need(1, "--gid takes an argument")?;
                p.gid = Some(parse_id(&argv[1], "gid")?);
                used = 1;
            }
            b"--hostname" => {
                need(1, "--hostname takes an argument")?;
                p.hostname = Some(a(1));
                used = 1;
            }
            b"--new-session" => p.new_session = true,
            b"--die-with-parent" => p.die_with_parent = true,
            b"--as-pid-1" => p.as_pid_1 = true,
            b"--cap-add" | b"--cap-drop" => {
                need(1, &format!("{name} takes an argument"))?;
                let v = &argv[1];
                let cap = if v.eq_ignore_ascii_case(b"ALL") {
                    None
                } else {
                    Some(cap_from_name(v).ok_or_else(|| die(format!("unknown cap: {}", show(v))))?)
                };
                p.caps.push(if arg == b"--cap-add" {
                    CapOp::Add(cap)
                } else {
                    CapOp::Drop(cap)
                });
                used = 1;
            }
            b"--perms" => {
                need(1, "--perms takes an argument")?;
                if st.next_perms.is_some() {
                    return Err(die("--perms given twice for the same action"));
                }
                st.next_perms = Some(parse_octal(
                    &argv[1],
                    "--perms takes an octal argument <= 07777",
                )?);
                used = 1;
            }
            b"--size" => {
                need(1, "--size takes an argument")?;
                if st.next_size.is_some() {
                    return Err(die("--size given twice for the same action"));
                }
                st.next_size = Some(parse_size(&argv[1])?);
                used = 1;
            }
            b"--chmod" => {
                need(2, "--chmod takes two arguments")?;
                let perms = parse_octal(&argv[1], "--chmod takes an octal argument <= 07777")?;
                p.ops.push(Op::Chmod { perms, dest: a(2) });
                used = 2;
            }
            b"--" => return Ok(&argv[1..]),
            _ if arg.first() == Some(&b'-') => {
                return Err(die(format!("Unknown option {name}")));
            }
            _ => return Ok(argv),
        }
        let modifier = matches!(arg, b"--perms" | b"--size");
        if !modifier && st.next_perms.is_some() {
            return Err(die(
                "--perms must be followed by an option that creates a file",
            ));
        }
        if !modifier && st.next_size.is_some() {
            return Err(die("--size must be followed by --tmpfs"));
        }
        if arg != b"--overlay-src" && !st.overlay_srcs.is_empty() {
            return Err(die(
                "--overlay-src must be followed by another --overlay-src or one of --overlay, --tmp-overlay, or --ro-overlay",
            ));
        }
        argv = &argv[1 + used..];
    }
    Ok(argv)
}

/// Reads fds of this process: the whole content from the current offset
/// (bubblewrap's `load_file_data`), the fd then closed as bubblewrap does.
pub struct ProcessFds;

impl FdReader for ProcessFds {
    fn read_fd(&mut self, fd: i32) -> std::io::Result<Vec<u8>> {
        crate::sys::read_fd_to_end(fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    pub struct Table(pub HashMap<i32, Vec<u8>>);
    impl FdReader for Table {
        fn read_fd(&mut self, fd: i32) -> std::io::Result<Vec<u8>> {
            self.0
                .remove(&fd)
                .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EBADF))
        }
    }

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn p(v: &[&str]) -> Result<Parsed, BwrapError> {
        parse(os(v), &mut Table(HashMap::new()))
    }

    fn err(v: &[&str]) -> String {
        p(v).expect_err(&v.join(" ")).to_string()
    }

    #[test]
    fn operations_keep_their_order_and_modifiers() {
        let r = p(&[
            "--ro-bind",
            "/usr",
            "/usr",
            "--perms",
            "0700",
            "--tmpfs",
            "/t",
            "--size",
            "4096",
            "--tmpfs",
            "/u",
            "--dir",
            "/d",
            "--symlink",
            "usr/lib",
            "/lib",
            "--chmod",
            "0555",
            "/d",
            "--bind-try",
            "/nope",
            "/n",
            "sh",
            "-c",
            "x",
        ])
        .unwrap();
        assert_eq!(r.action, Some(Action::Run));
        assert_eq!(r.command, os(&["sh", "-c", "x"]));
        assert_eq!(r.ops.len(), 7);
        assert_eq!(
            r.ops[1],
            Op::Tmpfs {
                dest: "/t".into(),
                perms: 0o700,
                size: None
            }
        );
        assert_eq!(
            r.ops[2],
            Op::Tmpfs {
                dest: "/u".into(),
                perms: 0o755,
                size: Some(4096)
            }
        );
        assert!(matches!(
            &r.ops[6],
            Op::Bind {
                allow_missing: true,
                kind: BindKind::ReadWrite,
                ..
            }
        ));
    }

    #[test]
    fn errors_are_bubblewraps() {
        for (argv, msg) in [
            (&["--bogus"][..], "Unknown option --bogus"),
            (&["--bind", "/a"], "--bind takes two arguments"),
            (
                &["--ro-bind-try", "/a"],
                "--ro-bind-try takes two arguments",
            ),
            (&["--file", "x", "/a"], "Invalid fd: x"),
            (&["--file", "-1", "/a"], "Invalid fd: -1"),
            (
                &["--perms", "0999", "--dir", "/a"],
                "--perms takes an octal argument <= 07777",
            ),
            (
                &["--perms", "0700", "--proc", "/p"],
                "--perms must be followed by an option that creates a file",
            ),
            (
                &["--perms", "1", "--perms", "1"],
                "--perms given twice for the same action",
            ),
            (
                &["--size", "0", "--tmpfs", "/t"],
                "--size takes a non-zero number of bytes",
            ),
            (&["--size", "-5"], "--size takes a non-zero number of bytes"),
            (
                &["--size", "10", "--dir", "/t"],
                "--size must be followed by --tmpfs",
            ),
            (
                &["--overlay", "a", "b", "c"],
                "--overlay requires at least one --overlay-src",
            ),
            (
                &["--overlay-src", "/a", "--ro-overlay", "/x"],
                "--ro-overlay requires at least two --overlay-src",
            ),
            (
                &["--overlay-src", "/a", "--dir", "/x"],
                "--overlay-src must be followed by another --overlay-src or one of --overlay, --tmp-overlay, or --ro-overlay",
            ),
            // Issue 33 item 11: trailing, before the command.
            (
                &["--overlay-src", "/a", "true"],
                "--overlay-src must be followed by another --overlay-src or one of --overlay, --tmp-overlay, or --ro-overlay",
            ),
            (&["--cap-add", "CAP_BOGUS"], "unknown cap: CAP_BOGUS"),
            (&["--uid", "x"], "Invalid uid: x"),
            (&["--gid", ""], "Invalid gid: "),
            (
                &["--argv0", "a", "--argv0", "b"],
                "--argv0 used multiple times",
            ),
            (
                &["--seccomp", "3", "--add-seccomp-fd", "4"],
                "--add-seccomp-fd cannot be combined with --seccomp",
            ),
            (
                &["--exec-label", "x"],
                "labeling not supported on this system",
            ),
            (
                &["--file-label", "x"],
                "labeling not supported on this system",
            ),
            (&["--args"], "--args takes an argument"),
        ] {
            assert_eq!(err(argv), msg, "{argv:?}");
        }
    }

    #[test]
    fn args_fd_is_read_in_place_and_cannot_nest() {
        let mut t = Table(HashMap::from([(
            5,
            b"--unshare-net\0--setenv\0A\0b c\0--dir\0/x\0".to_vec(),
        )]));
        let r = parse(
            os(&["--unshare-pid", "--args", "5", "--dir", "/y", "true"]),
            &mut t,
        )
        .unwrap();
        assert!(r.unshare_net && r.unshare_pid);
        assert_eq!(r.env, [EnvOp::Set("A".into(), "b c".into())]);
        assert_eq!(r.ops.len(), 2);
        assert_eq!(r.command, os(&["true"]));
        let mut t = Table(HashMap::from([(5, b"--args\x006\0".to_vec())]));
        let e = parse(os(&["--args", "5", "true"]), &mut t).unwrap_err();
        assert_eq!(e.to_string(), "--args not supported in arguments file");
        let e = parse(os(&["--args", "9", "true"]), &mut Table(HashMap::new())).unwrap_err();
        assert_eq!(e.to_string(), "Can't read --args data: Bad file descriptor");
    }

    #[test]
    fn unshare_all_and_share_net() {
        let r = p(&["--unshare-all", "--share-net", "true"]).unwrap();
        assert!(r.unshare_user_try && r.unshare_pid && r.unshare_cgroup_try && !r.unshare_net);
        assert!(!r.unshare_user);
    }

    #[test]
    fn help_version_and_dash_dash() {
        assert_eq!(
            p(&["--help", "--bogus"]).unwrap().action,
            Some(Action::Help)
        );
        assert_eq!(p(&["--version"]).unwrap().action, Some(Action::Version));
        let r = p(&["--", "--weird"]).unwrap();
        assert_eq!(r.command, os(&["--weird"]));
        assert!(p(&["--dir", "/x"]).unwrap().command.is_empty());
    }

    #[test]
    fn caps_and_numbers() {
        assert_eq!(cap_from_name(b"cap_net_raw"), Some(13));
        assert_eq!(cap_from_name(b"CAP_SYS_ADMIN"), Some(21));
        assert_eq!(cap_from_name(b"net_raw"), None);
        assert_eq!(parse_size(b"0x10").unwrap(), 16);
        assert_eq!(parse_size(b"010").unwrap(), 8);
        assert_eq!(parse_octal(b"755", "m").unwrap(), 0o755);
    }
}
