//! A layer blob read straight from the registry while it is unpacked: the
//! import's blocking reader on one side, a download task on the pull's
//! runtime on the other, a bounded channel of chunks between them.
//!
//! The download starts at the reader's first read (a layer the store
//! already has is never fetched) and stops when the reader is dropped (an
//! import that failed early) or when another layer of the image failed
//! (its [`StopSignal`]): a reader waiting on a slow registry is woken then. It stops the stream past the descriptor's
//! size and turns a short stream into an error, never a clean end; the
//! digest and size are checked by the import's own hashing reader, which
//! commits the layer only when they match. A failure of the registry is
//! kept in a [`Failure`] slot so the pull reports it (the registry, the
//! blob, what happened) rather than what the unpacker made of it.

use std::io::{self, Read};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::mpsc;

use super::PullError;
use super::registry::Registry;
use crate::image::digest::Digest;
use crate::image::parallel::{StopSignal, stopped_error};

/// Chunks in flight per layer: what the network may run ahead of the
/// unpacker (a chunk is what hyper read, at most a few hundred KiB).
const CHUNKS_AHEAD: usize = 32;

/// The first registry failure of a pull's layer streams.
#[derive(Clone, Default)]
pub(crate) struct Failure(Arc<Mutex<Option<PullError>>>);

impl Failure {
    fn set(&self, e: PullError) {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert(e);
    }

    pub(crate) fn take(&self) -> Option<PullError> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The import's reader of one layer blob.
pub(crate) struct StreamedBlob {
    runtime: tokio::runtime::Handle,
    registry: Arc<Registry>,
    digest: Digest,
    size: u64,
    failure: Failure,
    /// Set at the first read.
    chunks: Option<mpsc::Receiver<io::Result<Bytes>>>,
    current: Bytes,
    /// Whether the downloads counter was bumped for this blob.
    counted: Arc<std::sync::atomic::AtomicUsize>,
    stop: Arc<StopSignal>,
}

impl StreamedBlob {
    pub(crate) fn new(
        runtime: tokio::runtime::Handle,
        registry: Arc<Registry>,
        digest: Digest,
        size: u64,
        failure: Failure,
        downloads: Arc<std::sync::atomic::AtomicUsize>,
        stop: Arc<StopSignal>,
    ) -> StreamedBlob {
        StreamedBlob {
            runtime,
            registry,
            digest,
            size,
            failure,
            chunks: None,
            current: Bytes::new(),
            counted: downloads,
            stop,
        }
    }

    fn start(&mut self) -> &mut mpsc::Receiver<io::Result<Bytes>> {
        let (tx, rx) = mpsc::channel(CHUNKS_AHEAD);
        self.counted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.runtime.spawn(download(
            self.registry.clone(),
            self.digest.clone(),
            self.size,
            tx,
            self.failure.clone(),
            self.stop.clone(),
        ));
        self.chunks.insert(rx)
    }
}

impl Read for StreamedBlob {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.current.is_empty() {
            let chunks = match self.chunks.as_mut() {
                Some(c) => c,
                None => self.start(),
            };
            match chunks.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => return Err(e),
                // Another layer failed: the task ended early.
                None if self.stop.is_stopped() => return Err(stopped_error()),
                // The task ended after the last chunk (checked complete).
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        let _ = self.current.split_to(n);
        Ok(n)
    }
}

/// Fetch the blob into `tx`, chunk by chunk. A failure is recorded and
/// sent on as an error; a receiver that hung up, or a raised `stop`, ends
/// the download quietly.
async fn download(
    registry: Arc<Registry>,
    digest: Digest,
    size: u64,
    tx: mpsc::Sender<io::Result<Bytes>>,
    failure: Failure,
    stop: Arc<StopSignal>,
) {
    let fetched = tokio::select! {
        fetched = forward(&registry, &digest, size, &tx) => fetched,
        () = stop.stopped() => return,
    };
    if let Err(e) = fetched {
        let line = e.to_string();
        if !tx.is_closed() {
            failure.set(e);
            let _ = tx.send(Err(io::Error::other(line))).await;
        }
    }
}

async fn forward(
    registry: &Registry,
    digest: &Digest,
    size: u64,
    tx: &mpsc::Sender<io::Result<Bytes>>,
) -> Result<(), PullError> {
    let mut response = registry.blob_response(digest, size).await?;
    let mut arrived = 0u64;
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                return Err(PullError::Registry {
                    host: registry.host.clone(),
                    why: format!(
                        "blob {digest}: {} after {arrived} of its {size} bytes",
                        super::registry::one_line(&e)
                    ),
                });
            }
        };
        arrived += chunk.len() as u64;
        if arrived > size {
            return Err(PullError::Tampered {
                digest: digest.to_string(),
                why: format!("the registry sent more than the descriptor's {size} bytes"),
            });
        }
        if tx.send(Ok(chunk)).await.is_err() {
            // The import stopped reading: it failed, or has what it needs.
            return Ok(());
        }
    }
    if arrived != size {
        return Err(PullError::Tampered {
            digest: digest.to_string(),
            why: format!(
                "{arrived} bytes arrived, but its descriptor says {size} (the connection ended early?)"
            ),
        });
    }
    Ok(())
}
