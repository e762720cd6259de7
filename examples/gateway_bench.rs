//! The gateway rows of `benches/proxy.sh` (issue 31): a local HTTPS
//! server (the tests' `tls_upstream`, test CA) reached directly over TLS
//! and through a gateway of `hutch proxy` (plain HTTP in, TLS out), in the
//! same run:
//!
//! - latency of a small POST with a streamed answer (5 server-sent
//!   events), p50 and p90 over N requests: direct with a new TLS
//!   connection per request, direct on one kept TLS connection, and the
//!   gateway (a new connection to the proxy per request, as the doors
//!   serve one request per connection);
//! - streamed throughput of one large answer, direct TLS against the
//!   gateway, best of RUNS, with two reference rows that bound what any
//!   extra hop costs on this machine: the same direct TLS stream through
//!   hutch's opaque CONNECT tunnel (spliced, never copied to user space)
//!   and through a plain relay that copies the bytes through user space
//!   (no TLS, no HTTP: the least a proxy that reads the plaintext does).
//!
//!   cargo run --release --example gateway_bench -- HUTCH N SIZE_MB RUNS

#[path = "../tests/common/tls_upstream.rs"]
mod tls_upstream;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

const NAME: &str = "api.bench.test";

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, hutch, n, size_mb, runs] = &args[..] else {
        bail!("usage: gateway_bench HUTCH N SIZE_MB RUNS");
    };
    let n: usize = n.parse()?;
    let size: usize = size_mb.parse::<usize>()? << 20;
    let runs: usize = runs.parse()?;
    let dir = std::env::temp_dir().join(format!("hutch-gateway-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = bench(hutch, &dir, n, size, runs);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn bench(
    hutch: &str,
    dir: &std::path::Path,
    n: usize,
    size: usize,
    runs: usize,
) -> anyhow::Result<()> {
    for alpn in ["http/1.1", "h2"] {
        // The direct client speaks HTTP/1.1; so does the proxy towards an
        // upstream offering h2 too, as the sandbox's requests are 1.1
        // (src/net/broker/upstream.rs): the second row shows that choice.
        let offer: &[&str] = if alpn == "h2" {
            &["h2", "http/1.1"]
        } else {
            &["http/1.1"]
        };
        let up = tls_upstream::TlsUpstream::start(dir, &[NAME], offer);
        let policy = dir.join("policy.toml");
        std::fs::write(
            &policy,
            format!(
                "[profiles.b]\nallow = [\"{NAME}:{p}\"]\nallow_address = [\"127.0.0.1/32\"]\n\
                 resolve = {{ \"{NAME}\" = \"127.0.0.1\" }}\n\
                 [[profiles.b.gateways]]\nname = \"g\"\nupstream = \"https://{NAME}:{p}\"\n",
                p = up.port
            ),
        )?;
        let mut proxy = Command::new(hutch)
            .args(["proxy", "--policy"])
            .arg(&policy)
            .args(["--listen", "tcp:127.0.0.1:0"])
            .env("SSL_CERT_FILE", &up.ca_file)
            .stderr(Stdio::piped())
            .spawn()
            .context("start hutch proxy")?;
        let mut line = String::new();
        BufReader::new(proxy.stderr.take().context("stderr")?).read_line(&mut line)?;
        let addr = line
            .trim()
            .rsplit("tcp:")
            .next()
            .context("no listen address")?
            .to_string();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let r = rt.block_on(measure(&up, &addr, n, size, runs, alpn));
        let _ = proxy.kill();
        let _ = proxy.wait();
        r?;
    }
    Ok(())
}

async fn measure(
    up: &tls_upstream::TlsUpstream,
    proxy: &str,
    n: usize,
    size: usize,
    runs: usize,
    alpn: &str,
) -> anyhow::Result<()> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(up.ca_der.clone()))?;
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config));
    let upstream = format!("127.0.0.1:{}", up.port);
    let authority = format!("{NAME}:{}", up.port);

    println!("== gateway, upstream offering {alpn} (same run, same server)");
    let post = |path: &str, host: &str| {
        Request::post(path)
            .header("host", host)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(
                br#"{"model":"m","max_tokens":16,"stream":true}"#,
            )))
    };
    let mut direct_fresh = Vec::with_capacity(n);
    let mut direct_kept = Vec::with_capacity(n);
    let mut gateway = Vec::with_capacity(n);
    let (mut kept, kept_conn) = {
        let tcp = TcpStream::connect(&upstream).await?;
        tcp.set_nodelay(true)?;
        let s = tls.connect(ServerName::try_from(NAME)?, tcp).await?;
        http1::handshake::<_, Full<Bytes>>(TokioIo::new(s)).await?
    };
    tokio::spawn(kept_conn);
    // Interleaved, so a drift of the machine touches every case alike.
    for i in 0..n + 50 {
        let t = Instant::now();
        let tcp = TcpStream::connect(&upstream).await?;
        tcp.set_nodelay(true)?;
        let s = tls.connect(ServerName::try_from(NAME)?, tcp).await?;
        let (mut send, conn) = http1::handshake(TokioIo::new(s)).await?;
        tokio::spawn(conn);
        drain(send.send_request(post("/stream/5", &authority)?).await?).await?;
        let d_fresh = t.elapsed();

        let t = Instant::now();
        kept.ready().await?;
        drain(kept.send_request(post("/stream/5", &authority)?).await?).await?;
        let d_kept = t.elapsed();

        let t = Instant::now();
        let tcp = TcpStream::connect(proxy).await?;
        tcp.set_nodelay(true)?;
        let (mut send, conn) = http1::handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(conn);
        drain(
            send.send_request(post("/g/stream/5", "127.0.0.1:3128")?)
                .await?,
        )
        .await?;
        let d_gw = t.elapsed();
        if i >= 50 {
            direct_fresh.push(d_fresh);
            direct_kept.push(d_kept);
            gateway.push(d_gw);
        }
    }
    let (f50, f90) = pct(&mut direct_fresh);
    let (k50, k90) = pct(&mut direct_kept);
    let (g50, g90) = pct(&mut gateway);
    println!("  small POST, streamed answer (5 events), {n} requests, p50 / p90:");
    println!(
        "    direct TLS, new connection    {:7.3} / {:7.3} ms",
        ms(f50),
        ms(f90)
    );
    println!(
        "    direct TLS, kept connection   {:7.3} / {:7.3} ms",
        ms(k50),
        ms(k90)
    );
    println!(
        "    gateway (new conn. to proxy)  {:7.3} / {:7.3} ms",
        ms(g50),
        ms(g90)
    );
    println!(
        "    gateway added at p50: {:+.3} ms over a new TLS connection, {:+.3} ms over a kept one   (target <= 0.3)",
        ms(g50) - ms(f50),
        ms(g50) - ms(k50)
    );

    let relay = copy_relay(&upstream)?;
    let mut best_direct = f64::MAX;
    let mut best_gw = f64::MAX;
    let mut best_tunnel = f64::MAX;
    let mut best_relay = f64::MAX;
    let get_bytes = || {
        Request::get(format!("/bytes/{size}"))
            .header("host", &authority)
            .body(Full::new(Bytes::new()))
    };
    for _ in 0..runs {
        let t = Instant::now();
        let tcp = TcpStream::connect(&upstream).await?;
        let s = tls.connect(ServerName::try_from(NAME)?, tcp).await?;
        let (mut send, conn) = http1::handshake(TokioIo::new(s)).await?;
        tokio::spawn(conn);
        let got = drain(
            send.send_request(
                Request::get(format!("/bytes/{size}"))
                    .header("host", &authority)
                    .body(Full::new(Bytes::new()))?,
            )
            .await?,
        )
        .await?;
        anyhow::ensure!(got == size, "direct: {got} bytes of {size}");
        best_direct = best_direct.min(t.elapsed().as_secs_f64());

        let t = Instant::now();
        let tcp = TcpStream::connect(proxy).await?;
        let (mut send, conn) = http1::handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(conn);
        let got = drain(
            send.send_request(
                Request::get(format!("/g/bytes/{size}"))
                    .header("host", "127.0.0.1:3128")
                    .body(Full::new(Bytes::new()))?,
            )
            .await?,
        )
        .await?;
        anyhow::ensure!(got == size, "gateway: {got} bytes of {size}");
        best_gw = best_gw.min(t.elapsed().as_secs_f64());

        let t = Instant::now();
        let tcp = connect_tunnel(proxy, &authority).await?;
        let s = tls.connect(ServerName::try_from(NAME)?, tcp).await?;
        let (mut send, conn) = http1::handshake(TokioIo::new(s)).await?;
        tokio::spawn(conn);
        let got = drain(send.send_request(get_bytes()?).await?).await?;
        anyhow::ensure!(got == size, "tunnel: {got} bytes of {size}");
        best_tunnel = best_tunnel.min(t.elapsed().as_secs_f64());

        let t = Instant::now();
        let tcp = TcpStream::connect(relay).await?;
        let s = tls.connect(ServerName::try_from(NAME)?, tcp).await?;
        let (mut send, conn) = http1::handshake(TokioIo::new(s)).await?;
        tokio::spawn(conn);
        let got = drain(send.send_request(get_bytes()?).await?).await?;
        anyhow::ensure!(got == size, "relay: {got} bytes of {size}");
        best_relay = best_relay.min(t.elapsed().as_secs_f64());
    }
    let mib = size as f64 / 1048576.0;
    println!("  streamed answer of {} MiB, best of {runs}:", size >> 20);
    println!("    direct TLS   {:8.0} MiB/s", mib / best_direct);
    println!("    gateway      {:8.0} MiB/s", mib / best_gw);
    println!(
        "    gateway/direct = {:.2}x   (target >= 0.80)",
        best_direct / best_gw
    );
    println!("  the same direct TLS stream through one extra hop (references):");
    println!(
        "    hutch CONNECT tunnel (splice)  {:8.0} MiB/s = {:.2}x direct",
        mib / best_tunnel,
        best_direct / best_tunnel
    );
    println!(
        "    user-space copy relay          {:8.0} MiB/s = {:.2}x direct",
        mib / best_relay,
        best_direct / best_relay
    );
    Ok(())
}

/// A TCP connection through the proxy's CONNECT tunnel to `authority`.
async fn connect_tunnel(proxy: &str, authority: &str) -> anyhow::Result<TcpStream> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = TcpStream::connect(proxy).await?;
    tcp.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await?;
    // Read the answer's head byte by byte, so no tunnelled byte is taken.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        anyhow::ensure!(head.len() < 4096, "CONNECT answer too long");
        head.push(tcp.read_u8().await?);
    }
    anyhow::ensure!(
        head.starts_with(b"HTTP/1.1 200"),
        "CONNECT refused: {}",
        String::from_utf8_lossy(&head)
    );
    Ok(tcp)
}

/// A relay on its own thread that copies each connection to `upstream`
/// through user space with 256 KiB buffers, one thread per direction.
fn copy_relay(upstream: &str) -> anyhow::Result<std::net::SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let upstream = upstream.to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(down) = conn else { return };
            let Ok(up) = std::net::TcpStream::connect(&upstream) else {
                return;
            };
            let pipe = |mut from: std::net::TcpStream, mut to: std::net::TcpStream| {
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 256 << 10];
                    loop {
                        match std::io::Read::read(&mut from, &mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if std::io::Write::write_all(&mut to, &buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            };
            match (down.try_clone(), up.try_clone()) {
                (Ok(d2), Ok(u2)) => {
                    pipe(down, up);
                    pipe(u2, d2);
                }
                _ => return,
            }
        }
    });
    Ok(addr)
}

/// Read a response's body to its end; its length.
async fn drain(resp: Response<hyper::body::Incoming>) -> anyhow::Result<usize> {
    anyhow::ensure!(resp.status().is_success(), "status {}", resp.status());
    let mut body = resp.into_body();
    let mut n = 0;
    while let Some(f) = body.frame().await {
        if let Ok(d) = f?.into_data() {
            n += d.len();
        }
    }
    Ok(n)
}

fn pct(v: &mut [Duration]) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[v.len() * 9 / 10])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
