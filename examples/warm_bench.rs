//! benches/warm.sh's driver: in one process, interleaved, the latency of
//! spawning `/bin/true` with no sandbox (the floor) and of running `true`
//! in a warm sandbox of a `hutch::Pool`; then sustained warm commands per
//! second and the RSS of one warm sandbox. Prints one JSON object.
//!
//!   warm_bench HUTCH_BINARY ROUNDS POOL_SIZE
//!
//! Also, interleaved with the two, the bound a warm claim cannot beat
//! however it is built: the floor plus one and plus two process hops (a
//! Unix-socket round trip to a relay process that spawns and waits for
//! `/bin/true` itself, or asks a second relay to), as `hop1`/`hop2`. A
//! claim goes caller -> helper -> hutch init -> workload and back: the
//! floor plus two hops, plus the workload's confinement.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A relay: `depth` 1 spawns and waits for `/bin/true` for each byte it
/// reads on stdin (a Unix socket), then answers a byte; deeper ones ask
/// a relay of their own.
fn relay(depth: u32) -> ! {
    use std::os::fd::FromRawFd;
    // SAFETY: fd 0 is the socket the parent handed over, owned here.
    let mut up = unsafe { UnixStream::from_raw_fd(0) };
    let mut down = (depth > 1).then(|| spawn_relay(depth - 1));
    let mut b = [0u8; 1];
    while up.read_exact(&mut b).is_ok() {
        match &mut down {
            Some((_, s)) => {
                s.write_all(&b).expect("relay write");
                s.read_exact(&mut b).expect("relay read");
            }
            None => {
                Command::new("/bin/true").status().expect("spawn");
            }
        }
        if up.write_all(&b).is_err() {
            break;
        }
    }
    std::process::exit(0)
}

fn spawn_relay(depth: u32) -> (Child, UnixStream) {
    let (ours, theirs) = UnixStream::pair().expect("socketpair");
    let child = Command::new(std::env::current_exe().expect("current_exe"))
        .arg("--relay")
        .arg(depth.to_string())
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .spawn()
        .expect("spawn relay");
    (child, ours)
}

fn round_trip(s: &mut UnixStream) -> Duration {
    let t = Instant::now();
    let mut b = [1u8; 1];
    s.write_all(&b).expect("hop write");
    s.read_exact(&mut b).expect("hop read");
    t.elapsed()
}

fn percentile(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1e3
}

/// Resident set of `pid` and its descendants, KiB.
fn rss_tree_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let own = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0);
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    own + children
        .split_whitespace()
        .filter_map(|c| c.parse::<u32>().ok())
        .map(rss_tree_kib)
        .sum::<u64>()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--relay") {
        relay(args.get(2).and_then(|d| d.parse().ok()).unwrap_or(1));
    }
    // Started before the pool's thread exists.
    let (mut relay1, mut hop1_sock) = spawn_relay(1);
    let (mut relay2, mut hop2_sock) = spawn_relay(2);
    let (Some(binary), Some(rounds), Some(size)) = (
        args.get(1),
        args.get(2).and_then(|r| r.parse::<usize>().ok()),
        args.get(3).and_then(|s| s.parse::<usize>().ok()),
    ) else {
        eprintln!("usage: warm_bench HUTCH_BINARY ROUNDS POOL_SIZE");
        std::process::exit(2);
    };
    let mut spec = hutch::spec::default_profile();
    spec.command = vec!["true".into()];
    let pool = hutch::Pool::with_binary(spec, size, binary).expect("a pool");
    assert!(
        pool.wait_ready(size, Duration::from_secs(60)),
        "{:?}",
        pool.status()
    );
    // Memory of one ready sandbox: its helper and hutch init.
    let me = std::process::id();
    let helpers: Vec<u32> = std::fs::read_to_string(format!("/proc/{me}/task/{me}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .filter(|p| ![relay1.id(), relay2.id()].contains(p))
        .collect();
    let rss = helpers.iter().map(|p| rss_tree_kib(*p)).sum::<u64>() / helpers.len().max(1) as u64;
    let (mut floor, mut warm) = (Vec::new(), Vec::new());
    let (mut hop1, mut hop2) = (Vec::new(), Vec::new());
    let mut cold = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        std::process::Command::new("/bin/true")
            .status()
            .expect("spawn");
        floor.push(t.elapsed());
        hop1.push(round_trip(&mut hop1_sock));
        hop2.push(round_trip(&mut hop2_sock));
        // A command finds the pool warm, as a tool runner's would between
        // its commands (the refill of the last one done in the gap): the
        // latency of a claim, not of a warm-up racing it. The sustained
        // rate below is the back-to-back case.
        pool.wait_ready(size, Duration::from_secs(10));
        let t = Instant::now();
        let r = pool.command(["true"]).status().expect("a warm command");
        warm.push(t.elapsed());
        if !r.warm {
            cold += 1;
        }
        assert!(r.success(), "{r:?}");
    }
    // Sustained: back to back, as fast as the pool refills.
    let n = rounds.max(50);
    let t = Instant::now();
    for _ in 0..n {
        pool.command(["true"]).status().expect("a warm command");
    }
    drop((hop1_sock, hop2_sock));
    let _ = (relay1.wait(), relay2.wait());
    let per_second = n as f64 / t.elapsed().as_secs_f64();
    let (f50, f99) = (percentile(&mut floor, 0.5), percentile(&mut floor, 0.99));
    let (w50, w99) = (percentile(&mut warm, 0.5), percentile(&mut warm, 0.99));
    let (h1, h2) = (percentile(&mut hop1, 0.5), percentile(&mut hop2, 0.5));
    println!(
        "{{\"floor_p50_ms\":{f50:.3},\"floor_p99_ms\":{f99:.3},\"warm_p50_ms\":{w50:.3},\"warm_p99_ms\":{w99:.3},\"ratio_p50\":{:.2},\"ratio_p99\":{:.2},\"hop1_p50_ms\":{h1:.3},\"hop2_p50_ms\":{h2:.3},\"bound_hop1_p50\":{:.2},\"bound_hop2_p50\":{:.2},\"served_cold\":{cold},\"sustained_per_s\":{per_second:.0},\"warm_sandbox_rss_kib\":{rss}}}",
        w50 / f50,
        w99 / f99,
        h1 / f50,
        h2 / f50
    );
}
