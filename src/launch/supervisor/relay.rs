//! The output relay: the workload's stdout/stderr pipes → hutch's own
//! stdout/stderr, with the output cap, bounded captures, and writes that
//! never block the supervisor's loop.
//!
//! Whatever the caller does with its end (reads late, never reads, stops
//! a terminal with ^S), the supervisor keeps its timer and signals: output
//! waits in a bounded buffer per stream, the pipe from the workload is not
//! read while that buffer is full (so the workload blocks, as it would
//! writing to the caller directly), and what is still buffered when the
//! sandbox is over is given until the deadline, or until a forwarded
//! signal, and then dropped.

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

use serde::{Deserialize, Serialize};

use crate::sys::{Errno, raw};

/// Bytes buffered per stream before the workload's pipe is left unread.
pub const MAX_PENDING: usize = 256 * 1024;
/// Bytes read from a pipe at a time.
const CHUNK: usize = 64 * 1024;
/// Largest write to an fd that can only be guarded by poll (a pipe or
/// FIFO we could not reopen non-blocking): a pipe that polls writable
/// takes this much without blocking.
const GUARDED_WRITE: usize = libc::PIPE_BUF;

/// First and last bytes of a stream, bounded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Captured {
    pub head: Vec<u8>,
    pub tail: Vec<u8>,
    /// Bytes the stream carried in all.
    pub total: u64,
}

struct Capture {
    limit: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl Capture {
    fn new(limit: usize) -> Self {
        Capture {
            limit,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let room = self.limit.saturating_sub(self.head.len());
        let take = room.min(data.len());
        self.head.extend_from_slice(&data[..take]);
        data = &data[take..];
        if data.len() > self.limit {
            data = &data[data.len() - self.limit..];
        }
        self.tail.extend(data);
        while self.tail.len() > self.limit {
            self.tail.pop_front();
        }
    }

    fn finish(self) -> Captured {
        Captured {
            head: self.head,
            tail: self.tail.into(),
            total: self.total,
        }
    }
}

/// How bytes reach one of hutch's own output fds.
enum Out {
    /// A regular file or a device like /dev/null: writes do not wait on
    /// anyone.
    Direct(RawFd),
    /// A pipe, FIFO or terminal, reopened through /proc/self/fd with
    /// O_NONBLOCK: a description of our own, so the caller's stays as it
    /// is.
    NonBlocking(OwnedFd),
    /// A socket: send(MSG_DONTWAIT).
    Socket(RawFd),
    /// A pipe we could not reopen: written only when poll says writable,
    /// at most [`GUARDED_WRITE`] bytes at a time.
    Guarded(RawFd),
}

impl Out {
    fn for_fd(fd: RawFd) -> Out {
        // SAFETY: 1 and 2 are open for the supervisor's whole life.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        match raw::file_type(borrowed) {
            Ok(libc::S_IFSOCK) => Out::Socket(fd),
            Ok(libc::S_IFIFO) => Out::reopen(fd),
            Ok(libc::S_IFCHR) if raw::isatty(fd) => Out::reopen(fd),
            _ => Out::Direct(fd),
        }
    }

    fn reopen(fd: RawFd) -> Out {
        let path = format!("/proc/self/fd/{fd}\0");
        let path = std::ffi::CStr::from_bytes_with_nul(path.as_bytes()).expect("one NUL");
        match raw::open(path, libc::O_WRONLY | libc::O_NONBLOCK | libc::O_NOCTTY) {
            Ok(own) => Out::NonBlocking(own),
            Err(_) => Out::Guarded(fd),
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Out::NonBlocking(own) => own.as_fd(),
            // SAFETY: 1 and 2 stay open for the supervisor's whole life.
            Out::Direct(fd) | Out::Socket(fd) | Out::Guarded(fd) => unsafe {
                BorrowedFd::borrow_raw(*fd)
            },
        }
    }

    /// Whether writes must wait for poll to say writable.
    fn polled(&self) -> bool {
        !matches!(self, Out::Direct(_))
    }

    /// Write what can be written now; `Ok(0)` when the fd would block.
    fn write(&self, data: &[u8]) -> Result<usize, Errno> {
        let r = match self {
            Out::Direct(_) | Out::NonBlocking(_) => raw::write(self.fd(), data),
            Out::Guarded(_) => raw::write(self.fd(), &data[..data.len().min(GUARDED_WRITE)]),
            Out::Socket(_) => raw::send_now(self.fd(), data),
        };
        match r {
            Err(Errno::EAGAIN | Errno::EINTR) => Ok(0),
            r => r,
        }
    }
}

/// One relayed stream.
struct Stream {
    pipe: Option<OwnedFd>,
    out: Option<Out>,
    pending: VecDeque<u8>,
    capture: Option<Capture>,
}

/// Output relayed from the workload to hutch's stdout/stderr.
pub struct Relay {
    limit: Option<u64>,
    /// Bytes of output accepted (within the cap).
    pub written: u64,
    /// Bytes the workload wrote, the discarded ones too.
    pub read: u64,
    /// Bytes accepted but never delivered (the reader did not keep up
    /// before the sandbox's time was over, or went away).
    pub undelivered: u64,
    pub truncated: bool,
    streams: [Stream; 2],
    buf: Vec<u8>,
}

/// What the supervisor's poll loop should wait for on one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interest {
    /// Read the workload's pipe (there is room to buffer).
    pub read: bool,
    /// Write to our fd (something is buffered and the fd is polled).
    pub write: bool,
}

impl Relay {
    /// `pipes[i]` relays to fd 1 + i.
    pub fn new(pipes: [Option<OwnedFd>; 2], limit: Option<u64>, capture: Option<usize>) -> Relay {
        let [out, err] = pipes;
        let stream = |pipe: Option<OwnedFd>, fd: RawFd| Stream {
            out: pipe.as_ref().map(|_| Out::for_fd(fd)),
            pipe,
            pending: VecDeque::new(),
            capture: capture.map(Capture::new),
        };
        Relay {
            limit,
            written: 0,
            read: 0,
            undelivered: 0,
            truncated: false,
            streams: [stream(out, 1), stream(err, 2)],
            buf: Vec::new(),
        }
    }

    /// Relay `pipe` as stream `i` from now on (the master of the
    /// workload's terminal, which hutch init sends once it is open).
    pub fn attach(&mut self, i: usize, pipe: OwnedFd) {
        let s = &mut self.streams[i];
        s.out = Some(Out::for_fd(1 + i as RawFd));
        s.pipe = Some(pipe);
    }

    /// Whether output is still buffered.
    pub fn pending(&self) -> bool {
        self.streams.iter().any(|s| !s.pending.is_empty())
    }

    pub fn interest(&self, i: usize) -> Interest {
        let s = &self.streams[i];
        Interest {
            read: s.pipe.is_some() && s.pending.len() < MAX_PENDING,
            write: !s.pending.is_empty() && s.out.as_ref().is_some_and(Out::polled),
        }
    }

    pub fn pipe_fd(&self, i: usize) -> Option<BorrowedFd<'_>> {
        self.streams[i].pipe.as_ref().map(|p| p.as_fd())
    }

    pub fn out_fd(&self, i: usize) -> Option<BorrowedFd<'_>> {
        self.streams[i].out.as_ref().map(Out::fd)
    }

    /// Every process of the sandbox is gone: take what is left in the
    /// pipes (at most their capacity; nobody can write more) and close
    /// them, whether or not there is room in the buffers.
    pub fn drain(&mut self) {
        for i in 0..2 {
            while self.streams[i].pipe.is_some() {
                self.read_chunk(i, CHUNK);
                self.flush_direct(i);
            }
        }
    }

    /// The workload's pipe `i` is readable: take what it has (as far as
    /// there is room).
    pub fn read(&mut self, i: usize) {
        let room = MAX_PENDING.saturating_sub(self.streams[i].pending.len());
        self.read_chunk(i, room.clamp(1, CHUNK));
        self.flush_direct(i);
    }

    fn read_chunk(&mut self, i: usize, want: usize) {
        if self.buf.is_empty() {
            // Allocated on first output only: most spawns relay nothing.
            self.buf.resize(CHUNK, 0);
        }
        let Some(pipe) = &self.streams[i].pipe else {
            return;
        };
        match raw::read(pipe.as_fd(), &mut self.buf[..want]) {
            Ok(0) => self.streams[i].pipe = None,
            Ok(n) => {
                let data = std::mem::take(&mut self.buf);
                self.accept(i, &data[..n]);
                self.buf = data;
            }
            Err(_) => self.streams[i].pipe = None,
        }
    }

    fn accept(&mut self, i: usize, data: &[u8]) {
        let s = &mut self.streams[i];
        self.read += data.len() as u64;
        if let Some(c) = &mut s.capture {
            c.push(data);
        }
        let allowed = match self.limit {
            Some(limit) => (limit.saturating_sub(self.written) as usize).min(data.len()),
            None => data.len(),
        };
        if allowed < data.len() {
            self.truncated = true;
        }
        self.written += allowed as u64;
        if s.out.is_some() {
            s.pending.extend(&data[..allowed]);
        } else {
            self.undelivered += allowed as u64;
        }
    }

    /// A direct fd never waits: write its buffer out at once.
    fn flush_direct(&mut self, i: usize) {
        if matches!(self.streams[i].out, Some(Out::Direct(_))) {
            self.write(i);
        }
    }

    /// Our fd `i` is writable (or direct): write what it takes.
    pub fn write(&mut self, i: usize) {
        let s = &mut self.streams[i];
        while !s.pending.is_empty() {
            let Some(out) = &s.out else { break };
            let (front, _) = s.pending.as_slices();
            match out.write(front) {
                Ok(0) => break,
                Ok(n) => {
                    s.pending.drain(..n);
                    // A guarded fd takes one write per "writable": the
                    // next could block.
                    if matches!(out, Out::Guarded(_)) {
                        break;
                    }
                }
                // A closed stdout only means nobody reads; the sandbox
                // goes on.
                Err(_) => {
                    self.undelivered += s.pending.len() as u64;
                    s.pending.clear();
                    s.out = None;
                }
            }
        }
    }

    /// Give up on what is still buffered.
    pub fn drop_pending(&mut self) {
        for s in &mut self.streams {
            self.undelivered += s.pending.len() as u64;
            s.pending.clear();
        }
    }

    /// The captures of stdout and stderr.
    pub fn finish(self) -> [Option<Captured>; 2] {
        let [out, err] = self.streams;
        [
            out.capture.map(Capture::finish),
            err.capture.map(Capture::finish),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn capture_keeps_head_and_tail_within_the_limit() {
        let mut c = Capture::new(4);
        c.push(b"abcdefghij");
        c.push(b"kl");
        let got = c.finish();
        assert_eq!(got.head, b"abcd");
        assert_eq!(got.tail, b"ijkl");
        assert_eq!(got.total, 12);
    }

    #[test]
    fn a_pipe_nobody_reads_fills_the_buffer_and_never_blocks() {
        // Our "stdout" is a pipe no one reads; the relay must only buffer.
        let (_keep_reader, w) = raw::pipe(0).unwrap();
        let out = Out::reopen(w.as_raw_fd());
        assert!(
            matches!(out, Out::NonBlocking(_)),
            "a pipe reopens non-blocking"
        );
        let big = vec![b'x'; 1 << 20];
        let mut sent = 0;
        loop {
            match out.write(&big) {
                Ok(0) => break,
                Ok(n) => sent += n,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(
            sent >= 4096 && sent < big.len(),
            "stopped at the pipe's size: {sent}"
        );
    }
}
