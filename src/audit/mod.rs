//! JSON-lines audit sink: one event per line, appended, shared by threads.
//!
//! The file is opened `O_APPEND` (never truncated) and each event is written
//! with a single `write` under a lock, so lines from the proxy, sessions and
//! several sandboxes sharing a file never interleave.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

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
    file: Mutex<File>,
}

impl AuditSink {
    /// Open (creating with mode 0600) `path` for appending.
    pub fn open(path: &Path) -> Result<AuditSink, AuditError> {
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
                file: Mutex::new(file),
            }),
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Append one event. `kind` names it (e.g. `egress`); the event's own
    /// fields follow `ts` (Unix time in seconds, millisecond precision) and
    /// `kind`. The event must serialize to a JSON object.
    pub fn record<E: Serialize>(&self, kind: &str, event: &E) -> Result<(), AuditError> {
        let mut value = serde_json::to_value(event)?;
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| (d.as_millis() as f64) / 1000.0)
            .unwrap_or(0.0);
        let mut line = serde_json::Map::new();
        line.insert("ts".into(), serde_json::json!(ts));
        line.insert("kind".into(), serde_json::json!(kind));
        match value.take() {
            serde_json::Value::Object(fields) => line.extend(fields),
            other => {
                line.insert("event".into(), other);
            }
        }
        let mut bytes = serde_json::to_vec(&serde_json::Value::Object(line))?;
        bytes.push(b'\n');
        // A poisoned lock only means another writer panicked mid-call; the
        // file itself is still fine to append to.
        let mut file = self
            .inner
            .file
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        file.write_all(&bytes).map_err(|source| AuditError::Write {
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
