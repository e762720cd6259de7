//! Several layers of one image imported at the same time (a pull's
//! layers, each streaming from the registry): a few worker threads take
//! the layers in order, each verifying and storing its layer in its own
//! directory as import does one at a time. The image's size and
//! expansion caps are shared ([`ImageTally`]), so they hold across the
//! layers in flight. The first failure stops the others at their next
//! read (their staging directories are removed) and is the one reported;
//! the caller checks each layer against those below it, in order, and
//! records the image only when all passed.

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::error::{ImageError, Result};
use super::layer::{LayerInput, LayerLimits, LayerMeta};
use super::store::Store;

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How many layers to import at once, and the signal that stops them.
pub(crate) struct LayersAtOnce {
    pub count: usize,
    pub stop: Arc<StopSignal>,
}

/// Raised when one of an image's layers failed: the others fail at their
/// next read, and a reader waiting on the network (a pull's stream) is
/// woken through [`StopSignal::stopped`].
#[derive(Debug, Default)]
pub(crate) struct StopSignal {
    stopped: AtomicBool,
    wake: tokio::sync::Notify,
}

impl StopSignal {
    /// Raise it; true for the first caller.
    fn stop(&self) -> bool {
        let first = !self.stopped.swap(true, Ordering::SeqCst);
        self.wake.notify_waiters();
        first
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Resolves once it is raised.
    pub(crate) async fn stopped(&self) {
        loop {
            let woken = self.wake.notified();
            tokio::pin!(woken);
            // Registered before the check: a raise in between still wakes it.
            woken.as_mut().enable();
            if self.is_stopped() {
                return;
            }
            woken.await;
        }
    }
}

/// What a stopped layer's reader fails with.
pub(crate) fn stopped_error() -> io::Error {
    io::Error::other("stopped: another layer of the image failed")
}

/// A layer's reader that fails once another layer of the image failed.
struct Stoppable {
    inner: Box<dyn Read + Send>,
    stop: Arc<StopSignal>,
}

impl Read for Stoppable {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.stop.is_stopped() {
            return Err(stopped_error());
        }
        self.inner.read(buf)
    }
}

impl Store {
    /// Import `inputs`, at most `at_once` at the same time, each stored
    /// once verified (without the lower-path check, which needs the layers
    /// below: the caller runs it in order). Returns each layer's meta and
    /// whether it was new, in the inputs' order; or the first failure.
    pub(crate) fn import_layers_at_once<'t>(
        &self,
        inputs: Vec<LayerInput>,
        at_once: &LayersAtOnce,
        limits: &(dyn Fn() -> LayerLimits<'t> + Sync),
    ) -> Result<Vec<(LayerMeta, bool)>> {
        let n = inputs.len();
        let stop = &at_once.stop;
        let queue: Vec<Mutex<Option<LayerInput>>> =
            inputs.into_iter().map(|i| Mutex::new(Some(i))).collect();
        let done: Vec<Mutex<Option<(LayerMeta, bool)>>> = (0..n).map(|_| Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        let failure: Mutex<Option<ImageError>> = Mutex::new(None);
        let fail = |e: ImageError| {
            let mut first = locked(&failure);
            // Only the first failure counts: the others were stopped by it.
            if stop.stop() {
                *first = Some(e);
            }
        };
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..at_once.count.clamp(1, n.max(1)))
                .map(|_| {
                    scope.spawn(|| {
                        while !stop.is_stopped() {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(mut input) = queue.get(i).and_then(|q| locked(q).take())
                            else {
                                break;
                            };
                            input.reader = Box::new(Stoppable {
                                inner: input.reader,
                                stop: stop.clone(),
                            });
                            match self.import_layer(input, None, &limits()) {
                                Ok(r) => *locked(&done[i]) = Some(r),
                                Err(e) => fail(e),
                            }
                        }
                    })
                })
                .collect();
            for w in workers {
                if w.join().is_err() {
                    fail(ImageError::Invalid(
                        "a layer's import thread panicked".into(),
                    ));
                }
            }
        });
        if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        done.into_iter()
            .map(|d| d.into_inner().unwrap_or_else(|p| p.into_inner()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ImageError::Invalid("a layer was not imported".into()))
    }
}
