//! An HTTP server on the loopback of another network namespace (the
//! node's, where containerd, its shims and the hutch-oci keepers run): an
//! upstream only the pod's egress proxy can reach. It answers every
//! request `200 <body>` and counts them.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

pub struct Upstream {
    pub port: u16,
    requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    netns: std::fs::File,
    thread: Option<JoinHandle<()>>,
}

/// Enter the network namespace `netns` (this thread only).
fn enter(netns: &std::fs::File) -> Result<(), String> {
    nix::sched::setns(netns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("setns(net): {e}"))
}

impl Upstream {
    /// Listen on 127.0.0.1 (a free port) in the network namespace of
    /// process `pid`; ready (listening) when this returns.
    pub fn start(pid: u32, body: &'static str) -> Result<Upstream, String> {
        let path = format!("/proc/{pid}/ns/net");
        let netns = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        let ns = netns.try_clone().map_err(|e| e.to_string())?;
        let requests = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (count, stopped) = (requests.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let listener = enter(&ns)
                .and_then(|()| TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}")));
            let listener = match listener {
                Ok(l) => {
                    let _ = tx.send(Ok(l.local_addr().unwrap().port()));
                    l
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            for conn in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(c) = conn {
                    count.fetch_add(1, Ordering::SeqCst);
                    answer(c, body);
                }
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|e| format!("the upstream's thread: {e}"))??;
        Ok(Upstream {
            port,
            requests,
            stop,
            netns,
            thread: Some(thread),
        })
    }

    /// The connections it accepted.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Read the request head (bounded) and answer it.
fn answer(mut c: TcpStream, body: &str) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 << 10 {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let _ = write!(
        c,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

impl Drop for Upstream {
    fn drop(&mut self) {
        // Wake the accept from the same namespace, then join.
        self.stop.store(true, Ordering::SeqCst);
        let (ns, port) = (self.netns.try_clone(), self.port);
        let waker = std::thread::spawn(move || {
            if let Ok(ns) = ns
                && enter(&ns).is_ok()
            {
                let _ = TcpStream::connect(("127.0.0.1", port));
            }
        });
        let _ = waker.join();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
