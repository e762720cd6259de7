//! A pool of warm sandboxes of one Spec's shape, owned by this process.
//!
//! Each warm sandbox is a helper (`hutch __supervise`, [`crate::launch::helper`])
//! that built a sandbox up to the point where it needs the command
//! ([`super::warm`]). The pool keeps `size` of them spawned: a thread of
//! its own starts a replacement whenever one is taken, off the path of the
//! command that took it. Taking one gives a [`HelperChild`] to claim
//! ([`super::Link::claim`]); it serves that one command and
//! exits. Nothing outlives the pool: dropping it closes every unclaimed
//! helper's control socket (each then kills its sandbox, removes its
//! cgroup leaf and exits) and reaps them; if the owning process dies,
//! the sockets close all the same.
//!
//! The pool never forks the caller (it may be multi-threaded): helpers are
//! started as processes, and each forks only its own sandbox.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::HelperChild;
use crate::launch::error::LaunchFailure;
use crate::launch::error::{LaunchError, PrepareError};
use crate::launch::prepare::claim;
use crate::launch::prepare::claim::ClaimCommand;
use crate::spec::Spec;

/// Longest pause between warm-ups after failures (one failing warm-up does
/// not turn into a loop of them).
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What the pool's refill thread and its users share.
struct State {
    /// Spawned helpers, oldest first (the first ones are the readiest).
    helpers: VecDeque<HelperChild>,
    /// How many helpers to keep.
    size: usize,
    closing: bool,
    /// Consecutive warm-ups that failed, and the last failure.
    failures: u32,
    last_error: Option<LaunchFailure>,
    /// Helpers handed out (claimed or refused) since the pool started.
    taken: u64,
    /// Commands claimed from the pool that have not ended ([`InFlight`]):
    /// while one runs, the refill waits (it would compete with the command
    /// for the CPUs), unless the pool has no sandbox left.
    in_flight: usize,
    /// Helpers that answered and are exiting, to reap (by pid) without
    /// making the command's caller wait for them.
    exiting: Vec<libc::pid_t>,
    /// A helper came back after its command ([`Pool::give_back`]): the
    /// sandboxes of this shape are resident, so a command in flight is a
    /// sandbox coming back, not one to replace.
    resident: bool,
}

type Shared = (Mutex<State>, Condvar);

/// A command claimed from a pool, until it ends: dropping it (or
/// [`InFlight::release`]) lets the pool refill.
pub struct InFlight {
    shared: std::sync::Weak<Shared>,
}

impl InFlight {
    /// The command ended; `helper`: its helper process, which has answered
    /// and is exiting, for the pool to reap. Without the pool (dropped
    /// already), it is reaped here.
    pub fn release(self, helper: Option<libc::pid_t>) {
        match (self.shared.upgrade(), helper) {
            (Some(shared), Some(pid)) => {
                let mut st = shared.0.lock().unwrap_or_else(|p| p.into_inner());
                st.exiting.push(pid);
            }
            (None, Some(pid)) => {
                let _ = crate::sys::raw::waitpid(pid, 0);
            }
            _ => {}
        }
        // Drop does the count.
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            let mut st = shared.0.lock().unwrap_or_else(|p| p.into_inner());
            st.in_flight = st.in_flight.saturating_sub(1);
            drop(st);
            shared.1.notify_all();
        }
    }
}

/// Counts of a pool, for status lines and tests.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PoolStatus {
    pub size: usize,
    /// Helpers whose sandbox said it is ready.
    pub ready: usize,
    /// Helpers still building their sandbox.
    pub warming: usize,
    pub taken: u64,
    /// The last warm-up failure, while warm-ups keep failing.
    pub last_error: Option<String>,
}

/// Warm sandboxes of one shape.
pub struct Pool {
    shape: Spec,
    /// The command part of the Spec the pool was made from: what a
    /// command starts from (its wall clock, output cap, environment).
    defaults: ClaimCommand,
    digest: String,
    shared: Arc<Shared>,
    refill: Option<std::thread::JoinHandle<()>>,
}

impl Pool {
    /// Keep `size` warm sandboxes of `spec`'s shape, supervised by helpers
    /// running `binary`. `lifeline`: passed to every helper (see
    /// [`super::ToHelper::Warm`]), for an owner that hands the
    /// helpers' control sockets to others. `gives_back`: every claimer
    /// gives its helper back ([`Pool::give_back`]), so a sandbox may serve
    /// one command after another.
    pub fn new(
        binary: &Path,
        spec: &Spec,
        size: usize,
        lifeline: Option<OwnedFd>,
        gives_back: bool,
    ) -> Result<Pool, LaunchError> {
        crate::launch::prepare::validate::validate(spec)?;
        claim::warmable(spec)?;
        let shape = claim::shape(spec);
        let digest = claim::shape_digest(spec);
        // The first ones are started here, so that a command right after
        // `new` finds its sandbox warming, and a helper that cannot start
        // is an error of `new`.
        let mut helpers = VecDeque::with_capacity(size);
        for _ in 0..size {
            let lifeline = lifeline.as_ref().map(|l| l.as_fd());
            match HelperChild::spawn_warm(binary, &shape, lifeline, gives_back) {
                Ok(h) => helpers.push_back(h),
                Err(e) => {
                    end_all(helpers.into());
                    return Err(e);
                }
            }
        }
        let shared = Arc::new((
            Mutex::new(State {
                helpers,
                size,
                closing: false,
                failures: 0,
                last_error: None,
                taken: 0,
                in_flight: 0,
                exiting: Vec::new(),
                resident: false,
            }),
            Condvar::new(),
        ));
        let refill = {
            let shared = Arc::clone(&shared);
            let binary = binary.to_path_buf();
            let shape = shape.clone();
            std::thread::Builder::new()
                .name("hutch-pool".into())
                .spawn(move || refill(&shared, &binary, &shape, lifeline, gives_back))
                .map_err(|e| LaunchError::from(PrepareError::PoolThread(e)))?
        };
        Ok(Pool {
            defaults: ClaimCommand::of(spec),
            shape,
            digest,
            shared,
            refill: Some(refill),
        })
    }

    /// The shape the pool's sandboxes are built from.
    pub fn shape(&self) -> &Spec {
        &self.shape
    }

    /// The command part of the Spec the pool was made from.
    pub fn defaults(&self) -> &ClaimCommand {
        &self.defaults
    }

    /// [`claim::shape_digest`] of the pool's shape.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Keep `size` warm sandboxes from now on (extra ones are ended).
    pub fn resize(&self, size: usize) {
        let (lock, cv) = &*self.shared;
        let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
        st.size = size;
        let extra: Vec<HelperChild> = (size..st.helpers.len())
            .filter_map(|_| st.helpers.pop_back())
            .collect();
        drop(st);
        cv.notify_all();
        end_all(extra);
    }

    /// Count a command as running until the returned guard is dropped (call
    /// it before [`Pool::take`]): the refill waits for it.
    pub fn in_flight(&self) -> InFlight {
        let (lock, _) = &*self.shared;
        lock.lock().unwrap_or_else(|p| p.into_inner()).in_flight += 1;
        InFlight {
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// A warm sandbox to claim: a ready one if there is one, else the one
    /// that has been warming longest (a claim waits for the rest of its
    /// warm-up, never longer than a cold launch). When the pool is empty
    /// but its refill is about to start a sandbox (the last one was just
    /// taken), it waits for that start, which is shorter than a cold
    /// launch. None when the pool has none (size 0, or warm-ups fail):
    /// launch cold then.
    pub fn take(&self) -> Option<HelperChild> {
        let (lock, cv) = &*self.shared;
        let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
        prune(&mut st);
        let deadline = Instant::now() + SPAWN_WAIT;
        while st.helpers.is_empty() && refill_due(&st) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = cv
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            prune(&mut st);
        }
        let ready = st.helpers.iter_mut().position(|h| h.link.ready().is_some());
        let chosen = match ready {
            Some(i) => {
                st.failures = 0;
                st.last_error = None;
                st.helpers.remove(i)
            }
            None => st.helpers.pop_front(),
        };
        if chosen.is_some() {
            st.taken += 1;
        }
        drop(st);
        cv.notify_all();
        chosen
    }

    /// A resident sandbox's helper back from its command (its claimer
    /// sent `ToHelper::Release`: it says `Ready` again, to this pool).
    /// Call it before the command's [`InFlight`] is dropped, so that the
    /// refill never sees the sandbox missing. A pool that holds its size
    /// already ends its newest helper instead.
    pub fn give_back(&self, helper: HelperChild) {
        let (lock, cv) = &*self.shared;
        let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
        st.resident = true;
        let extra = if st.closing {
            Some(helper)
        } else {
            st.helpers.push_front(helper);
            (st.helpers.len() > st.size)
                .then(|| st.helpers.pop_back())
                .flatten()
        };
        drop(st);
        cv.notify_all();
        if let Some(h) = extra {
            end_all(vec![h]);
        }
    }

    pub fn status(&self) -> PoolStatus {
        let (lock, cv) = &*self.shared;
        let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
        // A helper killed since is not ready: gone from the count, and
        // the refill told.
        let before = st.helpers.len();
        prune(&mut st);
        if st.helpers.len() < before {
            cv.notify_all();
        }
        let ready = st.helpers.iter_mut().filter_map(|h| h.link.ready()).count();
        PoolStatus {
            size: st.size,
            ready,
            warming: st.helpers.len() - ready,
            taken: st.taken,
            last_error: st.last_error.as_ref().map(|e| e.message.clone()),
        }
    }

    /// Wait (up to `timeout`) until `n` sandboxes are ready; whether they
    /// are.
    pub fn wait_ready(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.status().ready >= n {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let (lock, cv) = &*self.shared;
        let helpers = {
            let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
            st.closing = true;
            std::mem::take(&mut st.helpers)
        };
        cv.notify_all();
        if let Some(t) = self.refill.take() {
            let _ = t.join();
        }
        end_all(helpers.into());
        let exiting = {
            let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::take(&mut st.exiting)
        };
        for pid in exiting {
            let _ = crate::sys::raw::waitpid(pid, 0);
        }
    }
}

/// End unclaimed helpers: closing a helper's control socket makes it kill
/// its sandbox, remove the cgroup leaf and exit; then reap it.
fn end_all(helpers: Vec<HelperChild>) {
    let mut processes = Vec::with_capacity(helpers.len());
    for h in helpers {
        let HelperChild { process, link } = h;
        drop(link);
        processes.push(process);
    }
    for mut p in processes {
        let _ = p.wait();
    }
}

/// Longest a claim waits for the refill to start a sandbox in an empty
/// pool (starting one takes about a millisecond; a cold launch, many).
const SPAWN_WAIT: Duration = Duration::from_millis(500);

/// Whether the refill is starting (or is about to start) a sandbox: the
/// pool is short and its warm-ups are not failing (then it backs off).
fn refill_due(st: &State) -> bool {
    !st.closing && st.failures == 0 && present(st) < st.size
}

/// Helpers the pool holds, and (resident sandboxes) those that come back
/// when their command ends.
fn present(st: &State) -> usize {
    st.helpers.len() + if st.resident { st.in_flight } else { 0 }
}

/// How often the pool's thread looks for helpers whose warm-up failed.
const PRUNE_EVERY: Duration = Duration::from_millis(500);

/// Drop (and reap) helpers that answered before they were claimed: their
/// warm-up failed, or their sandbox ended while it waited.
fn prune(st: &mut State) {
    // Helpers of ended commands, once they have exited.
    st.exiting
        .retain(|pid| matches!(crate::sys::raw::waitpid(*pid, libc::WNOHANG), Ok(None)));
    let mut i = 0;
    while i < st.helpers.len() {
        let h = &mut st.helpers[i];
        let was_ready = h.link.ready().is_some();
        // A ready helper says nothing more until its claim: one whose end
        // closed since was killed (and its sandbox with it), and must not
        // be handed out. Only a warm-up that never got ready counts as a
        // failure.
        if h.link.try_answer() {
            if let Some(mut h) = st.helpers.remove(i)
                && let Err(e) = h.wait()
                && !was_ready
            {
                st.failures = st.failures.saturating_add(1);
                st.last_error = Some(e.failure());
            }
            continue;
        }
        i += 1;
    }
}

/// The pool's thread: keep `size` helpers spawned, backing off while
/// warm-ups fail.
fn refill(
    shared: &(Mutex<State>, Condvar),
    binary: &Path,
    shape: &Spec,
    lifeline: Option<OwnedFd>,
    gives_back: bool,
) {
    let (lock, cv) = shared;
    loop {
        let backoff = {
            let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
            prune(&mut st);
            // A command that runs gets the CPUs to itself: the refill
            // waits for its end, unless no sandbox is left to serve the
            // next one.
            while !st.closing
                && (present(&st) >= st.size || (st.in_flight > 0 && !st.helpers.is_empty()))
            {
                st = cv
                    .wait_timeout(st, PRUNE_EVERY)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                prune(&mut st);
            }
            if st.closing {
                return;
            }
            (st.failures > 0)
                .then(|| Duration::from_millis(10u64 << st.failures.min(10)).min(MAX_BACKOFF))
        };
        if let Some(pause) = backoff {
            let st = lock.lock().unwrap_or_else(|p| p.into_inner());
            let (st, _) = cv
                .wait_timeout_while(st, pause, |s| !s.closing)
                .unwrap_or_else(|p| p.into_inner());
            if st.closing {
                return;
            }
        }
        let lifeline_fd = lifeline.as_ref().map(|l| l.as_fd());
        let spawned = HelperChild::spawn_warm(binary, shape, lifeline_fd, gives_back);
        let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
        match spawned {
            Ok(h) if !st.closing => st.helpers.push_back(h),
            Ok(h) => {
                drop(st);
                end_all(vec![h]);
                return;
            }
            Err(e) => {
                st.failures = st.failures.saturating_add(1);
                st.last_error = Some(e.failure());
            }
        }
        drop(st);
        // A claim may be waiting for this start (Pool::take).
        cv.notify_all();
    }
}
