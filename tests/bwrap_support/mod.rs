//! Runs one bubblewrap argv under the real `bwrap` and under
//! `hutch-bwrap`, as root or as uid 65534, with the same probe, fds and
//! environment, and returns what each showed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::As;

pub fn hutch_bwrap() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hutch-bwrap"))
}

/// The probe: what a process can observe of its sandbox, one fact a line.
/// `$HT_NS_*` hold the host's namespace links, so it prints relations
/// (`same`/`new`), not inode numbers. Mounts under /dev and /proc are left
/// out (docs/bwrap.md lists how those trees differ), and so are the host's
/// `*/hutch-*` mounts (other tests' sandboxes come and go while a case
/// runs, and show up through the bound host root); `$HT_PATHS` names
/// files whose type and mode it prints. It lists which of fds 3-9 are
/// open (the test's 7 and 8 always are, 5 and 6 with a case's data):
/// bubblewrap passes what it does not consume.
pub const PROBE: &str = r#"
echo "ids $(id -u) $(id -g) $(id -G)"
for fd in 3 4 5 6 7 8 9; do [ -e /proc/self/fd/$fd ] && echo "fd $fd open"; done
echo "cwd $(pwd) PWD=$PWD"
for n in user mnt pid net ipc uts cgroup; do
  eval host=\$HT_NS_$n
  if [ "$(readlink /proc/self/ns/$n)" = "$host" ]; then echo "ns $n same"; else echo "ns $n new"; fi
done
grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status | tr '\t' ' '
grep -E '^NoNewPrivs' /proc/self/status | tr '\t' ' '
env | grep -E '^(HT_[A-Z]|PATH=|HOME=)' | sort
echo "hostname-set $( [ "$(cat /proc/sys/kernel/hostname)" = "$HT_HOSTNAME" ] && echo host || cat /proc/sys/kernel/hostname)"
awk '{print $5, substr($6,1,2)}' /proc/self/mountinfo | grep -vE '^/(dev|proc)/|/hutch-' | sort
for p in $HT_PATHS; do
  if [ -L "$p" ]; then echo "path $p -> $(readlink "$p")";
  elif [ -e "$p" ]; then echo "path $p $(stat -c '%F %a %u:%g' "$p")";
  else echo "path $p missing"; fi
done
[ -n "$HT_CMD" ] && sh -c "$HT_CMD"
exit ${HT_EXIT:-0}
"#;

/// One run's result.
#[derive(Debug)]
pub struct Seen {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// What the `--info-fd 7` / `--json-status-fd 8` files got.
    pub info: String,
    pub json_status: String,
}

/// A case: bubblewrap options (before the command), and the command
/// (default: the probe).
#[derive(Debug, Clone, Default)]
pub struct Case {
    pub name: &'static str,
    pub args: Vec<String>,
    pub command: Option<Vec<String>>,
    /// Extra environment (`HT_PATHS`, `HT_CMD`, ...).
    pub env: Vec<(String, String)>,
    /// Files opened on fds 5 and 6 (for `--file 5 ...`, `--args 5`).
    pub fd5: Option<Vec<u8>>,
    pub fd6: Option<Vec<u8>>,
    /// Working directory of the caller.
    pub cwd: Option<&'static str>,
}

impl Case {
    pub fn new(name: &'static str, args: &[&str]) -> Case {
        Case {
            name,
            args: args.iter().map(|s| s.to_string()).collect(),
            ..Case::default()
        }
    }
    pub fn env(mut self, k: &str, v: &str) -> Case {
        self.env.push((k.into(), v.into()));
        self
    }
    pub fn paths(self, p: &str) -> Case {
        self.env("HT_PATHS", p)
    }
    pub fn command(mut self, c: &[&str]) -> Case {
        self.command = Some(c.iter().map(|s| s.to_string()).collect());
        self
    }
}

fn host_ns(n: &str) -> String {
    std::fs::read_link(format!("/proc/self/ns/{n}"))
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// Run `case` with `program` (bwrap or hutch-bwrap) as `who`, in `dir`
/// (a scratch directory readable by `who`).
pub fn run(program: &Path, case: &Case, who: As, dir: &Path) -> Seen {
    let info = dir.join(format!(
        "{}-info",
        program.file_name().unwrap().to_string_lossy()
    ));
    let json = dir.join(format!(
        "{}-json",
        program.file_name().unwrap().to_string_lossy()
    ));
    let mut redirs = format!("7>'{}' 8>'{}'", info.display(), json.display());
    for (fd, data) in [(5, &case.fd5), (6, &case.fd6)] {
        if let Some(d) = data {
            let f = dir.join(format!("fd{fd}"));
            std::fs::write(&f, d).unwrap();
            crate::common::own_as(&f, who);
            redirs.push_str(&format!(" {fd}<'{}'", f.display()));
        }
    }
    let mut argv: Vec<String> = vec![program.display().to_string()];
    argv.extend(case.args.iter().cloned());
    argv.push("--".into());
    match &case.command {
        Some(c) => argv.extend(c.iter().cloned()),
        None => argv.extend(["sh".into(), "-c".into(), PROBE.into()]),
    }
    // The shell opens the fds, then becomes the program.
    let script = format!("exec \"$@\" {redirs}");
    let mut cmd = if who.drops_to_nobody() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            &script,
            "sh",
        ]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", &script, "sh"]);
        c
    };
    cmd.args(&argv)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .env("HOME", "/nonexistent-home")
        .env("HT_KEEP", "kept")
        .env("HT_DROP", "dropped")
        .env(
            "HT_HOSTNAME",
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .unwrap()
                .trim(),
        )
        .current_dir(case.cwd.map(Path::new).unwrap_or(dir))
        .stdin(Stdio::null());
    for n in ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"] {
        cmd.env(format!("HT_NS_{n}"), host_ns(n));
    }
    for (k, v) in &case.env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("spawn");
    Seen {
        status: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        info: std::fs::read_to_string(&info).unwrap_or_default(),
        json_status: std::fs::read_to_string(&json).unwrap_or_default(),
    }
}

/// The keys of every JSON document in `text` (one per line or one
/// pretty-printed object), in order.
pub fn json_keys(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let de = serde_json::Deserializer::from_str(text).into_iter::<serde_json::Value>();
    for v in de {
        let v = v.unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
        out.push(v.as_object().expect("an object").keys().cloned().collect());
    }
    out
}

/// A raw seccomp program (bubblewrap's `--seccomp` format) that fails
/// mkdir(2) and mkdirat(2) with EPERM and allows everything else.
pub fn deny_mkdir_bpf() -> Vec<u8> {
    let ins = |code: u16, jt: u8, jf: u8, k: u32| {
        let mut v = code.to_ne_bytes().to_vec();
        v.extend([jt, jf]);
        v.extend(k.to_ne_bytes());
        v
    };
    [
        ins(0x20, 0, 0, 0),               // ld [0]: the syscall number
        ins(0x15, 2, 0, 83),              // jeq mkdir → deny
        ins(0x15, 1, 0, 258),             // jeq mkdirat → deny
        ins(0x06, 0, 0, 0x7fff_0000),     // ret ALLOW
        ins(0x06, 0, 0, 0x0005_0000 | 1), // ret ERRNO(EPERM)
    ]
    .concat()
}

/// A raw seccomp program that fails seccomp(2) with EPERM and allows
/// everything else, prctl included: bubblewrap's documented contract for
/// a first `--add-seccomp-fd` program that lets later ones be loaded.
pub fn deny_seccomp_syscall_bpf() -> Vec<u8> {
    let ins = |code: u16, jt: u8, jf: u8, k: u32| {
        let mut v = code.to_ne_bytes().to_vec();
        v.extend([jt, jf]);
        v.extend(k.to_ne_bytes());
        v
    };
    [
        ins(0x20, 0, 0, 0),               // ld [0]: the syscall number
        ins(0x15, 0, 1, 317),             // jeq seccomp → deny
        ins(0x06, 0, 0, 0x0005_0000 | 1), // ret ERRNO(EPERM)
        ins(0x06, 0, 0, 0x7fff_0000),     // ret ALLOW
    ]
    .concat()
}
