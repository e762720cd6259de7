//! JSON-lines audit sink: one event per line, appended, shared by threads.
//!
//! The file is opened `O_APPEND` (never truncated) and each event is written
//! with a single `write` under a lock, so lines from the proxy, sessions and
//! several sandboxes sharing a file never interleave.
//!
//! A sink may be capped ([`AuditSink::open_capped`]): what a sandbox makes
//! its proxy log must not fill the host's disk. Past the cap one
//! `audit-limit` line is written, later events are only counted, and an
//! `audit-dropped` line with the count is written when the sink closes.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::util::clock;

/// An audit failure (opening or writing the log).
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot open audit log {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write audit log {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot encode audit event: {0}")]
    Encode(#[from] serde_json::Error),
}

/// A cheaply clonable handle to an append-only JSON-lines log.
#[derive(Debug, Clone)]
pub struct AuditSink {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    file: Mutex<Log>,
}

#[derive(Debug)]
struct Log {
    file: File,
    /// Bytes this sink wrote.
    written: u64,
    /// At most this many bytes of events (`None`: unbounded).
    cap: Option<u64>,
    /// Events not written because of the cap.
    dropped: u64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let log = self.file.get_mut().unwrap_or_else(|p| p.into_inner());
        if log.dropped > 0 {
            let line = stamped(
                "audit-dropped",
                serde_json::json!({
                    "dropped": log.dropped,
                    "limit_bytes": log.cap,
                }),
            );
            let _ = log.file.write_all(&line);
        }
    }
}

/// One JSON line: `ts` and `kind`, then the event's own fields.
fn stamped(kind: &str, mut value: serde_json::Value) -> Vec<u8> {
    let ts = clock::now_ms() as f64 / 1000.0;
    let mut line = serde_json::Map::new();
    line.insert("ts".into(), serde_json::json!(ts));
    line.insert("kind".into(), serde_json::json!(kind));
    match value.take() {
        serde_json::Value::Object(fields) => line.extend(fields),
        other => {
            line.insert("event".into(), other);
        }
    }
    let mut bytes = serde_json::to_vec(&serde_json::Value::Object(line)).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

impl AuditSink {
    /// Open (creating with mode 0600) `path` for appending, unbounded.
    #[cfg(test)]
    pub fn open(path: &Path) -> Result<AuditSink, AuditError> {
        Self::open_capped(path, None)
    }

    /// Open `path` for appending; this sink writes at most `cap` bytes of
    /// events (then one `audit-limit` line; the rest are counted and the
    /// count is written as `audit-dropped` when the last handle is gone).
    pub fn open_capped(path: &Path, cap: Option<u64>) -> Result<AuditSink, AuditError> {
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|source| AuditError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(AuditSink {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                file: Mutex::new(Log {
                    file,
                    written: 0,
                    cap,
                    dropped: 0,
                }),
            }),
        })
    }

    /// Append one event. `kind` names it (e.g. `egress`); the event's own
    /// fields follow `ts` (Unix time in seconds, millisecond precision) and
    /// `kind`. The event must serialize to a JSON object.
    pub fn record<E: Serialize>(&self, kind: &str, event: &E) -> Result<(), AuditError> {
        let bytes = stamped(kind, serde_json::to_value(event)?);
        // A poisoned lock only means another writer panicked mid-call; the
        // file itself is still fine to append to.
        let mut log = self
            .inner
            .file
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let over = log
            .cap
            .is_some_and(|cap| log.written + bytes.len() as u64 > cap);
        let bytes = if !over {
            bytes
        } else if log.dropped == 0 {
            log.dropped = 1;
            stamped(
                "audit-limit",
                serde_json::json!({
                    "limit_bytes": log.cap,
                    "note": "audit log limit reached; later events are counted, not written",
                }),
            )
        } else {
            log.dropped += 1;
            return Ok(());
        };
        log.written += bytes.len() as u64;
        log.file
            .write_all(&bytes)
            .map_err(|source| AuditError::Write {
                path: self.inner.path.clone(),
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_one_line_per_event_from_many_threads() {
        let dir = std::env::temp_dir().join(format!("hutch-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        std::fs::write(&path, "{\"kind\":\"earlier\"}\n").unwrap();
        let sink = AuditSink::open(&path).unwrap();
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let s = sink.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        s.record(
                            "test",
                            &serde_json::json!({"t": t, "i": i, "pad": "x".repeat(500)}),
                        )
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 401);
        assert_eq!(lines[0], "{\"kind\":\"earlier\"}");
        for l in &lines[1..] {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["kind"], "test");
            assert!(v["ts"].as_f64().unwrap() > 1.0e9);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
