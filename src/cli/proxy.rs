//! `hutch proxy`: the egress policy engine on its own, for users who
//! sandbox with something else.
//!
//! ```text
//! hutch proxy [--policy FILE [--profile NAME]] [--allow-host H]... [--deny-host H]...
//!             [--allow-address A|CIDR]... [--resolve NAME=ADDR]... [--plain-http]
//!             [--max-tunnels N] [--max-connections N] [--max-bytes SIZE] [--max-audit-bytes SIZE]
//!             [--idle-timeout DUR] [--total-timeout DUR] [--handshake-timeout DUR]
//!             [--connect-timeout DUR] [--max-header-bytes SIZE]
//!             [--audit FILE] [--sandbox-id ID] --listen unix:PATH|tcp:ADDR ...
//! ```
//! Runs until SIGINT or SIGTERM. Prints `hutch proxy: listening on ...` on
//! stderr once every door accepts connections.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use nix::sys::signal::{SigSet, Signal};

use crate::audit::AuditSink;
use crate::net::{self, Door, Policy};
use crate::spec::{ByteSize, Duration, ProxyPolicy};

const USAGE: &str = "usage: hutch proxy [--policy FILE [--profile NAME]] [--allow-host H]... \
[--deny-host H]... [--allow-address A]... [--resolve NAME=ADDR]... [--plain-http] \
[--max-tunnels N] [--max-connections N] [--max-bytes SIZE] [--max-audit-bytes SIZE] [--idle-timeout DUR] \
[--total-timeout DUR] [--handshake-timeout DUR] [--connect-timeout DUR] \
[--max-header-bytes SIZE] [--audit FILE] [--sandbox-id ID] --listen unix:PATH|tcp:ADDR ...";

/// Entry point of `hutch proxy`; returns the exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    match run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hutch proxy: {e:#}");
            125
        }
    }
}

#[derive(Default)]
struct Options {
    policy_file: Option<PathBuf>,
    profile: Option<String>,
    extra: ProxyPolicy,
    listen: Vec<String>,
    audit: Option<PathBuf>,
    sandbox_id: Option<String>,
}

fn parse(args: Vec<OsString>) -> anyhow::Result<Options> {
    let mut o = Options::default();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let arg = arg
            .into_string()
            .map_err(|a| anyhow!("argument {a:?} is not UTF-8"))?;
        if arg == "-h" || arg == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        if arg == "--plain-http" {
            o.extra.plain_http = true;
            continue;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = || -> anyhow::Result<String> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => it
                    .next()
                    .ok_or_else(|| anyhow!("{flag} needs a value"))?
                    .into_string()
                    .map_err(|a| anyhow!("value {a:?} of {flag} is not UTF-8")),
            }
        };
        let l = &mut o.extra.limits;
        match flag.as_str() {
            "--policy" => o.policy_file = Some(value()?.into()),
            "--profile" => o.profile = Some(value()?),
            "--allow-host" => o.extra.allow.push(value()?),
            "--deny-host" => o.extra.deny.push(value()?),
            "--allow-address" => o.extra.allow_address.push(value()?),
            "--resolve" => {
                let v = value()?;
                let (n, a) = v
                    .split_once('=')
                    .ok_or_else(|| anyhow!("--resolve wants NAME=ADDR, got {v:?}"))?;
                if o.extra.resolve.insert(n.into(), a.into()).is_some() {
                    bail!("--resolve {n} given twice");
                }
            }
            "--listen" => o.listen.push(value()?),
            "--audit" => o.audit = Some(value()?.into()),
            "--sandbox-id" => o.sandbox_id = Some(value()?),
            "--max-tunnels" => l.max_tunnels = Some(number(&flag, &value()?)?),
            "--max-connections" => l.max_connections = Some(number(&flag, &value()?)?),
            "--max-bytes" => l.max_bytes = Some(size(&flag, &value()?)?),
            "--max-audit-bytes" => l.max_audit_bytes = Some(size(&flag, &value()?)?),
            "--max-header-bytes" => l.max_header_bytes = Some(size(&flag, &value()?)?),
            "--idle-timeout" => l.idle_timeout = Some(duration(&flag, &value()?)?),
            "--total-timeout" => l.total_timeout = Some(duration(&flag, &value()?)?),
            "--handshake-timeout" => l.handshake_timeout = Some(duration(&flag, &value()?)?),
            "--connect-timeout" => l.connect_timeout = Some(duration(&flag, &value()?)?),
            _ => bail!("unknown option {arg:?}\n{USAGE}"),
        }
    }
    if o.listen.is_empty() {
        bail!("--listen unix:PATH or tcp:ADDR is required\n{USAGE}");
    }
    Ok(o)
}

fn number(flag: &str, v: &str) -> anyhow::Result<u64> {
    v.parse().with_context(|| format!("{flag} {v:?}"))
}
fn size(flag: &str, v: &str) -> anyhow::Result<ByteSize> {
    ByteSize::parse(v).map_err(|e| anyhow!("{flag} {v:?}: {e}"))
}
fn duration(flag: &str, v: &str) -> anyhow::Result<Duration> {
    Duration::parse(v).map_err(|e| anyhow!("{flag} {v:?}: {e}"))
}

/// Merge the command-line additions into the file's profile (if any).
fn policy_of(o: &Options) -> anyhow::Result<ProxyPolicy> {
    let mut p = match &o.policy_file {
        Some(f) => net::load_policy_file(f, o.profile.as_deref()).map_err(|e| match e {
            net::NetError::NoProfileChosen { .. } => anyhow!("{e}, with --profile NAME"),
            e => e.into(),
        })?,
        None if o.profile.is_some() => bail!("--profile needs --policy FILE"),
        None => ProxyPolicy::default(),
    };
    let e = &o.extra;
    p.allow.extend(e.allow.iter().cloned());
    p.deny.extend(e.deny.iter().cloned());
    p.allow_address.extend(e.allow_address.iter().cloned());
    for (k, v) in &e.resolve {
        p.resolve.insert(k.clone(), v.clone());
    }
    p.plain_http |= e.plain_http;
    let (l, x) = (&mut p.limits, &e.limits);
    l.max_tunnels = x.max_tunnels.or(l.max_tunnels);
    l.max_connections = x.max_connections.or(l.max_connections);
    l.max_bytes = x.max_bytes.or(l.max_bytes);
    l.max_audit_bytes = x.max_audit_bytes.or(l.max_audit_bytes);
    l.max_header_bytes = x.max_header_bytes.or(l.max_header_bytes);
    l.idle_timeout = x.idle_timeout.or(l.idle_timeout);
    l.total_timeout = x.total_timeout.or(l.total_timeout);
    l.handshake_timeout = x.handshake_timeout.or(l.handshake_timeout);
    l.connect_timeout = x.connect_timeout.or(l.connect_timeout);
    if o.audit.is_some() {
        p.audit = o.audit.clone();
    }
    Ok(p)
}

fn run(args: Vec<OsString>) -> anyhow::Result<()> {
    let o = parse(args)?;
    let spec_policy = policy_of(&o)?;
    let policy = Policy::from_spec(&spec_policy)?;
    if !spec_policy.intercept.is_empty() {
        // Interception needs its CA in the client's trust, which only a
        // sandbox's own proxy places (docs/egress.md).
        bail!(
            "hutch proxy: the policy lists hosts to intercept (`intercept`), which only the proxy of a sandbox started by hutch can do (it places its CA in the sandbox); remove `intercept` from this profile"
        );
    }
    if spec_policy.allow.is_empty() {
        eprintln!("hutch proxy: warning: no allow rules, every request will be denied");
    }
    let audit = match &spec_policy.audit {
        Some(path) => Some(AuditSink::open_capped(
            path,
            Some(policy.limits().max_audit_bytes),
        )?),
        None => None,
    };
    let mut doors: Vec<(Door, OwnedFd)> = Vec::new();
    let mut shown = Vec::new();
    let mut sockets = Vec::new();
    for l in &o.listen {
        if let Some(path) = l.strip_prefix("unix:") {
            let listener = std::os::unix::net::UnixListener::bind(path)
                .with_context(|| format!("cannot listen on unix socket {path}"))?;
            sockets.push(PathBuf::from(path));
            shown.push(format!("unix:{path}"));
            doors.push((Door::Unix, listener.into()));
        } else if let Some(addr) = l.strip_prefix("tcp:") {
            let listener = std::net::TcpListener::bind(addr)
                .with_context(|| format!("cannot listen on tcp {addr}"))?;
            shown.push(format!("tcp:{}", listener.local_addr()?));
            doors.push((Door::Tcp, listener.into()));
        } else {
            bail!("--listen {l:?}: expected unix:PATH or tcp:ADDR");
        }
    }
    // Block the stop signals before the proxy thread exists so that only
    // sigwait below receives them.
    let mut stop = SigSet::empty();
    stop.add(Signal::SIGINT);
    stop.add(Signal::SIGTERM);
    stop.thread_block().context("cannot block SIGINT/SIGTERM")?;
    let sandbox_id = o
        .sandbox_id
        .clone()
        .unwrap_or_else(|| format!("proxy-{}", std::process::id()));
    let handle = net::spawn(policy, doors, sandbox_id, audit, net::Brokering::default())?;
    eprintln!("hutch proxy: listening on {}", shown.join(" "));
    let sig = stop.wait().context("sigwait")?;
    eprintln!("hutch proxy: {sig:?}, stopping");
    handle.shutdown();
    for s in sockets {
        let _ = std::fs::remove_file(s);
    }
    Ok(())
}
