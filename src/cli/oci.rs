//! `hutch-oci`: runc's command line over [`crate::oci`], as podman (through
//! conmon), containerd's runc shim and CRI-O call it. Errors go to stderr
//! and, with `--log`, to that file in the `--log-format` asked (containerd
//! reads the last JSON line's `msg`).

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, anyhow};

use crate::oci::OciError;
use crate::oci::lifecycle::{CreateRequest, DEFAULT_ROOT, Root};

const USAGE: &str = "\
usage: hutch-oci [--root DIR] [--log FILE] [--log-format text|json] [--systemd-cgroup] [--debug] COMMAND

commands (runc's command line):
  create [--bundle DIR] [--pid-file FILE] [--console-socket SOCK] ID
  start ID
  run [--bundle DIR] [--pid-file FILE] [--console-socket SOCK] [--detach] ID
  exec [--process FILE] [--tty] [--console-socket SOCK] [--pid-file FILE] [--detach]
       [--cwd DIR] [--env K=V]... [--user UID[:GID]] ID [CMD...]
  state ID
  kill [--all] ID [SIGNAL]
  delete [--force] ID
  list [--format table|json]
  ps [--format table|json] ID [PS-ARGS...]
  update --resources FILE|- ID
  features
  --version";

/// Global options.
struct Global {
    root: PathBuf,
    log: Option<PathBuf>,
    json_log: bool,
    systemd_cgroup: bool,
}

/// A failure with the exit code hutch-oci ends with.
struct Failed(i32, anyhow::Error);

impl From<anyhow::Error> for Failed {
    fn from(e: anyhow::Error) -> Self {
        Failed(1, e)
    }
}

impl From<OciError> for Failed {
    fn from(e: OciError) -> Self {
        Failed(1, e.into())
    }
}

/// Entry point of the `hutch-oci` binary; returns the exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let mut g = Global {
        root: PathBuf::from(DEFAULT_ROOT),
        log: None,
        json_log: false,
        systemd_cgroup: false,
    };
    // A hook in a container's namespaces (super::oci::hooks), before any
    // flag: the arguments are the hook's own.
    if args.first().and_then(|a| a.to_str()) == Some(crate::oci::hooks::EXEC_IN) {
        let rest: Vec<String> = args[1..]
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        return crate::oci::hooks::exec_in(&rest);
    }
    let original = args.clone();
    let args: Vec<String> = match args.into_iter().map(|a| a.into_string()).collect() {
        Ok(a) => a,
        Err(_) => return report(&g, &Failed(1, anyhow!("arguments must be UTF-8"))),
    };
    let mut it = args.into_iter().peekable();
    // Global flags come before the command.
    while let Some(arg) = it.peek().cloned() {
        if !arg.starts_with('-') {
            break;
        }
        it.next();
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let value = |it: &mut std::iter::Peekable<std::vec::IntoIter<String>>| {
            inline.clone().or_else(|| it.next())
        };
        match flag.as_str() {
            "--root" => match value(&mut it) {
                Some(v) => g.root = PathBuf::from(v),
                None => return usage_error(&g, "--root needs a directory"),
            },
            "--log" => match value(&mut it) {
                Some(v) => g.log = Some(PathBuf::from(v)),
                None => return usage_error(&g, "--log needs a file"),
            },
            "--log-format" => match value(&mut it).as_deref() {
                Some("json") => g.json_log = true,
                Some("text") => g.json_log = false,
                _ => return usage_error(&g, "--log-format is text or json"),
            },
            // cgroupsPath is slice:prefix:name (oci::resources).
            "--systemd-cgroup" => g.systemd_cgroup = true,
            // Debug output has nothing more to say than the errors.
            "--debug" => {}
            "--rootless" | "--criu" => {
                let _ = value(&mut it);
            }
            "--version" | "-v" => {
                println!(
                    "hutch-oci version {}\nspec: {}",
                    env!("CARGO_PKG_VERSION"),
                    crate::oci::config::OCI_VERSION_MAX
                );
                return 0;
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                return 0;
            }
            _ => return usage_error(&g, &format!("unknown global option {flag:?}")),
        }
    }
    let Some(cmd) = it.next() else {
        return usage_error(&g, "a command is needed");
    };
    let rest: Vec<String> = it.collect();
    // exec's process enters the container as hutch-oci's image until its
    // execve, and hutch init (and the keeper) stay that image for the
    // container's life: it is a read-only copy, never the host's binary
    // (CVE-2019-5736; crate::sys::ensure_sealed, docs/oci.md). Hooks
    // re-run this image through /proc/self/exe.
    if matches!(cmd.as_str(), "exec" | "create" | "run")
        && let Err(e) = crate::sys::ensure_sealed(&original)
    {
        return report(
            &g,
            &Failed(
                1,
                anyhow!("{cmd}: running from a read-only copy of hutch-oci: {e}"),
            ),
        );
    }
    let root = Root::new(g.root.clone());
    let result = match cmd.as_str() {
        "create" => create(&root, &rest, false, g.systemd_cgroup),
        "run" => create(&root, &rest, true, g.systemd_cgroup),
        "start" => one_id(&rest).and_then(|id| Ok(root.start(&id)?)).map(|_| 0),
        "state" => state(&root, &rest),
        "kill" => kill(&root, &rest),
        "delete" => delete(&root, &rest),
        "list" => list(&root, &rest),
        "features" => {
            println!("{}", features());
            Ok(0)
        }
        "help" => {
            println!("{USAGE}");
            Ok(0)
        }
        "exec" => exec(&root, &rest),
        "update" => update(&root, &rest),
        "ps" => ps(&root, &rest),
        "checkpoint" | "restore" | "pause" | "resume" | "events" | "spec" => Err(Failed(
            1,
            anyhow!("{cmd} is not supported by hutch-oci (see docs/oci.md)"),
        )),
        other => Err(Failed(
            1,
            anyhow!("unknown command {other:?} (hutch-oci --help)"),
        )),
    };
    match result {
        Ok(code) => code,
        Err(f) => report(&g, &f),
    }
}

fn usage_error(g: &Global, msg: &str) -> i32 {
    report(g, &Failed(1, anyhow!("{msg}")))
}

/// The error to stderr and to the log; returns its exit code.
fn report(g: &Global, f: &Failed) -> i32 {
    let msg = format!("{:#}", f.1);
    eprintln!("hutch-oci: {msg}");
    if let Some(path) = &g.log
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let time = crate::util::clock::rfc3339_now();
        let line = if g.json_log {
            serde_json::json!({"level": "error", "msg": msg, "time": time}).to_string()
        } else {
            format!("time={time:?} level=error msg={msg:?}")
        };
        let _ = writeln!(file, "{line}");
    }
    f.0
}

/// (flag, value) pairs and the positional arguments.
type Parsed = (Vec<(String, String)>, Vec<String>);

/// Split `args` into `--flag value` pairs (known `flags` take a value,
/// `switches` do not) and positional arguments.
fn parse_flags(
    args: &[String],
    flags: &[&str],
    switches: &[&str],
    stop_at_positional: bool,
) -> Result<Parsed, Failed> {
    let mut pairs = Vec::new();
    let mut positional = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if !a.starts_with('-') || a == "-" {
            positional.push(a.clone());
            if stop_at_positional {
                // exec: what follows the id is the command, flags and all.
                positional.extend(it.by_ref().cloned());
                break;
            }
            continue;
        }
        if a == "--" {
            positional.extend(it.by_ref().cloned());
            break;
        }
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (a.as_str(), None),
        };
        if flags.contains(&flag) {
            let v = inline
                .or_else(|| it.next().cloned())
                .ok_or_else(|| anyhow!("{flag} needs a value"))?;
            pairs.push((flag.to_string(), v));
        } else if switches.contains(&flag) {
            pairs.push((flag.to_string(), String::new()));
        } else {
            return Err(anyhow!("unknown option {flag:?}").into());
        }
    }
    Ok((pairs, positional))
}

fn one_id(rest: &[String]) -> Result<String, Failed> {
    match rest {
        [id] if !id.starts_with('-') => Ok(id.clone()),
        _ => Err(anyhow!("expected one container id").into()),
    }
}

fn create(root: &Root, rest: &[String], run: bool, systemd_cgroup: bool) -> Result<i32, Failed> {
    let (pairs, positional) = parse_flags(
        rest,
        &[
            "--bundle",
            "-b",
            "--pid-file",
            "--console-socket",
            "--preserve-fds",
        ],
        &["--no-pivot", "--no-new-keyring", "--detach", "-d", "--keep"],
        false,
    )?;
    let id = one_id(&positional)?;
    let mut bundle = PathBuf::from(".");
    let mut pid_file = None;
    let mut console = None;
    let mut detach = !run;
    for (flag, v) in pairs {
        match flag.as_str() {
            "--bundle" | "-b" => bundle = PathBuf::from(v),
            "--pid-file" => pid_file = Some(PathBuf::from(v)),
            "--console-socket" => console = Some(PathBuf::from(v)),
            "--preserve-fds" if v == "0" => {}
            "--preserve-fds" => {
                return Err(anyhow!(
                    "--preserve-fds {v}: passing extra fds to the container is not supported"
                )
                .into());
            }
            "--detach" | "-d" => detach = true,
            // hutch always pivots and creates no keyring.
            _ => {}
        }
    }
    let req = CreateRequest {
        bundle: &bundle,
        pid_file: pid_file.as_deref(),
        console_socket: console.as_deref(),
        systemd_cgroup,
    };
    let record = root.create(&id, &req)?;
    if !run {
        return Ok(0);
    }
    if let Err(e) = root.start(&id) {
        let _ = root.delete(&id, true);
        return Err(e.into());
    }
    if detach {
        return Ok(0);
    }
    // Foreground: hutch init is this process's child; its status is the
    // workload's (128+N for signal N).
    let code = match crate::sys::raw::waitpid(record.pid, 0) {
        Ok(Some((_, status))) if libc::WIFEXITED(status) => libc::WEXITSTATUS(status),
        Ok(Some((_, status))) if libc::WIFSIGNALED(status) => 128 + libc::WTERMSIG(status),
        _ => 1,
    };
    root.delete(&id, true)?;
    Ok(code)
}

fn exec(root: &Root, rest: &[String]) -> Result<i32, Failed> {
    let (pairs, positional) = parse_flags(
        rest,
        &[
            "--process",
            "-p",
            "--console-socket",
            "--pid-file",
            "--cwd",
            "--env",
            "-e",
            "--user",
            "-u",
            "--preserve-fds",
            "--process-label",
            "--apparmor",
            "--cap",
            "-c",
        ],
        &[
            "--tty",
            "-t",
            "--detach",
            "-d",
            "--no-new-privs",
            "--ignore-paused",
        ],
        true,
    )?;
    let Some((id, argv)) = positional.split_first() else {
        return Err(anyhow!("expected a container id").into());
    };
    let get = |f: &[&str]| {
        pairs
            .iter()
            .filter(|(k, _)| f.contains(&k.as_str()))
            .map(|(_, v)| v.clone())
            .collect::<Vec<_>>()
    };
    let has = |f: &[&str]| pairs.iter().any(|(k, _)| f.contains(&k.as_str()));
    for (flag, what) in [
        (&["--process-label", "--apparmor"][..], "labels"),
        (&["--cap", "-c"][..], "extra capabilities"),
    ] {
        if has(flag) {
            return Err(anyhow!("exec {}: {what} are not supported by hutch-oci", flag[0]).into());
        }
    }
    if get(&["--preserve-fds"]).iter().any(|v| v != "0") {
        return Err(anyhow!("--preserve-fds: passing extra fds is not supported").into());
    }
    let process = match get(&["--process", "-p"]).last() {
        Some(file) => {
            let bytes = std::fs::read(file).with_context(|| format!("reading {file}"))?;
            if bytes.len() as u64 > crate::oci::lifecycle::MAX_CONFIG {
                return Err(anyhow!("{file}: too large").into());
            }
            serde_json::from_slice(&bytes)
                .map_err(|e| anyhow!("{file} is not a runtime-spec process (line {})", e.line()))?
        }
        None => {
            if argv.is_empty() {
                return Err(anyhow!("exec needs --process FILE or a command").into());
            }
            let r = root.load(id)?;
            let base = crate::oci::lifecycle::read_config(std::path::Path::new(&r.bundle))?;
            let mut p = base.process.unwrap_or_default();
            p.args = argv.to_vec();
            p.terminal = has(&["--tty", "-t"]);
            if let Some(cwd) = get(&["--cwd"]).last() {
                p.cwd = cwd.clone();
            }
            p.env.extend(get(&["--env", "-e"]));
            if let Some(user) = get(&["--user", "-u"]).last() {
                let (u, g) = user.split_once(':').unwrap_or((user, "0"));
                p.user.uid = u
                    .parse()
                    .map_err(|_| anyhow!("--user {user}: not UID[:GID]"))?;
                p.user.gid = g
                    .parse()
                    .map_err(|_| anyhow!("--user {user}: not UID[:GID]"))?;
            }
            if has(&["--no-new-privs"]) {
                p.no_new_privileges = true;
            }
            p
        }
    };
    let pid_file = get(&["--pid-file"]).last().map(PathBuf::from);
    let console = get(&["--console-socket"]).last().map(PathBuf::from);
    let detach = has(&["--detach", "-d"]);
    Ok(root.exec(
        id,
        process,
        pid_file.as_deref(),
        console.as_deref(),
        !detach,
    )?)
}

fn state(root: &Root, rest: &[String]) -> Result<i32, Failed> {
    let id = one_id(rest)?;
    let s = root.state(&id)?;
    println!(
        "{}",
        serde_json::to_string_pretty(&s).context("serializing the state")?
    );
    Ok(0)
}

/// A signal by number or name (`KILL`, `SIGKILL`, `kill`).
pub fn parse_signal(text: &str) -> Option<i32> {
    if let Ok(n) = text.parse::<i32>() {
        return (1..=64).contains(&n).then_some(n);
    }
    let upper = text.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let known: &[(&str, i32)] = &[
        ("HUP", libc::SIGHUP),
        ("INT", libc::SIGINT),
        ("QUIT", libc::SIGQUIT),
        ("ILL", libc::SIGILL),
        ("TRAP", libc::SIGTRAP),
        ("ABRT", libc::SIGABRT),
        ("IOT", libc::SIGIOT),
        ("BUS", libc::SIGBUS),
        ("FPE", libc::SIGFPE),
        ("KILL", libc::SIGKILL),
        ("USR1", libc::SIGUSR1),
        ("SEGV", libc::SIGSEGV),
        ("USR2", libc::SIGUSR2),
        ("PIPE", libc::SIGPIPE),
        ("ALRM", libc::SIGALRM),
        ("TERM", libc::SIGTERM),
        ("STKFLT", libc::SIGSTKFLT),
        ("CHLD", libc::SIGCHLD),
        ("CONT", libc::SIGCONT),
        ("STOP", libc::SIGSTOP),
        ("TSTP", libc::SIGTSTP),
        ("TTIN", libc::SIGTTIN),
        ("TTOU", libc::SIGTTOU),
        ("URG", libc::SIGURG),
        ("XCPU", libc::SIGXCPU),
        ("XFSZ", libc::SIGXFSZ),
        ("VTALRM", libc::SIGVTALRM),
        ("PROF", libc::SIGPROF),
        ("WINCH", libc::SIGWINCH),
        ("IO", libc::SIGIO),
        ("POLL", libc::SIGPOLL),
        ("PWR", libc::SIGPWR),
        ("SYS", libc::SIGSYS),
    ];
    known.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

fn kill(root: &Root, rest: &[String]) -> Result<i32, Failed> {
    // `--all`: every process of the container, with or without a pid
    // namespace of its own (oci::procs).
    let (pairs, positional) = parse_flags(rest, &[], &["--all", "-a"], false)?;
    let all = !pairs.is_empty();
    let (id, signal) = match positional.as_slice() {
        [id] => (id.clone(), libc::SIGTERM),
        [id, sig] => (
            id.clone(),
            parse_signal(sig).ok_or_else(|| anyhow!("unknown signal {sig:?}"))?,
        ),
        _ => return Err(anyhow!("expected a container id and an optional signal").into()),
    };
    root.kill(&id, signal, all)?;
    Ok(0)
}

/// runc's per-limit flags of `update`: refused, the JSON form is the one
/// engines use.
const UPDATE_FLAGS: &[&str] = &[
    "--blkio-weight",
    "--cpu-period",
    "--cpu-quota",
    "--cpu-rt-period",
    "--cpu-rt-runtime",
    "--cpu-share",
    "--cpuset-cpus",
    "--cpuset-mems",
    "--memory",
    "--memory-reservation",
    "--memory-swap",
    "--pids-limit",
    "--l3-cache-schema",
    "--mem-bw-schema",
    "--kernel-memory",
    "--kernel-memory-tcp",
];

/// `update --resources FILE|- ID` (containerd's shim and CRI-O): the
/// linux.resources JSON written into the container's cgroup.
fn update(root: &Root, rest: &[String]) -> Result<i32, Failed> {
    let mut flags = vec!["--resources", "-r"];
    flags.extend(UPDATE_FLAGS);
    let (pairs, positional) = parse_flags(rest, &flags, &[], false)?;
    let id = one_id(&positional)?;
    let mut file = None;
    for (flag, v) in pairs {
        match flag.as_str() {
            "--resources" | "-r" => file = Some(v),
            other => {
                return Err(anyhow!(
                    "update {other}: not supported; pass the limits as linux.resources JSON with --resources FILE (or - for stdin)"
                )
                .into());
            }
        }
    }
    let Some(file) = file else {
        return Err(anyhow!("update needs --resources FILE (or - for stdin)").into());
    };
    // A missing container first, in the words containerd looks for.
    root.load(&id)?;
    let mut text = Vec::new();
    let read = if file == "-" {
        std::io::Read::read_to_end(
            &mut std::io::Read::take(std::io::stdin(), 1 << 20),
            &mut text,
        )
    } else {
        std::fs::File::open(&file).and_then(|f| {
            std::io::Read::read_to_end(&mut std::io::Read::take(f, 1 << 20), &mut text)
        })
    };
    read.with_context(|| format!("reading the resources {file}"))?;
    let resources: crate::oci::config::Resources = serde_json::from_slice(&text).map_err(|e| {
        anyhow!(
            "--resources {file}: not linux.resources JSON (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    root.update(&id, &resources)?;
    Ok(0)
}

fn delete(root: &Root, rest: &[String]) -> Result<i32, Failed> {
    let (pairs, positional) = parse_flags(rest, &[], &["--force", "-f"], false)?;
    let id = one_id(&positional)?;
    root.delete(&id, !pairs.is_empty())?;
    Ok(0)
}

fn list(root: &Root, rest: &[String]) -> Result<i32, Failed> {
    let (pairs, positional) = parse_flags(rest, &["--format", "-f"], &["--quiet", "-q"], false)?;
    if !positional.is_empty() {
        return Err(anyhow!("list takes no arguments").into());
    }
    let json = pairs
        .iter()
        .any(|(f, v)| f.starts_with("--format") && v == "json");
    let quiet = pairs.iter().any(|(f, _)| f == "--quiet" || f == "-q");
    let states: Vec<_> = root
        .list()
        .into_iter()
        .filter_map(|id| root.state(&id).ok())
        .collect();
    if json {
        println!("{}", serde_json::to_string(&states).context("serializing")?);
    } else {
        if !quiet {
            println!("ID\tPID\tSTATUS\tBUNDLE");
        }
        for s in states {
            if quiet {
                println!("{}", s.id);
            } else {
                println!(
                    "{}\t{}\t{}\t{}",
                    s.id,
                    s.pid.unwrap_or(0),
                    s.status,
                    s.bundle
                );
            }
        }
    }
    Ok(0)
}

/// `ps [--format table|json] ID [PS-ARGS...]` as runc: json is the array
/// of the container's host pids (containerd's `ctr task ps`); table runs
/// `ps PS-ARGS` (default `-ef`) and keeps its header and the container's
/// lines.
fn ps(root: &Root, rest: &[String]) -> Result<i32, Failed> {
    let (pairs, positional) = parse_flags(rest, &["--format", "-f"], &[], true)?;
    let mut json = false;
    for (_, v) in &pairs {
        match v.as_str() {
            "json" => json = true,
            "table" => json = false,
            other => return Err(anyhow!("--format {other:?}: use table or json").into()),
        }
    }
    let Some((id, ps_args)) = positional.split_first() else {
        return Err(anyhow!("expected a container id").into());
    };
    let pids = root.processes(id)?;
    if json {
        println!("{}", serde_json::to_string(&pids).context("serializing")?);
        return Ok(0);
    }
    let ps_args: Vec<String> = if ps_args.is_empty() {
        vec!["-ef".into()]
    } else {
        ps_args.to_vec()
    };
    let out = std::process::Command::new("ps")
        .args(&ps_args)
        .output()
        .context("running ps (procps)")?;
    if !out.status.success() {
        return Err(anyhow!(
            "ps {}: {}",
            ps_args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let Some(column) = header.split_whitespace().position(|h| h == "PID") else {
        return Err(anyhow!("ps {}: its output has no PID column", ps_args.join(" ")).into());
    };
    println!("{header}");
    for line in lines {
        let pid = line
            .split_whitespace()
            .nth(column)
            .and_then(|p| p.parse().ok());
        if pid.is_some_and(|p| pids.contains(&p)) {
            println!("{line}");
        }
    }
    Ok(0)
}

/// `features` (runtime-spec `features.md`): what this runtime reads.
fn features() -> String {
    let caps: Vec<String> = ::caps::all().into_iter().map(|c| c.to_string()).collect();
    let mut caps = caps;
    caps.sort();
    serde_json::json!({
        "ociVersionMin": crate::oci::config::OCI_VERSION_MIN,
        "ociVersionMax": crate::oci::config::OCI_VERSION_MAX,
        "hooks": ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"],
        "mountOptions": [
            "bind", "rbind", "ro", "rw", "nosuid", "suid", "nodev", "dev", "noexec", "exec",
            "nosymfollow", "symfollow", "nodiratime", "diratime", "relatime", "norelatime",
            "atime", "noatime", "strictatime", "private", "rprivate", "slave", "rslave",
            "unbindable", "runbindable", "newinstance"
        ],
        "linux": {
            "namespaces": ["cgroup", "ipc", "mount", "network", "pid", "user", "uts"],
            "capabilities": caps,
            "cgroup": {"v1": true, "v2": true, "systemd": false, "systemdUser": false, "rdma": false},
            "seccomp": {
                "enabled": true,
                "actions": ["SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS",
                            "SCMP_ACT_KILL_THREAD", "SCMP_ACT_LOG", "SCMP_ACT_TRAP"],
                "operators": ["SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_LE", "SCMP_CMP_LT",
                              "SCMP_CMP_MASKED_EQ", "SCMP_CMP_NE"],
                "archs": ["SCMP_ARCH_X86_64"]
            },
            "apparmor": {"enabled": false},
            "selinux": {"enabled": false},
            "intelRdt": {"enabled": false},
            "mountExtensions": {"idmap": {"enabled": false}}
        },
        // CRI-O passes these only to runtimes whose allowed_annotations
        // list them: they change a container's confinement.
        "potentiallyUnsafeConfigAnnotations": ["run.hutch."],
        "annotations": {
            "run.hutch.annotations": crate::oci::translate::ANNOTATIONS.join(","),
        }
    })
    .to_string()
}
