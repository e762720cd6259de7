//! `hutch run [OPTIONS] [--] COMMAND [ARGS...]`: flags → [`Spec`] +
//! [`RunOptions`], applied in the order given (filesystem operations keep
//! their order, as in bubblewrap).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};

use super::flags::with_flags;
use super::machine::{self, ErrorKind, MachineError};
use crate::launch::{self, RunOptions};
use crate::spec::{self, ByteSize, Duration, FsOp, Limit, Network, Spec};

pub const USAGE: &str = "\
usage: hutch run [OPTIONS] [--] COMMAND [ARGS...]

Runs COMMAND in a sandbox: the host's system directories read-only, a fresh
/proc, a minimal /dev, a private /tmp, the current directory writable through
an overlay (the host directory is never modified), no network, a clean
environment, no capabilities.

Profile:
  --profile FILE          start from a TOML or JSON profile instead of the default
  --agent NAME|FILE       what an agent CLI needs (claude-code, codex, or a profile
                          file; `hutch agent list`, docs/agents.md); the other
                          options override it
  --prompt TEXT           with --agent: run the CLI on this prompt the way its profile
                          says (claude -p, codex exec), TEXT as one argument; words
                          after -- go between the CLI's name and the prompt's words
  --bare                  start from an empty root (no default profile, no workspace)
  --workspace DIR[:DEST]  overlay DIR instead of the current directory, at DEST
                          inside (default: the same path); with --profile, adds
                          this workspace to the profile's filesystem
  --changes DIR           keep the workspace overlay's upper in DIR/upper (work in DIR/work);
                          with --profile and no --workspace, the current directory
  --changes-size SIZE     size cap of a discarded upper (default 4G)
Filesystem (applied in order):
  --ro-bind SRC DEST      --bind SRC DEST      --dev-bind SRC DEST   (+ -try variants)
  --tmpfs DEST            (preceded by --size SIZE to cap it)
  --proc DEST  --dev DEST  --mqueue DEST  --dir DEST  --symlink TARGET DEST
  --overlay LOWER DEST    overlay with a discarded upper
  --chmod OCTAL DEST  --remount-ro DEST
Image (the system directories from a container image; see docs/images.md):
  --image REF             sha256:DIGEST or NAME@sha256:DIGEST from the image store
                          (a bare NAME only with --allow-unpinned); its Env, WorkingDir,
                          User and Entrypoint/Cmd (when no command is given) are defaults
  --image-store DIR       the store (default $HUTCH_IMAGE_STORE, else the user's)
  --platform OS/ARCH      the platform the image must be for (default the host's)
  --allow-unpinned  --allow-platform-mismatch  --allow-volumes  --allow-secret-env
  --allow-devices         accept what the corresponding check refuses
  --approved FILE         only images on this list may run (sha256:DIGEST or
                          REPOSITORY@sha256:DIGEST a line); any other is refused
  --pull missing|never    missing: pull REF (HOST/REPOSITORY@sha256:DIGEST) from its
                          registry when the store lacks it (default never)
  --insecure-registry H  --registry-auth FILE  --registry-credential SOURCE
                          as for `hutch image pull`
Process:
  --chdir DIR  --setenv KEY VALUE  --unsetenv KEY  --uid N  --gid N  --hostname NAME
                          (a relative --chdir is inside the workspace; --setenv and
                          --unsetenv win over hutch's own proxy variables)
  --private-ids           map 65536 ids (0..65535 inside) to a range of the sandbox's own,
                          for a workload that changes ids (docs/images.md, Id ranges)
  --pass-env NAME         copy NAME from hutch's environment (nothing else of it enters)
  --label KEY=VALUE       shown by `hutch ps`, matched by `hutch kill --label`
  --share-net             use the host's network (default: none)
Egress (network through the allow-list proxy; see docs/egress.md):
  --allow-host PATTERN    allow host, *.x (subdomains), **.x (apex too), [:PORT] (default 443)
  --allow-address A|CIDR  let allowed names reach this private/special address
  --resolve NAME=ADDR     resolve NAME to ADDR instead of asking DNS
  --egress-policy FILE  --egress-profile NAME   named allow-lists (TOML)
  --audit FILE            one JSON line per egress decision
  --egress-mode proxy|transparent   transparent: names resolve in the sandbox and
                          TCP to them is captured, for programs that ignore HTTPS_PROXY
Secrets (the sandbox holds a placeholder; the proxy adds the value; docs/secrets.md):
  --secret name=N,from-env=VAR|from-file=PATH|from-fd=N,host=H[,host=H][,env=VAR]
           [,method=M][,path=P][,inject=replace|bearer|header:NAME|basic:USER]
                          the value is read on the host at launch; env=VAR holds the
                          placeholder inside; each host must be allowed and a gateway's
                          upstream or intercepted
  --gateway name=N,upstream=https://HOST[:PORT][/BASE][,env=VAR][,method=M][,path=P]
           [,max-requests=N][,max-bytes=SIZE]
                          http://127.0.0.1:3128/N inside maps to the upstream; env=VAR
                          gets that URL (e.g. ANTHROPIC_BASE_URL)
  --intercept HOST[:PORT][,method=M][,path=P][,max-requests=N][,max-bytes=SIZE]
                          terminate this allowed host's TLS with the sandbox's own CA
  --timeout DURATION      wall-clock limit (default 5m; `none` disables); exit 124
  --output-limit SIZE     cap stdout+stderr of the workload (excess discarded)
  --cap-add CAP  --cap-drop CAP   capabilities the workload keeps (default none)
  --seccomp NAME|FILE  --landlock-min-abi N
  --memory SIZE  --cpus N  --cgroup-parent DIR
  --pids N|unlimited      process cap (default: 4096, preferred)
  --require-limits        every limit is required, the defaults and a profile's
                          preferred ones too: refused before start where one
                          cannot be enforced (instead of a note and `unenforced`)
  --rlimit NAME=VALUE     e.g. nofile=1024, as=4G (sizes for as data fsize
                          memlock msgqueue rss stack; numbers for the rest)
  --io-max DEVICE:KEY=VALUE[,KEY=VALUE...]   cap a disk (cgroup io.max); keys
                          rbps wbps (sizes, e.g. 10M) riops wiops; repeatable;
                          replaces the profile's limits.io
Terminal (for interactive CLIs; docs/pty.md):
  --pty                   the command's stdin/stdout/stderr are a terminal of the
                          sandbox's own /dev/pts, its controlling terminal; hutch
                          relays it to and from its own stdin/stdout (one stream:
                          stderr comes on stdout). With a terminal as hutch's stdin:
                          raw mode while it runs, its size copied at start and on
                          SIGWINCH. The end of stdin is sent as one ^D
  --pty-size COLSxROWS    the terminal's initial size (default: that of hutch's
                          stdin when it is a terminal, else 80x24); to resize later,
                          give hutch a terminal as stdin, set its size and send
                          hutch SIGWINCH
Reporting:
  --status-file PATH      JSON lines: a start event and the exit report
  --status-fd N           the same lines on the inherited descriptor N (a pipe
                          or file the caller opened; 3 or more)
  --json                  end the status lines with the machine envelope: the
                          exit report, or the typed error (docs/machine.md)
  --result-fd N           only that envelope, on inherited descriptor N, when
                          hutch ends (no start or exit events: cheaper)
  --quiet                 no notices on stderr (changed paths, layers
                          without idmapping, output cut by --output-limit,
                          preferred limits not enforced here); errors
                          still print, but with --json or --result-fd the
                          lines on how the command ended (its error, the
                          timeout) do not: the envelope has them

Exit status: the command's; 128+N when killed by signal N; 124 on timeout;
125 when hutch failed; 126/127 when the command is not executable / not found.";

/// A change to the Spec, applied after the base profile is chosen.
type SpecEdit = Box<dyn FnOnce(&mut Spec) -> Result<()>>;

/// How many values the `hutch run` option `flag` takes, `None` when it is
/// not one (for front ends that forward run options, like `session
/// create`).
pub fn value_count(flag: &str) -> Option<usize> {
    Some(match flag {
        "--bare" | "--share-net" | "--quiet" | "--json" | "--require-limits" | "--private-ids"
        | "--pty" => 0,
        "--ro-bind" | "--bind" | "--dev-bind" | "--ro-bind-try" | "--bind-try"
        | "--dev-bind-try" | "--setenv" | "--symlink" | "--overlay" | "--chmod" => 2,
        "--profile" | "--workspace" | "--changes" | "--changes-size" | "--size" | "--tmpfs"
        | "--proc" | "--dev" | "--mqueue" | "--dir" | "--remount-ro" | "--chdir" | "--unsetenv"
        | "--uid" | "--gid" | "--hostname" | "--timeout" | "--output-limit" | "--memory"
        | "--pids" | "--cpus" | "--io-max" | "--rlimit" | "--seccomp" | "--landlock-min-abi"
        | "--cap-add" | "--cap-drop" | "--allow-host" | "--allow-address" | "--resolve"
        | "--egress-policy" | "--egress-profile" | "--audit" | "--egress-mode"
        | "--status-file" | "--cgroup-parent" | "--pass-env" | "--label" | "--status-fd"
        | "--result-fd" | "--secret" | "--gateway" | "--intercept" | "--agent" | "--prompt"
        | "--pty-size" => 1,
        _ => return None,
    })
}

/// `--workspace DIR[:DEST]`: DEST is what follows the last `:` when it is
/// an absolute path.
fn workspace_arg(cwd: &Path, v: &str) -> (PathBuf, Option<PathBuf>) {
    match v.rsplit_once(':') {
        Some((dir, dest)) if dest.starts_with('/') && !dir.is_empty() => {
            (absolute(cwd, dir), Some(PathBuf::from(dest)))
        }
        _ => (absolute(cwd, v), None),
    }
}

/// How a run reports to the program that started it (docs/machine.md).
#[derive(Debug, Clone, Default)]
pub struct Reporting {
    /// `--json`: the status lines end with the machine envelope.
    pub json: bool,
    /// Where the status lines go (`--status-file`, or `--status-fd N` as
    /// `/proc/self/fd/N`), known as soon as the flag was parsed, so that
    /// a later parse error still reaches it.
    pub status: Option<PathBuf>,
    /// `--result-fd N`: the envelope alone goes here (the launcher writes
    /// no events: it is not a status file).
    pub result: Option<PathBuf>,
}

impl Reporting {
    /// Where the envelope goes, if anywhere.
    fn envelope_path(&self) -> Option<&Path> {
        match (&self.result, self.json, &self.status) {
            (Some(r), _, _) => Some(r),
            (None, true, Some(s)) => Some(s),
            _ => None,
        }
    }

    /// Whether a failure reaches the caller through a descriptor or file
    /// (the session front end then prints no document on stdout).
    pub fn has_stream(&self) -> bool {
        self.status.is_some() || self.result.is_some()
    }

    /// Whether hutch's lines about how the command ended (its error, the
    /// timeout) stay off stderr: `--quiet` with the machine envelope, which
    /// carries them, so that stderr is the workload's alone.
    pub fn ending_lines_off(&self, quiet: bool) -> bool {
        quiet && self.envelope_path().is_some()
    }
}

/// Where the sandbox's workspace comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum WorkspaceFrom {
    /// The flags (`hutch run`): `--workspace DIR` or the current
    /// directory overlaid and made the working directory, `--changes`,
    /// `--bare`.
    #[default]
    Flags,
    /// The caller mounts it and sets the working directory itself (a
    /// session): no workspace overlay and no working directory are added,
    /// so a relative `--chdir` stays relative, for the caller to place in
    /// its workspace; `--workspace`, `--changes` and `--bare` are refused.
    Caller,
}

/// Parse `hutch run` arguments (the unit tests' door).
#[cfg(test)]
fn parse(args: &[OsString]) -> Result<(Spec, RunOptions)> {
    parse_reporting(args, &mut Reporting::default())
}

/// Parse `hutch run` arguments into a Spec and options, also filling `rep`
/// with the reporting flags as they come. The Spec is not validated here:
/// `launch::run` validates it before anything happens.
pub fn parse_reporting(args: &[OsString], rep: &mut Reporting) -> Result<(Spec, RunOptions)> {
    parse_reporting_onto(args, None, WorkspaceFrom::Flags, rep)
}

/// [`parse_onto`] and [`parse_reporting`] in one, the workspace from
/// `workspace_from`.
pub fn parse_reporting_onto(
    args: &[OsString],
    base: Option<Spec>,
    workspace_from: WorkspaceFrom,
    rep: &mut Reporting,
) -> Result<(Spec, RunOptions)> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let mut it = args.iter().map(|a| {
        a.to_str()
            .ok_or_else(|| anyhow!("argument {a:?} is not valid UTF-8"))
    });
    let mut base: Option<Spec> = base;
    let mut bare = false;
    let mut workspace: Option<PathBuf> = None;
    let mut workspace_dest: Option<PathBuf> = None;
    let mut changes: Option<PathBuf> = None;
    let mut pending_size: Option<ByteSize> = None;
    let mut ops: Vec<FsOp> = Vec::new();
    let mut edits: Vec<SpecEdit> = Vec::new();
    let mut opts = RunOptions::default();
    let mut command: Vec<String> = Vec::new();
    let mut egress = Egress::default();
    let mut io_max: Vec<spec::IoMax> = Vec::new();
    let mut image = ImageFlags::default();
    let mut agent: Option<crate::agent::AgentProfile> = None;
    let mut prompt: Option<String> = None;
    let mut require_limits = false;
    let mut pty_size: Option<(u16, u16)> = None;

    while let Some(arg) = it.next() {
        let arg = arg?;
        let mut value = |name: &str| -> Result<String> {
            it.next()
                .ok_or_else(|| anyhow!("{name} needs a value (see `hutch run --help`)"))?
                .map(str::to_string)
        };
        match arg {
            "--" => {
                for rest in it.by_ref() {
                    command.push(rest?.to_string());
                }
                break;
            }
            "--profile" => {
                let file = value(arg)?;
                let path = Path::new(&file);
                let profile = spec::load_profile(path)?;
                // The whole check now, so that a profile's mistake is
                // reported against the file, not against the flags.
                launch::validate(&profile).map_err(|e| e.in_file(path))?;
                base = Some(profile);
            }
            "--agent" => agent = Some(crate::agent::load(&value(arg)?)?),
            "--prompt" => prompt = Some(value(arg)?),
            "--require-limits" => require_limits = true,
            "--bare" | "--workspace" | "--changes" if workspace_from == WorkspaceFrom::Caller => {
                bail!("{arg} does not apply: the caller provides the workspace")
            }
            "--bare" => bare = true,
            "--workspace" => {
                let (dir, dest) = workspace_arg(&cwd, &value(arg)?);
                workspace = Some(dir);
                workspace_dest = dest;
            }
            "--changes" => changes = Some(absolute(&cwd, &value(arg)?)),
            "--changes-size" => {
                let s = size(arg, &value(arg)?)?;
                edits.push(Box::new(move |s2| {
                    s2.limits.upper_size = Some(s);
                    Ok(())
                }));
            }
            "--ro-bind" | "--bind" | "--dev-bind" | "--ro-bind-try" | "--bind-try"
            | "--dev-bind-try" => {
                let src = absolute(&cwd, &value(arg)?);
                let dest = PathBuf::from(value(arg)?);
                let optional = arg.ends_with("-try");
                ops.push(match arg.trim_end_matches("-try") {
                    "--ro-bind" => FsOp::RoBind {
                        src,
                        dest,
                        optional,
                    },
                    "--bind" => FsOp::Bind {
                        src,
                        dest,
                        optional,
                    },
                    _ => FsOp::DevBind {
                        src,
                        dest,
                        optional,
                    },
                });
            }
            "--size" => pending_size = Some(size(arg, &value(arg)?)?),
            "--tmpfs" => ops.push(FsOp::Tmpfs {
                dest: value(arg)?.into(),
                size: pending_size.take(),
                nr_inodes: None,
                mode: Some(0o755),
            }),
            "--proc" => ops.push(FsOp::Proc {
                dest: value(arg)?.into(),
            }),
            "--dev" => ops.push(FsOp::Dev {
                dest: value(arg)?.into(),
                layout: Default::default(),
            }),
            "--mqueue" => ops.push(FsOp::Mqueue {
                dest: value(arg)?.into(),
            }),
            "--dir" => ops.push(FsOp::Dir {
                dest: value(arg)?.into(),
                mode: None,
            }),
            "--symlink" => {
                let target = PathBuf::from(value(arg)?);
                ops.push(FsOp::Symlink {
                    target,
                    dest: value(arg)?.into(),
                });
            }
            "--overlay" => {
                let lower = absolute(&cwd, &value(arg)?);
                ops.push(FsOp::TmpOverlay {
                    lowers: vec![lower],
                    dest: value(arg)?.into(),
                    size: pending_size.take(),
                });
            }
            "--chmod" => {
                let mode = value(arg)?;
                let mode = u32::from_str_radix(&mode, 8)
                    .map_err(|_| anyhow!("--chmod: {mode:?} is not an octal mode"))?;
                ops.push(FsOp::Chmod {
                    mode,
                    dest: value(arg)?.into(),
                });
            }
            "--remount-ro" => ops.push(FsOp::RemountRo {
                dest: value(arg)?.into(),
                recursive: true,
            }),
            "--image" => image.reference = Some(value(arg)?),
            "--image-store" => image.store = Some(absolute(&cwd, &value(arg)?)),
            "--platform" => image.platform = Some(value(arg)?),
            "--allow-unpinned" => image.allow_unpinned = true,
            "--pull" => image.pull.set_policy(&value(arg)?)?,
            "--insecure-registry" => image.pull.insecure.push(value(arg)?),
            "--registry-auth" => image.pull.auth_file = Some(absolute(&cwd, &value(arg)?)),
            "--registry-credential" => {
                image.pull.credential = Some(super::registry_credential::RegistryCredential::parse(
                    &value(arg)?,
                    &cwd,
                )?)
            }
            "--approved" => {
                let file = absolute(&cwd, &value(arg)?);
                image.approved = Some(
                    crate::image::approved::read_file(&file)
                        .with_context(|| "--approved".to_string())?,
                )
            }
            "--allow-platform-mismatch" => image.overrides.allow_platform_mismatch = true,
            "--allow-volumes" => image.overrides.allow_volumes = true,
            "--allow-secret-env" => image.overrides.allow_secret_env = true,
            "--allow-devices" => image.overrides.allow_devices = true,
            "--chdir" => {
                image.chdir = true;
                let dir = PathBuf::from(value(arg)?);
                edits.push(Box::new(move |s| {
                    // Relative: inside the workspace (the cwd it set).
                    s.cwd = Some(match (&s.cwd, dir.is_relative()) {
                        (Some(ws), true) => ws.join(dir),
                        _ => dir,
                    });
                    Ok(())
                }));
            }
            "--pass-env" => {
                let name = value(arg)?;
                let v = std::env::var(&name).map_err(|_| {
                    anyhow!("--pass-env {name}: not set (or not UTF-8) in hutch's environment")
                })?;
                edits.push(Box::new(move |s| {
                    s.env.insert(name, v);
                    Ok(())
                }));
            }
            "--label" => {
                let kv = value(arg)?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| anyhow!("--label: expected KEY=VALUE, got {kv:?}"))?;
                if k.starts_with("hutch.") {
                    bail!("--label: keys under hutch. are hutch's own");
                }
                let (k, v) = (k.to_string(), v.to_string());
                edits.push(Box::new(move |s| {
                    s.labels.insert(k, v);
                    Ok(())
                }));
            }
            "--setenv" => {
                let (k, v) = (value(arg)?, value(arg)?);
                edits.push(Box::new(move |s| {
                    s.unset_env.remove(&k);
                    s.env.insert(k, v);
                    Ok(())
                }));
            }
            "--unsetenv" => {
                let k = value(arg)?;
                // Recorded, not only removed: hutch's own variables (the
                // proxy's) must not come back either.
                edits.push(Box::new(move |s| {
                    s.env.remove(&k);
                    s.unset_env.insert(k);
                    Ok(())
                }));
            }
            "--uid" | "--gid" => {
                let v = value(arg)?;
                let id: u32 = v
                    .parse()
                    .map_err(|_| anyhow!("{arg}: {v:?} is not a numeric id"))?;
                let is_uid = arg == "--uid";
                edits.push(Box::new(move |s| {
                    if is_uid {
                        s.identity.uid = Some(id);
                    } else {
                        s.identity.gid = Some(id);
                    }
                    Ok(())
                }));
            }
            "--private-ids" => edits.push(Box::new(|s| {
                s.identity.id_range = Some(crate::spec::IdRange::Private);
                Ok(())
            })),
            "--hostname" => {
                let h = value(arg)?;
                edits.push(Box::new(move |s| {
                    s.identity.hostname = Some(h);
                    Ok(())
                }));
            }
            "--share-net" => edits.push(Box::new(|s| {
                s.network = Network::Host;
                s.namespaces.net = false;
                Ok(())
            })),
            "--timeout" => {
                let v = value(arg)?;
                let d = if v == "none" || v == "0" {
                    None
                } else {
                    Some(Duration::parse(&v).map_err(|e| anyhow!("--timeout: {e}"))?)
                };
                edits.push(Box::new(move |s| {
                    s.limits.wall_clock = d;
                    Ok(())
                }));
            }
            "--output-limit" => {
                let b = size(arg, &value(arg)?)?;
                edits.push(Box::new(move |s| {
                    s.limits.output_bytes = Some(b);
                    Ok(())
                }));
            }
            "--memory" => {
                let b = size(arg, &value(arg)?)?;
                edits.push(Box::new(move |s| {
                    s.limits.memory = Some(Limit::Required(b));
                    Ok(())
                }));
            }
            "--pids" => {
                let v = value(arg)?;
                // `unlimited` lifts the default profile's cap.
                let n: Option<u64> =
                    match v.as_str() {
                        "unlimited" | "none" => None,
                        _ => Some(v.parse().map_err(|_| {
                            anyhow!("--pids: {v:?} is not a number (or `unlimited`)")
                        })?),
                    };
                edits.push(Box::new(move |s| {
                    s.limits.pids = n.map(Limit::Required);
                    Ok(())
                }));
            }
            "--cpus" => {
                let v = value(arg)?;
                let n: f64 = v
                    .parse()
                    .map_err(|_| anyhow!("--cpus: {v:?} is not a number"))?;
                edits.push(Box::new(move |s| {
                    s.limits.cpus = Some(Limit::Required(n));
                    Ok(())
                }));
            }
            "--io-max" => {
                let v = value(arg)?;
                io_max
                    .push(crate::cgroup::io::parse_flag(&v).map_err(|e| anyhow!("--io-max: {e}"))?);
            }
            "--rlimit" => {
                let v = value(arg)?;
                let (name, n) = v
                    .split_once('=')
                    .ok_or_else(|| anyhow!("--rlimit: expected NAME=VALUE, got {v:?}"))?;
                // Sizes (as, fsize, ...) take suffixes; counts stay numbers.
                let n = spec::parse_rlimit(name, n).map_err(|e| anyhow!("--rlimit {name}: {e}"))?;
                let name = name.to_string();
                edits.push(Box::new(move |s| {
                    s.limits.rlimits.insert(name, n);
                    Ok(())
                }));
            }
            "--seccomp" => {
                let v = value(arg)?;
                edits.push(Box::new(move |s| {
                    s.security.seccomp = v;
                    Ok(())
                }));
            }
            "--landlock-min-abi" => {
                let v = value(arg)?;
                let n: u32 = v
                    .parse()
                    .map_err(|_| anyhow!("--landlock-min-abi: {v:?} is not a number"))?;
                edits.push(Box::new(move |s| {
                    s.security.landlock.min_abi = Some(n);
                    Ok(())
                }));
            }
            "--cap-add" => {
                let v = value(arg)?;
                edits.push(Box::new(move |s| {
                    s.security.cap_add.push(v);
                    Ok(())
                }));
            }
            "--cap-drop" => {
                let v = value(arg)?;
                edits.push(Box::new(move |s| {
                    drop_cap(&mut s.security.cap_add, &v)?;
                    Ok(())
                }));
            }
            "--allow-host" => egress.extra.allow.push(value(arg)?),
            "--gateway" => egress
                .extra
                .gateways
                .push(super::secret_flags::gateway(&value(arg)?)?),
            "--intercept" => egress
                .extra
                .intercept
                .push(super::secret_flags::intercept(&value(arg)?)?),
            "--secret" => {
                let secret = super::secret_flags::secret(&value(arg)?)?;
                edits.push(Box::new(move |s| {
                    s.secrets.push(secret);
                    Ok(())
                }));
            }
            "--allow-address" => egress.extra.allow_address.push(value(arg)?),
            "--resolve" => {
                let v = value(arg)?;
                let (n, a) = v
                    .split_once('=')
                    .ok_or_else(|| anyhow!("--resolve: expected NAME=ADDR, got {v:?}"))?;
                egress.extra.resolve.insert(n.to_string(), a.to_string());
            }
            "--egress-policy" => egress.file = Some(absolute(&cwd, &value(arg)?)),
            "--egress-profile" => egress.profile = Some(value(arg)?),
            "--audit" => egress.extra.audit = Some(absolute(&cwd, &value(arg)?)),
            "--egress-mode" => {
                let v = value(arg)?;
                egress.mode = Some(crate::spec::EgressMode::parse(&v).ok_or_else(|| {
                    anyhow!("--egress-mode: expected proxy or transparent, got {v:?}")
                })?);
            }
            "--status-file" => {
                let path = absolute(&cwd, &value(arg)?);
                rep.status = Some(path.clone());
                opts.status_file = Some(path);
            }
            "--status-fd" => {
                let path = status_fd_path(&value(arg)?)?;
                rep.status = Some(path.clone());
                opts.status_file = Some(path);
            }
            "--result-fd" => rep.result = Some(status_fd_path(&value(arg)?)?),
            "--json" => rep.json = true,
            "--quiet" => opts.quiet = true,
            "--pty" => {
                opts.terminal.get_or_insert_with(Default::default);
            }
            "--pty-size" => pty_size = Some(super::pty::parse_size(&value(arg)?)?),
            flag if flag.starts_with('-') => {
                bail!("unknown option {flag} (see `hutch run --help`)")
            }
            first => {
                command.push(first.to_string());
                for rest in it.by_ref() {
                    command.push(rest?.to_string());
                }
                break;
            }
        }
    }
    if pending_size.is_some() {
        bail!("--size must come right before the --tmpfs or --overlay it caps");
    }
    if let Some(size) = pty_size {
        let Some(t) = opts.terminal.as_mut() else {
            bail!("--pty-size needs --pty (the size of the workload's terminal)");
        };
        t.size = Some(size);
    }
    if rep.json && rep.status.is_none() && rep.result.is_none() {
        bail!(
            "--json needs --status-fd N, --status-file FILE or --result-fd N (stdout carries the command's output)"
        );
    }

    let default_base = base.is_none() && !bare;
    let mut spec = match (base, bare) {
        (Some(_), true) => bail!("--bare and --profile exclude each other"),
        // A profile brings no workspace of its own; `--workspace` or
        // `--changes` add the same overlay the default profile gets.
        (Some(mut profile), false) => {
            if workspace.is_some() || changes.is_some() {
                let dir = workspace.unwrap_or_else(|| cwd.clone());
                add_workspace(&mut profile, &dir, workspace_dest, changes.as_deref())?;
            }
            profile
        }
        (None, true) => {
            if workspace.is_some() || changes.is_some() {
                bail!(
                    "--bare has no workspace; add --overlay LOWER DEST instead of --workspace/--changes"
                );
            }
            Spec::default()
        }
        (None, false) if workspace_from == WorkspaceFrom::Caller => spec::default_profile(),
        (None, false) => {
            let dir = workspace.unwrap_or_else(|| cwd.clone());
            let mut s = spec::default_profile();
            add_workspace(&mut s, &dir, workspace_dest, changes.as_deref())?;
            s
        }
    };
    // The agent's needs first: the caller's own flags below override them.
    if let Some(agent) = &agent {
        agent.apply_to(&mut spec);
    }
    spec.fs.extend(ops);
    for edit in edits {
        edit(&mut spec)?;
    }
    image.apply(&mut spec, default_base)?;
    if !io_max.is_empty() {
        spec.limits.io = Some(Limit::Required(io_max));
    }
    egress.apply(&mut spec)?;
    if let Some(agent) = &agent {
        agent.yield_to_caller(&mut spec);
    }
    if let Some(prompt) = prompt {
        let Some(agent) = &agent else {
            bail!("--prompt needs --agent NAME (its profile says how the CLI takes a prompt)");
        };
        if prompt.is_empty() {
            bail!("--prompt is empty: give the agent's task");
        }
        // The words after -- are the CLI's own options here.
        spec.command = agent.prompt_command(&prompt, &command)?;
    } else if !command.is_empty() {
        // A command on the line wins; a profile may bring its own.
        spec.command = command;
    }
    if spec.command.is_empty() && spec.image.is_none() {
        bail!("no command given: hutch run [OPTIONS] -- COMMAND [ARGS...]");
    }
    if require_limits {
        let l = &mut spec.limits;
        require(&mut l.memory);
        require(&mut l.pids);
        require(&mut l.cpus);
        require(&mut l.io);
    }
    // Validation happens once, in the launcher's prepare step.
    Ok((spec, opts))
}

/// `--require-limits`: a preferred limit becomes required (fail closed).
fn require<T: Clone>(limit: &mut Option<Limit<T>>) {
    if let Some(l) = limit {
        *l = Limit::Required(l.get().clone());
    }
}

/// Image flags: `--image` makes the image the system layer
/// ([`spec::use_image`]); the others set options of the Spec's image,
/// whether `--image` or the profile named it.
#[derive(Default)]
struct ImageFlags {
    reference: Option<String>,
    store: Option<PathBuf>,
    platform: Option<String>,
    allow_unpinned: bool,
    overrides: spec::ImageOverrides,
    chdir: bool,
    /// `--approved FILE`'s entries.
    approved: Option<Vec<String>>,
    /// `--pull missing`, `--insecure-registry`, `--registry-auth`.
    pull: super::image_pull::PullFlags,
}

impl ImageFlags {
    fn apply(self, spec: &mut Spec, default_base: bool) -> Result<()> {
        let any_option = self.store.is_some()
            || self.platform.is_some()
            || self.allow_unpinned
            || self.approved.is_some()
            || self.pull.is_set()
            || self.overrides != spec::ImageOverrides::default();
        if let Some(reference) = &self.reference {
            let mut r = spec::ImageRef::new(reference);
            // The workspace stays the working directory of images without
            // a WorkingDir; --chdir wins over both.
            r.use_working_dir = default_base && !self.chdir;
            spec::use_image(spec, r);
        }
        let Some(r) = spec.image.as_mut() else {
            if any_option {
                bail!("the image options need --image REF (or a profile with an image)");
            }
            return Ok(());
        };
        if self.store.is_some() {
            r.store = self.store;
        }
        if self.platform.is_some() {
            r.platform = self.platform;
        }
        r.allow_unpinned |= self.allow_unpinned;
        if self.approved.is_some() {
            r.approved = self.approved;
        }
        let (o, f) = (&mut r.overrides, self.overrides);
        o.allow_platform_mismatch |= f.allow_platform_mismatch;
        o.allow_volumes |= f.allow_volumes;
        o.allow_secret_env |= f.allow_secret_env;
        o.allow_devices |= f.allow_devices;
        if self.chdir {
            r.use_working_dir = false;
        }
        let mut pull = self.pull;
        pull.profile = spec.registry_credentials.clone();
        let Some(r) = spec.image.as_mut() else {
            return Ok(());
        };
        pull.pull_missing(r)
    }
}

/// Egress flags: any of them switches the network to the proxy mode.
#[derive(Default)]
struct Egress {
    file: Option<PathBuf>,
    profile: Option<String>,
    extra: crate::spec::ProxyPolicy,
    mode: Option<crate::spec::EgressMode>,
}

impl Egress {
    fn apply(self, spec: &mut Spec) -> Result<()> {
        let e = &self.extra;
        let asked = self.file.is_some()
            || self.profile.is_some()
            || !e.allow.is_empty()
            || !e.allow_address.is_empty()
            || !e.resolve.is_empty()
            || !e.gateways.is_empty()
            || !e.intercept.is_empty()
            || e.audit.is_some()
            || self.mode.is_some();
        if !asked {
            return Ok(());
        }
        let mut p = match (&self.file, &spec.network) {
            (Some(f), _) => {
                let (policy, secrets) = crate::net::load_policy_profile(f, self.profile.as_deref())
                    .map_err(|e| match e {
                        crate::net::NetError::NoProfileChosen { .. } => {
                            anyhow!("{e}, with --egress-profile NAME")
                        }
                        e => e.into(),
                    })?;
                // The profile's secrets (a backend's key's source with its
                // gateway) join the command's own.
                spec.secrets.extend(secrets);
                policy
            }
            (None, _) if self.profile.is_some() => {
                bail!("--egress-profile needs --egress-policy FILE")
            }
            (None, Network::Proxy(p)) => p.clone(),
            (None, Network::Host) => bail!("--share-net and egress options exclude each other"),
            (None, Network::None) => crate::spec::ProxyPolicy::default(),
        };
        if matches!(spec.network, Network::Host) && !spec.namespaces.net {
            bail!("--share-net and egress options exclude each other");
        }
        p.allow.extend(self.extra.allow);
        p.allow_address.extend(self.extra.allow_address);
        p.resolve.extend(self.extra.resolve);
        p.gateways.extend(self.extra.gateways);
        p.intercept.extend(self.extra.intercept);
        if self.extra.audit.is_some() {
            p.audit = self.extra.audit;
        }
        if let Some(mode) = self.mode {
            p.egress_mode = mode;
        }
        spec.network = Network::Proxy(p);
        spec.namespaces.net = true;
        Ok(())
    }
}

/// Overlay the workspace `dir` at `dest` (default: the same path), its
/// upper kept in `changes` when given, and make it the working directory.
fn add_workspace(
    spec: &mut Spec,
    dir: &Path,
    dest: Option<PathBuf>,
    changes: Option<&Path>,
) -> Result<()> {
    if dir == Path::new("/") {
        bail!(
            "the workspace would be / ; run hutch from a project directory, pass --workspace DIR, or use --bare"
        );
    }
    let mut overlay = spec::workspace_overlay(dir, changes);
    let dest = dest.unwrap_or_else(|| dir.to_path_buf());
    set_dest(&mut overlay, dest.clone());
    spec.fs.push(overlay);
    spec.cwd = Some(dest);
    Ok(())
}

/// Mount the workspace overlay at `dest`.
fn set_dest(op: &mut FsOp, to: PathBuf) {
    match op {
        FsOp::Overlay { dest, .. } | FsOp::TmpOverlay { dest, .. } => *dest = to,
        _ => {}
    }
}

fn drop_cap(list: &mut Vec<String>, cap: &str) -> Result<()> {
    if cap.eq_ignore_ascii_case("all") {
        list.clear();
        return Ok(());
    }
    let target = crate::confine::caps::parse_cap_list(&[cap.to_string()])
        .map_err(|e| anyhow!("--cap-drop: {e}"))?;
    let mut kept =
        crate::confine::caps::parse_cap_list(list).map_err(|e| anyhow!("--cap-add: {e}"))?;
    kept.retain(|c| !target.contains(c));
    let mut names: Vec<String> = kept.iter().map(|c| c.to_string()).collect();
    names.sort();
    *list = names;
    Ok(())
}

fn size(flag: &str, v: &str) -> Result<ByteSize> {
    ByteSize::parse(v).map_err(|e| anyhow!("{flag}: {e}"))
}

fn absolute(cwd: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// `hutch run`: returns the exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    if args
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--help" || a == "-h")
    {
        println!("{USAGE}");
        return 0;
    }
    let mut rep = Reporting::default();
    let (spec, opts) = match parse_reporting(&args, &mut rep) {
        Ok(v) => v,
        Err(e) => {
            let what = with_flags(&format!("{e:#}"));
            eprintln!("hutch: {what}");
            let mut m = MachineError::classify_or(&e, ErrorKind::Usage);
            m.what = what;
            report_failure(&rep, "run", &m);
            return 125;
        }
    };
    run_reporting(&spec, &opts, &rep)
}

/// The path that names inherited descriptor `v` (`--status-fd`): the
/// launcher opens it like a status file. It must be open, and not stdio.
fn status_fd_path(v: &str) -> Result<PathBuf> {
    let fd: i32 = v
        .parse()
        .map_err(|_| anyhow!("--status-fd: {v:?} is not a descriptor number"))?;
    if fd < 3 {
        bail!("--status-fd: {fd} is stdin, stdout or stderr; pass a descriptor of 3 or more");
    }
    // Adopted and released again: only the check that it is open matters,
    // the descriptor stays the caller's until hutch exits.
    match crate::sys::adopt_inherited_fd(fd) {
        Some(owned) => {
            let _ = std::os::fd::IntoRawFd::into_raw_fd(owned);
        }
        None => bail!("--status-fd: descriptor {fd} is not open in hutch"),
    }
    Ok(PathBuf::from(format!("/proc/self/fd/{fd}")))
}

/// Append one line to the status stream (a pipe, or a file the launcher
/// already wrote).
fn append_status(path: &Path, line: &str) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(path) {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// A run that never launched: the status stream still ends with an exit
/// event (and with `--json` the error envelope of `verb`).
pub fn report_failure(rep: &Reporting, verb: &str, error: &MachineError) {
    if let Some(path) = &rep.status {
        let exit = serde_json::json!({"event": "exit", "status": 125, "reason": "setup-failed", "error": error.what});
        let mut text = format!("{exit}\n");
        if rep.json && rep.result.is_none() {
            text.push_str(&machine::error_line(verb, error));
            text.push('\n');
        }
        // The stream may be a file: replace what an earlier writer left.
        let _ = std::fs::write(path, text);
    }
    if let Some(path) = &rep.result {
        append_status(path, &machine::error_line(verb, error));
    }
}

/// The `--json` envelope of a finished run: the exit report, or, when
/// hutch failed to set the sandbox up (125), the typed error with the
/// report as the partial result.
pub fn report_envelope(
    rep: &Reporting,
    verb: &str,
    result: &impl serde::Serialize,
    report: &launch::ExitReport,
) {
    let Some(path) = rep.envelope_path() else {
        return;
    };
    let line = match (&report.reason, &report.error) {
        (launch::Outcome::SetupFailed, Some(e)) => {
            machine::partial_line(verb, result, &MachineError::from_setup_line(e))
        }
        _ => machine::ok_line(verb, result),
    };
    append_status(path, &line);
}

/// [`run_spec`], reporting as `rep` asks.
pub fn run_reporting(spec: &Spec, opts: &RunOptions, rep: &Reporting) -> i32 {
    match launch::run(spec, opts) {
        Ok(report) => {
            report_envelope(rep, "run", &report, &report);
            if rep.ending_lines_off(opts.quiet) {
                return report.status;
            }
            if let Some(e) = &report.error {
                eprintln!("hutch: {e}");
            }
            if report.reason == launch::Outcome::TimedOut {
                let limit = spec
                    .limits
                    .wall_clock
                    .map(|d| d.to_string())
                    .unwrap_or_default();
                eprintln!(
                    "hutch: timed out after {limit}; every process of the sandbox was killed"
                );
            }
            if report.output_truncated && !opts.quiet {
                eprintln!(
                    "hutch: output limit reached; {} of {} bytes relayed, the rest discarded",
                    report.output_kept, report.output_bytes
                );
            }
            if report.output_undelivered > 0 && !opts.quiet {
                eprintln!(
                    "hutch: {} bytes of output were not delivered: the reader did not take them before the sandbox's time was over",
                    report.output_undelivered
                );
            }
            report.status
        }
        Err(e) => {
            let what = with_flags(&e.to_string());
            eprintln!("hutch: {what}");
            let mut m = MachineError::classify(&anyhow::Error::new(e));
            m.what = what;
            report_failure(rep, "run", &m);
            125
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    /// `--require-limits` makes the default (preferred) limits and the
    /// agent profile's preferred memory cap required; without it they stay
    /// preferred.
    #[test]
    fn require_limits_makes_every_limit_required() {
        let preferred = parse(&args(&["--agent", "codex", "--", "true"])).unwrap().0;
        let m = preferred.limits.memory.as_ref().unwrap();
        assert!(!m.is_required(), "{m:?}");
        let strict = parse(&args(&["--agent", "codex", "--require-limits", "--", "true"]))
            .unwrap()
            .0;
        let l = &strict.limits;
        assert_eq!(l.memory, Some(Limit::Required(m.value())));
        assert!(l.pids.as_ref().is_some_and(|p| p.is_required()), "{l:?}");
    }

    /// `--prompt` builds the command from the agent profile; it needs one.
    #[test]
    fn prompt_builds_the_agents_command() {
        let spec = parse(&args(&["--agent", "claude-code", "--prompt", "-x $(id)"]))
            .unwrap()
            .0;
        assert_eq!(spec.command, ["claude", "-p", "--", "-x $(id)"]);
        let spec = parse(&args(&["--agent", "codex", "--prompt", "p", "--", "-m", "o3"]))
            .unwrap()
            .0;
        assert_eq!(
            spec.command,
            ["codex", "-m", "o3", "exec", "--skip-git-repo-check", "--", "p"]
        );
        let err = parse(&args(&["--prompt", "p"])).unwrap_err().to_string();
        assert!(err.contains("--prompt needs --agent"), "{err}");
    }

    #[test]
    fn a_caller_workspace_adds_no_overlay_and_keeps_chdir_relative() {
        let from_flags = parse(&args(&["--workspace", "/srv/w", "--", "true"]))
            .unwrap()
            .0;
        let (spec, _) = parse_reporting_onto(
            &args(&["--chdir", "src", "--", "true"]),
            None,
            WorkspaceFrom::Caller,
            &mut Reporting::default(),
        )
        .unwrap();
        // The flags' Spec less its workspace overlay, which comes last of
        // the profile's operations.
        assert_eq!(spec.fs, from_flags.fs[..from_flags.fs.len() - 1]);
        assert_eq!(spec.cwd, Some(PathBuf::from("src")));
        for flag in [
            &["--workspace", "/srv/w"][..],
            &["--changes", "/c"],
            &["--bare"],
        ] {
            let mut line = args(flag);
            line.extend(args(&["--", "true"]));
            let e = parse_reporting_onto(
                &line,
                None,
                WorkspaceFrom::Caller,
                &mut Reporting::default(),
            )
            .unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "{} does not apply: the caller provides the workspace",
                    flag[0]
                )
            );
        }
    }
}
