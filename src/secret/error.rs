//! Why a secret could not be armed. Every message names the secret and its
//! source, never its value.

/// A secret's source could not be read, or what it held cannot be a
/// credential. Launch refuses with exit 125 before anything starts.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(
        "secret {name:?}: environment variable {var} is not set in hutch's environment (export it before the launch)"
    )]
    EnvMissing { name: String, var: String },
    #[error(
        "secret {name:?}: cannot read {what}: {err} (check that it exists and is readable by the launching user)"
    )]
    Read {
        name: String,
        what: String,
        err: std::io::Error,
    },
    #[error(
        "secret {name:?}: {what} is not a regular file (a secret file is read whole at launch)"
    )]
    NotRegular { name: String, what: String },
    #[error("secret {name:?}: {what} gave nothing before its end (the value is empty)")]
    Empty { name: String, what: String },
    #[error(
        "secret {name:?}: {what} holds more than {max} bytes (a credential is smaller; is this the right source?)"
    )]
    TooLarge {
        name: String,
        what: String,
        max: usize,
    },
    #[error(
        "secret {name:?}: {what} did not reach its end within {secs} s (close the writing end after the value)"
    )]
    Timeout {
        name: String,
        what: String,
        secs: u64,
    },
    #[error(
        "secret {name:?}: {what} holds a control character (CR, LF, NUL...) that a request header cannot carry"
    )]
    ControlCharacter { name: String, what: String },
    #[error("secret {name:?}: cannot make its placeholder: {err}")]
    Random {
        name: String,
        err: crate::sys::SysError,
    },
}
