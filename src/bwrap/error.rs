//! Errors of the bubblewrap front end, in bubblewrap's shapes: `die()`'s
//! `bwrap: MESSAGE` and `die_with_error()`'s `bwrap: MESSAGE: STRERROR`,
//! exit status 1 (bubblewrap's `EXIT_FAILURE`).

/// One failure of `hutch-bwrap`. Display is the text after `bwrap: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BwrapError {
    /// `die (...)`: a message of its own.
    #[error("{0}")]
    Die(String),
    /// `die_with_error (...)`: a message, then the errno's text.
    #[error("{what}: {}", errno_text(*.errno))]
    WithErrno { what: String, errno: i32 },
    /// No command (bubblewrap prints its usage to stderr and exits 1).
    #[error("No command specified")]
    Usage,
}

impl BwrapError {
    pub fn die(msg: impl Into<String>) -> BwrapError {
        BwrapError::Die(msg.into())
    }

    pub fn errno(what: impl Into<String>, errno: i32) -> BwrapError {
        BwrapError::WithErrno {
            what: what.into(),
            errno,
        }
    }

    /// From an `std::io::Error` (its raw errno, EIO if it has none).
    pub fn io(what: impl Into<String>, e: &std::io::Error) -> BwrapError {
        BwrapError::errno(what, e.raw_os_error().unwrap_or(libc::EIO))
    }

    /// The line bubblewrap prints: `bwrap: ...` (with `--level-prefix`,
    /// `<3>` first: LOG_ERR).
    /// Control characters an argument carried into the message are
    /// escaped (`\n`), so that it stays one line whatever the argv held.
    pub fn line(&self, level_prefix: bool) -> String {
        let text: String = self
            .to_string()
            .chars()
            .flat_map(|c| {
                let escaped: Vec<char> = if c.is_control() {
                    c.escape_default().collect()
                } else {
                    vec![c]
                };
                escaped
            })
            .collect();
        format!("{}bwrap: {text}", if level_prefix { "<3>" } else { "" })
    }
}

/// strerror(3)'s text (glibc's wording, which bubblewrap prints).
pub fn errno_text(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno)
        .to_string()
        .split(" (os error")
        .next()
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_bubblewraps_shape() {
        let e = BwrapError::errno("Can't find source path /nope", libc::ENOENT);
        assert_eq!(
            e.line(false),
            "bwrap: Can't find source path /nope: No such file or directory"
        );
        assert_eq!(
            BwrapError::die("Unknown option --x").line(true),
            "<3>bwrap: Unknown option --x"
        );
        // Found by the fuzzer: an argument with a newline in a message.
        assert_eq!(
            BwrapError::die("Unknown option -\nx").line(false),
            "bwrap: Unknown option -\\nx"
        );
    }
}
