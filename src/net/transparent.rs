//! `transparent` egress, the supervisor's half: the sandbox's resolver
//! (a UDP socket on 127.0.0.1:53 inside the sandbox, made there and handed
//! over like the TCP door) and the captured connections (listeners on
//! every port the policy can allow; a `local` route for 198.18.0.0/15 via
//! `lo` delivers a connection to any synthetic address to them, and
//! `getsockname()` on the accepted socket is its original destination).
//!
//! A captured connection's address maps back to the name the resolver
//! handed it out for, and that name and the port are decided by the same
//! policy as a CONNECT ([`super::policy::Policy::check`]: deny wins), then
//! dialled the same way ([`super::dial`]: the vetted address, never
//! re-resolved, special ranges refused). Whatever is refused is reset:
//! there is no HTTP to answer in.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use tokio::io::unix::AsyncFd;
use tokio::net::{TcpStream, UdpSocket};

use super::dial::dial;
use super::dns::{self, Rcode};
use super::doors::Door;
use super::host::{CanonicalHost, canonicalize};
use super::names::Assigned;
use super::policy::Verdict;
use super::record::{Decision, DirMeter, Outcome};
use super::sni;
use super::state::State;
use super::tunnel::pump;

/// Answer the sandbox's DNS queries until the task is cancelled.
pub(super) async fn serve_resolver(state: Arc<State>, sock: UdpSocket) {
    let mut buf = vec![0u8; dns::MAX_QUERY];
    loop {
        let (n, peer) = match sock.recv_from(&mut buf).await {
            Ok(x) => x,
            Err(_) => {
                // Out of memory or a transient error: back off, go on.
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        if let Some(out) = resolve_packet(&state, &buf[..n]) {
            let _ = sock.send_to(&out, peer).await;
        }
    }
}

/// The answer to one packet (none for what is not a query), with its
/// audit line: every refusal, and each name's first address.
pub(crate) fn resolve_packet(state: &Arc<State>, pkt: &[u8]) -> Option<Vec<u8>> {
    let q = match dns::parse_query(pkt) {
        Ok(q) => q,
        Err(r) => {
            let dec = Decision::new(state.clone(), Door::Resolver, "DNS".into());
            dec.finish_with(Outcome::Invalid, 0, format!("{:?}: {}", r.rcode, r.why));
            return dns::refusal(&r);
        }
    };
    let audit = |outcome, rule: Option<String>, addr: Option<String>, why: String| {
        let dec = Decision::new(state.clone(), Door::Resolver, "DNS".into());
        dec.with(|f| {
            f.host = Some(q.name.clone());
            f.rule = rule;
            f.address = addr;
        });
        dec.finish_with(outcome, 0, why);
    };
    let host = match canonicalize(&q.name) {
        Ok(h @ CanonicalHost::Name(_)) => h,
        Ok(CanonicalHost::Ip(_)) | Err(_) => {
            audit(
                Outcome::Invalid,
                None,
                None,
                "NXDOMAIN: not a host name".into(),
            );
            return Some(dns::answer(&q, None, Rcode::NxDomain));
        }
    };
    let name = host.to_string();
    match state.policy.check_name(&host) {
        Verdict::Deny(why) => {
            audit(
                Outcome::Deny,
                Some(why.clone()),
                None,
                format!("NXDOMAIN: {why}"),
            );
            Some(dns::answer(&q, None, Rcode::NxDomain))
        }
        Verdict::Allow(rule) => match state.names.address_for(&name) {
            Assigned::Known(a) => Some(dns::answer(&q, Some(a), Rcode::NoError)),
            Assigned::New(a) => {
                let dec = Decision::new(state.clone(), Door::Resolver, "DNS".into());
                dec.with(|f| {
                    f.host = Some(name.clone());
                    f.rule = Some(rule);
                    f.destination = Some(a.to_string());
                    f.verdict = Some(Outcome::Allow);
                });
                Some(dns::answer(&q, Some(a), Rcode::NoError))
            }
            Assigned::Full => {
                let why = format!(
                    "REFUSED: the sandbox resolved {} names already",
                    super::names::MAX_NAMES
                );
                audit(Outcome::Limit, Some(rule), None, why);
                Some(dns::answer(&q, None, Rcode::Refused))
            }
        },
    }
}

/// Audit each connection attempt to a synthetic address on a port no
/// listener captures (the kernel refuses it with a reset, and the sandbox
/// sees `ECONNREFUSED`): every refusal has its line, as in `proxy` mode.
/// Until the task is cancelled.
pub(super) async fn watch_refusals(state: Arc<State>, watch: Arc<RefusalsWatch>) {
    loop {
        let Ok(mut ready) = watch.sock.readable().await else {
            return;
        };
        match drain_refusals(&state, &watch) {
            Ok(()) => ready.clear_ready(),
            // Out of memory or a transient error: back off, go on.
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
        }
    }
}

/// Audit every attempt queued on the refusals watch, until none is left
/// (Ok) or reading fails. Also run once more when the proxy stops: the
/// last attempts of a workload that has just ended are still queued.
pub(super) fn drain_refusals(
    state: &Arc<State>,
    watch: &RefusalsWatch,
) -> Result<(), crate::sys::Errno> {
    let captured = super::doors::transparent_ports(&state.policy);
    let sock = watch.sock.get_ref().as_fd();
    let mut buf = [0u8; 128];
    let ended = loop {
        match crate::sys::socket::raw::recv_now(sock, &mut buf) {
            Ok(n) => {
                if let Some((ip, port)) = first_syn(&buf[..n])
                    && !captured.contains(&port)
                {
                    audit_refusal(state, ip, port);
                }
            }
            Err(crate::sys::Errno::EAGAIN) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    // A burst faster than this thread reads overflows the queue: those
    // attempts get one line together, never none.
    if let Ok(dropped) = crate::sys::syn_watch_drops(sock)
        && dropped > 0
    {
        let dec = Decision::new(state.clone(), Door::Refusals, "TCP".into());
        dec.finish_with(
            Outcome::Deny,
            0,
            format!(
                "{} more connection attempts to the sandbox's synthetic addresses were \
                     refused in the sandbox (no port of theirs is captured) and not audited one \
                     by one: they came faster than the audit could read them",
                dropped
            ),
        );
    }
    ended
}

/// The refusals watch of a sandbox (`sys::syn_watch_v4`).
pub(crate) struct RefusalsWatch {
    pub(crate) sock: AsyncFd<OwnedFd>,
}

impl RefusalsWatch {
    pub(crate) fn new(sock: AsyncFd<OwnedFd>) -> RefusalsWatch {
        RefusalsWatch { sock }
    }
}

/// The destination of an IPv4 TCP packet that opens a connection (SYN
/// without ACK) to a synthetic address; None for anything else (what was
/// queued before the socket's filter was attached).
fn first_syn(packet: &[u8]) -> Option<(std::net::Ipv4Addr, u16)> {
    let (&v_ihl, _) = packet.split_first()?;
    let ihl = usize::from(v_ihl & 0x0f) * 4;
    if v_ihl >> 4 != 4 || ihl < 20 || packet.get(9) != Some(&6) {
        return None;
    }
    let dst: [u8; 4] = packet.get(16..20)?.try_into().ok()?;
    let ip = std::net::Ipv4Addr::from(dst);
    let tcp = packet.get(ihl..ihl + 14)?;
    let port = u16::from_be_bytes([tcp[2], tcp[3]]);
    let syn_only = tcp[13] & 0x12 == 0x02;
    (syn_only && super::names::is_synthetic(ip)).then_some((ip, port))
}

/// The audit line of a refused attempt: the name behind the address, and
/// why the policy would not have it on that port.
fn audit_refusal(state: &Arc<State>, ip: std::net::Ipv4Addr, port: u16) {
    let dec = Decision::new(state.clone(), Door::Refusals, "TCP".into());
    dec.with(|f| {
        f.destination = Some(SocketAddr::from((ip, port)).to_string());
        f.port = Some(port);
    });
    let Some(host) = state.names.name_of(ip).and_then(|n| canonicalize(&n).ok()) else {
        dec.finish_with(
            Outcome::Deny,
            0,
            format!("{ip}:{port} is not an address the sandbox's resolver handed out"),
        );
        return;
    };
    dec.with(|f| f.host = Some(host.to_string()));
    let why = match state.policy.check(&host, port) {
        Verdict::Deny(rule) => {
            let why = format!("{host}:{port} is not allowed: {rule}");
            dec.with(|f| f.rule = Some(rule));
            why
        }
        // Only the TCP door's port can be allowed and not captured.
        Verdict::Allow(rule) => {
            dec.with(|f| f.rule = Some(rule));
            format!(
                "{host}:{port}: port {port} is the proxy's TCP door's, never captured; use the proxy (HTTPS_PROXY) for it"
            )
        }
    };
    dec.finish_with(
        Outcome::Deny,
        0,
        format!("{why} (nothing captures port {port}: the connection was refused in the sandbox)"),
    );
}

/// Take a connection slot for a captured connection, or reset it.
pub(super) fn admit(state: &Arc<State>, s: TcpStream) {
    let Ok(permit) = state.connections.clone().try_acquire_owned() else {
        let dec = Decision::new(state.clone(), Door::Transparent, "TCP".into());
        dec.finish_with(Outcome::Limit, 0, "max_connections reached".into());
        reset(s);
        return;
    };
    let st = state.clone();
    tokio::spawn(async move {
        let _permit = permit;
        captured(st, s).await;
    });
}

/// Close with RST: the client sees ECONNRESET at once, not a clean EOF
/// that could pass for an empty answer.
fn reset(s: TcpStream) {
    let _ = s.set_zero_linger();
    drop(s);
}

async fn captured(state: Arc<State>, client: TcpStream) {
    let dec = Decision::new(state.clone(), Door::Transparent, "TCP".into());
    let original: SocketAddr = match client.local_addr() {
        Ok(a) => a,
        Err(e) => {
            dec.finish_with(Outcome::Error, 0, format!("getsockname: {e}"));
            return reset(client);
        }
    };
    let port = original.port();
    dec.with(|f| {
        f.destination = Some(original.to_string());
        f.port = Some(port);
    });
    let name = match original.ip() {
        IpAddr::V4(ip) => state.names.name_of(ip),
        IpAddr::V6(_) => None,
    };
    let Some(host) = name.and_then(|n| canonicalize(&n).ok()) else {
        dec.finish_with(
            Outcome::Deny,
            0,
            format!("{original} is not an address the sandbox's resolver handed out"),
        );
        return reset(client);
    };
    dec.with(|f| f.host = Some(host.to_string()));
    let rule = match state.policy.check(&host, port) {
        Verdict::Allow(rule) => rule,
        Verdict::Deny(rule) => {
            let msg = format!("{host}:{port} is not allowed: {rule}");
            dec.with(|f| f.rule = Some(rule));
            dec.finish_with(Outcome::Deny, 0, msg);
            return reset(client);
        }
    };
    dec.with(|f| f.rule = Some(rule.clone()));
    if !state.budget_left() {
        let msg = "the sandbox's egress byte limit is used up".to_string();
        dec.finish_with(Outcome::Limit, 0, msg);
        return reset(client);
    }
    let Ok(_permit) = state.tunnels.clone().try_acquire_owned() else {
        let msg = format!(
            "too many concurrent tunnels (limit {})",
            state.policy.limits().max_tunnels
        );
        dec.finish_with(Outcome::Limit, 0, msg);
        return reset(client);
    };
    // Held until the first bytes are classified: a sandbox that opens
    // connections and stalls their ClientHello holds at most this many
    // upstream connections and hello buffers at a time.
    let Ok(pending) = state.pending_handshakes.clone().try_acquire_owned() else {
        let msg = format!(
            "too many connections whose first bytes are still awaited (limit {}, max_pending_handshakes)",
            state.policy.limits().max_pending_handshakes
        );
        dec.finish_with(Outcome::Limit, 0, msg);
        return reset(client);
    };
    let upstream = match dial(&state, &dec, &host, port, &rule).await {
        Ok(s) => s,
        // The decision holds why (denied address, resolve or connect).
        Err(_answer) => return reset(client),
    };
    dec.with(|f| f.verdict = Some(Outcome::Allow));
    relay(&dec, &host, client, upstream, pending).await;
}

/// Refuse a TLS ClientHello that asks for another server name than the
/// name the connection was decided for (a CDN serves many names on one
/// address). Only the upstream-bound direction waits for it, so protocols
/// where the server speaks first go on meanwhile; what is not TLS is not
/// checked. Returns the bytes read, which the caller forwards first.
///
/// The bytes are read (consumed), not peeked: a peek returns at once
/// while any byte is queued, so waiting for the rest of a stalled
/// ClientHello would need a timer; a read waits on the socket's readiness
/// for new bytes. The buffer is [`sni::MAX_HELLO`] at most.
async fn check_server_name(
    client: &TcpStream,
    host: &CanonicalHost,
    limit: std::time::Duration,
) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind};
    let deadline = tokio::time::Instant::now() + limit;
    let refuse = |why: String| Err(Error::new(ErrorKind::PermissionDenied, why));
    let mut buf = vec![0u8; 2048];
    let mut len = 0;
    loop {
        let n = tokio::time::timeout_at(deadline, read_some(client, &mut buf[len..]))
            .await
            .map_err(|_| {
                Error::new(
                    ErrorKind::PermissionDenied,
                    "no complete TLS ClientHello within the handshake timeout",
                )
            })??;
        if n == 0 && len == 0 {
            return Ok(Vec::new());
        }
        len += n;
        match sni::client_hello_name(&buf[..len]) {
            sni::Hello::NotTls | sni::Hello::NoName => {
                buf.truncate(len);
                return Ok(buf);
            }
            sni::Hello::Name(name) => {
                let text = String::from_utf8_lossy(&name).into_owned();
                return match canonicalize(&text) {
                    Ok(h) if &h == host => {
                        buf.truncate(len);
                        Ok(buf)
                    }
                    _ => refuse(format!(
                        "TLS server name {:?} is not {host}, the name this connection was allowed for",
                        shorten(&text).escape_default().to_string()
                    )),
                };
            }
            sni::Hello::Malformed => {
                return refuse(
                    "a TLS ClientHello hutch cannot read (server name unchecked)".into(),
                );
            }
            sni::Hello::Incomplete(_) if n == 0 => {
                return refuse(
                    "the sandbox closed its side before a complete TLS ClientHello".into(),
                );
            }
            // `need` is at most sni::MAX_HELLO.
            sni::Hello::Incomplete(need) => {
                if need > buf.len() {
                    buf.resize(need, 0);
                }
            }
        }
    }
}

/// One read of what the socket has, waiting on its readiness (0: end of
/// stream).
async fn read_some(s: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        s.readable().await?;
        match s.try_read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            r => return r,
        }
    }
}

/// Write all of `bytes` (the first bytes, already read) to `dst`, metered.
async fn forward(dst: &TcpStream, bytes: &[u8], meter: &DirMeter<'_>) -> std::io::Result<()> {
    use super::tunnel::Meter;
    let mut at = 0;
    while at < bytes.len() {
        dst.writable().await?;
        match dst.try_write(&bytes[at..]) {
            Ok(n) => {
                meter.account(n)?;
                at += n;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A server name as the audit line shows it: a name longer than DNS allows
/// (which canonicalisation refuses anyway) is cut, so that one ClientHello
/// cannot put 16 KiB into each line.
fn shorten(name: &str) -> String {
    const MAX_SHOWN: usize = 253;
    match name.char_indices().nth(MAX_SHOWN) {
        Some((at, _)) => format!("{}...", &name[..at]),
        None => name.to_string(),
    }
}

/// Move bytes both ways until both sides close, a side fails, or a
/// timeout fires; metered like a CONNECT tunnel. `pending` (a slot of
/// `max_pending_handshakes`) is released once the first bytes are
/// classified.
async fn relay(
    dec: &Arc<Decision>,
    host: &CanonicalHost,
    client: TcpStream,
    upstream: TcpStream,
    pending: tokio::sync::OwnedSemaphorePermit,
) {
    let limits = dec.state.policy.limits().clone();
    let up = DirMeter { dec, up: true };
    let down = DirMeter { dec, up: false };
    dec.touch();
    let upward = async {
        let first = check_server_name(&client, host, limits.handshake_timeout).await;
        drop(pending);
        forward(&upstream, &first?, &up).await?;
        pump(&client, &upstream, &up).await
    };
    let run = async { tokio::try_join!(upward, pump(&upstream, &client, &down)).map(drop) };
    tokio::select! {
        r = run => if let Err(e) = r {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                dec.with(|f| f.verdict = Some(Outcome::Deny));
                let _ = client.set_zero_linger();
            }
            dec.with(|f| f.error = Some(e.to_string()));
        },
        why = dec.watchdog(limits.idle_timeout, limits.total_timeout) => {
            dec.with(|f| f.error = Some(why.into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_name_in_an_audit_line_is_cut_past_dns_length() {
        assert_eq!(shorten("api.example.com"), "api.example.com");
        let long = "a".repeat(16 * 1024);
        let shown = shorten(&long);
        assert_eq!(shown.len(), 253 + 3);
        assert!(shown.ends_with("..."));
        // Cut on a character boundary.
        assert_eq!(shorten(&"é".repeat(300)).chars().count(), 253 + 3);
    }

    /// Only a first SYN to a synthetic address counts as an attempt.
    #[test]
    fn a_first_syn_to_a_synthetic_address_is_an_attempt() {
        let packet = |dst: [u8; 4], flags: u8| {
            let mut p = vec![0u8; 40];
            p[0] = 0x45;
            p[9] = 6;
            p[16..20].copy_from_slice(&dst);
            p[22..24].copy_from_slice(&443u16.to_be_bytes());
            p[33] = flags;
            p
        };
        let ip = std::net::Ipv4Addr::new(198, 18, 0, 7);
        assert_eq!(first_syn(&packet(ip.octets(), 0x02)), Some((ip, 443)));
        assert_eq!(first_syn(&packet(ip.octets(), 0x12)), None, "SYN-ACK");
        assert_eq!(first_syn(&packet(ip.octets(), 0x10)), None, "ACK");
        assert_eq!(first_syn(&packet([127, 0, 0, 1], 0x02)), None, "loopback");
        assert_eq!(first_syn(&packet(ip.octets(), 0x02)[..30]), None, "cut");
    }
}
