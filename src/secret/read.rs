//! Reading a secret's value from its source on the host, at launch: the
//! caller's environment, a file, or an inherited fd. Size-capped and
//! bounded in time; what can fail names the secret and the source, never
//! the value.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::SecretValue;
use super::error::SecretError;
use crate::spec::{Secret, SecretSource};

/// The largest value read (real API keys and tokens are under 1 KiB; a
/// PEM bundle is not a header value).
pub(crate) const MAX_SECRET_BYTES: usize = 64 * 1024;
/// How long an fd source may take to reach its end (a pipe whose writer
/// never closes must not hang the launch).
pub(crate) const FD_READ_DEADLINE: Duration = Duration::from_secs(10);

/// Whose an fd source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FdOwner {
    /// hutch's own (the CLI, the helper): read, then closed, so that
    /// nothing later (`inherit_open_fds`) passes it on.
    Hutch,
    /// The library's caller: read through a duplicate, left open.
    Caller,
}

/// Read `secret`'s value from its source.
pub(crate) fn read_value(secret: &Secret, owner: FdOwner) -> Result<SecretValue, SecretError> {
    let name = secret.name.clone();
    let (what, bytes) = match &secret.from {
        SecretSource::Env(var) => {
            let what = format!("environment variable {var}");
            match std::env::var_os(var) {
                Some(v) => (what, std::os::unix::ffi::OsStringExt::into_vec(v)),
                None => {
                    return Err(SecretError::EnvMissing {
                        name,
                        var: var.clone(),
                    });
                }
            }
        }
        SecretSource::File(path) => {
            let what = format!("file {}", path.display());
            let bytes = read_file(path).map_err(|e| match e {
                FileError::Io(err) => SecretError::Read {
                    name: name.clone(),
                    what: what.clone(),
                    err,
                },
                FileError::NotRegular => SecretError::NotRegular {
                    name: name.clone(),
                    what: what.clone(),
                },
                FileError::TooLarge => SecretError::TooLarge {
                    name: name.clone(),
                    what: what.clone(),
                    max: MAX_SECRET_BYTES,
                },
            })?;
            (what, strip_one_newline(bytes))
        }
        SecretSource::Fd(fd) => {
            let what = format!("fd {fd}");
            let owned = match owner {
                FdOwner::Hutch => crate::sys::take_inherited_fd(*fd),
                FdOwner::Caller => crate::sys::dup_caller_fd(*fd),
            }
            .map_err(|err| SecretError::Read {
                name: name.clone(),
                what: what.clone(),
                err,
            })?;
            let bytes = read_fd(owned, FD_READ_DEADLINE).map_err(|e| match e {
                FdError::Io(err) => SecretError::Read {
                    name: name.clone(),
                    what: what.clone(),
                    err,
                },
                FdError::TooLarge => SecretError::TooLarge {
                    name: name.clone(),
                    what: what.clone(),
                    max: MAX_SECRET_BYTES,
                },
                FdError::Timeout => SecretError::Timeout {
                    name: name.clone(),
                    what: what.clone(),
                    secs: FD_READ_DEADLINE.as_secs(),
                },
            })?;
            (what, strip_one_newline(bytes))
        }
    };
    let value = SecretValue::new(bytes);
    check_value(&value).map_err(|bad| match bad {
        BadValue::Empty => SecretError::Empty {
            name: name.clone(),
            what: what.clone(),
        },
        BadValue::Control => SecretError::ControlCharacter {
            name: name.clone(),
            what: what.clone(),
        },
        BadValue::TooLarge => SecretError::TooLarge {
            name: name.clone(),
            what: what.clone(),
            max: MAX_SECRET_BYTES,
        },
    })?;
    Ok(value)
}

enum BadValue {
    Empty,
    Control,
    TooLarge,
}

/// A value goes into a header: printable bytes and tabs only, not empty.
fn check_value(v: &SecretValue) -> Result<(), BadValue> {
    let b = v.expose();
    if b.is_empty() {
        return Err(BadValue::Empty);
    }
    if b.len() > MAX_SECRET_BYTES {
        return Err(BadValue::TooLarge);
    }
    if b.iter().any(|&c| (c < 0x20 && c != b'\t') || c == 0x7f) {
        return Err(BadValue::Control);
    }
    Ok(())
}

/// One trailing `\n` (or `\r\n`) goes: `echo KEY > file` is the common way
/// to write one.
fn strip_one_newline(mut b: Vec<u8>) -> Vec<u8> {
    if b.last() == Some(&b'\n') {
        b.pop();
        if b.last() == Some(&b'\r') {
            b.pop();
        }
    }
    b
}

enum FileError {
    Io(std::io::Error),
    NotRegular,
    TooLarge,
}

/// A regular file, read whole (opened non-blocking so that a FIFO planted
/// at the path cannot hang the launch; it is refused as not regular).
fn read_file(path: &std::path::Path) -> Result<Vec<u8>, FileError> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(FileError::Io)?;
    let ft = f.metadata().map_err(FileError::Io)?.file_type();
    if !ft.is_file() || ft.is_fifo() {
        return Err(FileError::NotRegular);
    }
    let mut out = Vec::with_capacity(MAX_SECRET_BYTES + 3);
    f.take(MAX_SECRET_BYTES as u64 + 3)
        .read_to_end(&mut out)
        .map_err(FileError::Io)?;
    if out.len() > MAX_SECRET_BYTES + 2 {
        return Err(FileError::TooLarge);
    }
    Ok(out)
}

enum FdError {
    Io(std::io::Error),
    TooLarge,
    Timeout,
}

/// An fd read to its end (then closed), waiting at most `deadline` for the
/// writer: a pipe is the usual source (`--secret ...,from-fd=3 3< <(vault
/// read ...)`).
fn read_fd(fd: OwnedFd, deadline: Duration) -> Result<Vec<u8>, FdError> {
    let until = Instant::now() + deadline;
    // Room for the largest value up front: no reallocation leaves a copy
    // of a partial value behind in freed memory.
    let mut out = Vec::with_capacity(MAX_SECRET_BYTES + 4096);
    let mut f = std::fs::File::from(fd);
    let mut buf = [0u8; 4096];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(FdError::Timeout);
        }
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut pfd = [PollFd::new(f.as_fd(), PollFlags::POLLIN)];
        match poll(&mut pfd, PollTimeout::from(ms)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(FdError::Io(e.into())),
        }
        match f.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if out.len() > MAX_SECRET_BYTES + 2 {
                    zeroize::Zeroize::zeroize(&mut buf);
                    return Err(FdError::TooLarge);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(FdError::Io(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(from: SecretSource) -> Secret {
        let mut s: Secret = serde_json::from_value(serde_json::json!({
            "name": "k", "env": "K", "from": {"env": "X"}, "hosts": ["a.example"]
        }))
        .unwrap();
        s.from = from;
        s
    }

    #[test]
    fn a_file_is_read_whole_and_loses_one_newline() {
        let dir = tempdir();
        let p = dir.join("key");
        std::fs::write(&p, "sk-test-123\n").unwrap();
        let v = read_value(&secret(SecretSource::File(p.clone())), FdOwner::Hutch).unwrap();
        assert_eq!(v.expose(), b"sk-test-123");
        std::fs::write(&p, "").unwrap();
        let e = read_value(&secret(SecretSource::File(p.clone())), FdOwner::Hutch).unwrap_err();
        assert!(matches!(e, SecretError::Empty { .. }), "{e}");
        std::fs::write(&p, vec![b'a'; MAX_SECRET_BYTES + 10]).unwrap();
        let e = read_value(&secret(SecretSource::File(p.clone())), FdOwner::Hutch).unwrap_err();
        assert!(matches!(e, SecretError::TooLarge { .. }), "{e}");
        std::fs::write(&p, "a\nb").unwrap();
        let e = read_value(&secret(SecretSource::File(p.clone())), FdOwner::Hutch).unwrap_err();
        assert!(matches!(e, SecretError::ControlCharacter { .. }), "{e}");
        // A missing file names the secret and the path, not a value.
        let e = read_value(
            &secret(SecretSource::File(dir.join("none"))),
            FdOwner::Hutch,
        )
        .unwrap_err();
        let line = e.to_string();
        assert!(
            line.starts_with("secret \"k\": cannot read file "),
            "{line}"
        );
        // A directory is not a regular file.
        let e = read_value(&secret(SecretSource::File(dir.clone())), FdOwner::Hutch).unwrap_err();
        assert!(matches!(e, SecretError::NotRegular { .. }), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_missing_env_variable_is_named() {
        let e = read_value(
            &secret(SecretSource::Env("HUTCH_TEST_NOT_SET_XYZ".into())),
            FdOwner::Hutch,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("HUTCH_TEST_NOT_SET_XYZ") && e.contains("\"k\""),
            "{e}"
        );
    }

    #[test]
    fn an_fd_is_read_to_its_end_and_closed() {
        let (r, w) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&w, b"tok-1\n").unwrap();
        drop(w);
        let raw = std::os::fd::IntoRawFd::into_raw_fd(r);
        let v = read_value(&secret(SecretSource::Fd(raw)), FdOwner::Hutch).unwrap();
        assert_eq!(v.expose(), b"tok-1");
        assert!(crate::sys::check_open(raw).is_err(), "the fd is consumed");
        let e = read_value(&secret(SecretSource::Fd(raw)), FdOwner::Hutch).unwrap_err();
        assert!(matches!(e, SecretError::Read { .. }), "{e}");
    }

    #[test]
    fn an_fd_whose_writer_stays_open_times_out() {
        let (r, _w) = nix::unistd::pipe().unwrap();
        let e = read_fd(r, Duration::from_millis(50)).unwrap_err();
        assert!(matches!(e, FdError::Timeout));
    }

    fn tempdir() -> std::path::PathBuf {
        let mut b = [0u8; 8];
        crate::sys::getrandom(&mut b).unwrap();
        let d = std::env::temp_dir().join(format!("hutch-secret-{}", hex::encode(b)));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
