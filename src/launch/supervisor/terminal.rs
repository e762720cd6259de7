//! `hutch run --pty`: the supervisor's side of the workload's terminal.
//!
//! hutch init opens the terminal in the sandbox's own devpts (after
//! pivot_root, so never the host's: a host pty inside would let the
//! sandbox reach the host's /dev/pts) and sends its master over the
//! console socket made here. The supervisor then relays hutch's stdin to
//! the master (this module) and the master to hutch's stdout (the output
//! relay, as stream 0). When hutch's stdin is a terminal it is put in raw
//! mode for the run (restored when this is dropped: every way the
//! supervisor's loop ends) and its size is copied on SIGWINCH.

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::termios::{self, SetArg, Termios};

use crate::launch::options::{RunOptions, TerminalOptions, WorkloadStdio};
use crate::spec::{FsOp, Init, Spec, SpecError};
use crate::sys::{self, Errno, SysError, raw};

/// The size of a terminal nobody gave one.
pub(crate) const DEFAULT_SIZE: (u16, u16) = (80, 24);
/// Input buffered for the master before hutch's stdin is left unread.
const MAX_PENDING: usize = 64 * 1024;
/// The terminal's end-of-file character (VEOF, ^D): what hutch's stdin
/// turns into when it ends.
const EOF_CHAR: u8 = 0x04;

/// The supervisor's side of the workload's terminal.
pub(crate) struct Terminal {
    /// The console socket until hutch init sent the master on it.
    console: Option<OwnedFd>,
    /// The master, for input (the output relay holds a copy to read).
    master: Option<OwnedFd>,
    /// hutch's stdin, until it ends.
    stdin: Option<OwnedFd>,
    /// hutch's stdin when it is a terminal (another copy: it outlives
    /// the input's end, for its size and mode).
    tty: Option<OwnedFd>,
    pending: VecDeque<u8>,
    size: (u16, u16),
    /// SIGWINCH, blocked and read here while stdin is a terminal.
    winch: Option<SignalFd>,
    /// Restored on drop.
    saved: Option<Termios>,
}

/// What the supervisor's loop should wait for on the terminal.
#[derive(Clone, Copy)]
pub(crate) enum TerminalReady {
    Console,
    Stdin,
    Master,
    Winch,
}

impl Terminal {
    /// Before the sandbox is forked: the console socket pair (the second
    /// is hutch init's) and the initial size.
    pub(crate) fn new(opts: &TerminalOptions) -> Result<(Terminal, OwnedFd), SysError> {
        let (ours, theirs) = sys::socket::seqpacket_pair()?;
        let tty = if sys::isatty(0) {
            sys::dup_fd(0).ok()
        } else {
            None
        };
        let size = match (opts.size, &tty) {
            (Some(s), _) => s,
            (None, Some(t)) => raw::window_size(t.as_fd()).unwrap_or(DEFAULT_SIZE),
            (None, None) => DEFAULT_SIZE,
        };
        let t = Terminal {
            console: Some(ours),
            master: None,
            stdin: sys::dup_fd(0).ok(),
            tty,
            pending: VecDeque::new(),
            size,
            winch: None,
            saved: None,
        };
        Ok((t, theirs))
    }

    /// After the fork (the sandbox does not inherit either): raw mode on
    /// a terminal stdin, and SIGWINCH read through a signalfd.
    pub(crate) fn take_over_stdin(&mut self) -> Result<(), SysError> {
        let Some(tty) = &self.tty else {
            return Ok(());
        };
        let mut winch = SigSet::empty();
        winch.add(Signal::SIGWINCH);
        winch
            .thread_block()
            .map_err(|e| SysError::new("sigprocmask(SIG_BLOCK, SIGWINCH)", e))?;
        self.winch = Some(
            SignalFd::with_flags(&winch, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
                .map_err(|e| SysError::new("signalfd(SIGWINCH)", e))?,
        );
        let saved =
            termios::tcgetattr(tty).map_err(|e| SysError::new("tcgetattr(stdin)", e))?;
        let mut raw_mode = saved.clone();
        termios::cfmakeraw(&mut raw_mode);
        termios::tcsetattr(tty, SetArg::TCSANOW, &raw_mode)
            .map_err(|e| SysError::new("tcsetattr(stdin, raw)", e))?;
        self.saved = Some(saved);
        Ok(())
    }

    /// The initial size (columns, rows).
    pub(crate) fn size(&self) -> (u16, u16) {
        self.size
    }

    /// The fds to poll now, each with its tag and whether it is polled
    /// for writing.
    pub(crate) fn interest(&self) -> Vec<(TerminalReady, BorrowedFd<'_>, bool)> {
        let mut v = Vec::with_capacity(4);
        // A resize first: a caller that resized and then wrote sees its
        // input read at the new size.
        if let Some(w) = &self.winch {
            v.push((TerminalReady::Winch, w.as_fd(), false));
        }
        if let Some(c) = &self.console {
            v.push((TerminalReady::Console, c.as_fd(), false));
        }
        if let Some(m) = &self.master {
            if let Some(s) = &self.stdin
                && self.pending.len() < MAX_PENDING
            {
                v.push((TerminalReady::Stdin, s.as_fd(), false));
            }
            if !self.pending.is_empty() {
                v.push((TerminalReady::Master, m.as_fd(), true));
            }
        }
        v
    }

    /// hutch init sent the master: set its size; returns a copy for the
    /// output relay to read. An error or a closed socket gives nothing
    /// (init reports its own failure).
    pub(crate) fn receive_master(&mut self) -> Option<OwnedFd> {
        let console = self.console.take()?;
        let (_, mut fds) = sys::socket::recv(console.as_fd()).ok()??;
        // hutch init set its size before the workload started.
        let master = fds.pop()?;
        let reader = master.try_clone().ok()?;
        self.master = Some(master);
        Some(reader)
    }

    /// hutch's stdin is readable: take what it has. Its end (a pipe's
    /// EOF, a terminal that hung up) reaches the workload as one ^D: a
    /// terminal has no end of file but the character that makes a read
    /// return 0.
    pub(crate) fn read_stdin(&mut self) {
        let Some(stdin) = &self.stdin else { return };
        let mut buf = [0u8; 4096];
        let room = MAX_PENDING.saturating_sub(self.pending.len()).min(buf.len());
        match raw::read(stdin.as_fd(), &mut buf[..room.max(1)]) {
            Ok(0) | Err(_) => {
                self.stdin = None;
                self.pending.push_back(EOF_CHAR);
            }
            Ok(n) => self.pending.extend(&buf[..n]),
        }
    }

    /// The master takes input: write what it takes without blocking.
    pub(crate) fn write_master(&mut self) {
        let Some(master) = &self.master else { return };
        // The output relay reads the same open file description: it is
        // non-blocking only around this write (one thread).
        let fd = master.as_fd();
        if set_nonblocking(fd, true).is_err() {
            return;
        }
        while !self.pending.is_empty() {
            let (front, _) = self.pending.as_slices();
            match raw::write(fd, front) {
                Ok(n) if n > 0 => {
                    self.pending.drain(..n);
                }
                Ok(_) | Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => continue,
                // The terminal's other end is gone: nobody reads input.
                Err(_) => {
                    self.pending.clear();
                    self.stdin = None;
                    break;
                }
            }
        }
        let _ = set_nonblocking(fd, false);
    }

    /// SIGWINCH: copy the size of hutch's stdin to the workload's terminal.
    pub(crate) fn resize_from_stdin(&mut self) {
        let Some(w) = &self.winch else { return };
        while let Ok(Some(_)) = w.read_signal() {}
        let Some(tty) = &self.tty else { return };
        if let Ok(size) = raw::window_size(tty.as_fd()) {
            self.size = size;
            if let Some(m) = &self.master {
                let _ = raw::set_window_size(m.as_fd(), size.0, size.1);
            }
        }
    }
}

fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> Result<(), Errno> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    let flags = if on {
        flags | OFlag::O_NONBLOCK
    } else {
        flags & !OFlag::O_NONBLOCK
    };
    fcntl(fd, FcntlArg::F_SETFL(flags)).map(drop)
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if let (Some(saved), Some(tty)) = (&self.saved, &self.tty) {
            let _ = termios::tcsetattr(tty, SetArg::TCSANOW, saved);
        }
        if self.winch.take().is_some() {
            let mut winch = SigSet::empty();
            winch.add(Signal::SIGWINCH);
            let _ = winch.thread_unblock();
        }
    }
}

/// Whether a Spec and options can have a terminal: the workload leads a
/// session of its own (the terminal becomes its controlling terminal),
/// its stdio is not /dev/null, and `/dev` is hutch's own (with its own
/// devpts instance) and nothing later mounts over it: else `/dev/ptmx`
/// might be the host's, and the sandbox would hold a host terminal.
pub(crate) fn check(spec: &Spec, opts: &RunOptions) -> Result<(), SpecError> {
    if !spec.new_session {
        return Err(SpecError::new(
            "new_session",
            "a terminal needs the workload in a session of its own (new_session = true)",
        ));
    }
    if opts.stdio == WorkloadStdio::Null {
        return Err(SpecError::new(
            "",
            "a terminal is the workload's stdio: it cannot also be /dev/null",
        ));
    }
    if spec.init != Init::Hutch {
        return Err(SpecError::new(
            "init",
            "a terminal is opened by hutch init for the workload: not with init = \"none\"",
        ));
    }
    let dev = Path::new("/dev");
    let last_over_dev = spec.fs.iter().enumerate().rev().find(|(_, op)| {
        let d = op.dest();
        d == dev || dev.starts_with(d) || d.starts_with("/dev/pts") || d == Path::new("/dev/ptmx")
    });
    match last_over_dev {
        Some((_, FsOp::Dev { dest, .. })) if dest == dev => Ok(()),
        Some((i, op)) => Err(SpecError::new(
            format!("fs[{i}]"),
            format!(
                "a terminal is opened in the sandbox's own devpts, and this {} operation on {} would put another /dev/ptmx there (perhaps the host's): drop it, or add a `dev` operation at /dev after it",
                op.name(),
                op.dest().display()
            ),
        )),
        None => Err(SpecError::new(
            "fs",
            "a terminal is opened in the sandbox's own devpts: the Spec needs a `dev` operation at /dev (the default profile has one)",
        )),
    }
}
