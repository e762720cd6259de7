//! The schema of credentials the sandbox never holds (issue 31,
//! `docs/secrets.md`): a [`Secret`] names where its value is on the host and
//! where the proxy may put it; a [`Gateway`] is a plain-HTTP door inside the
//! sandbox mapped to one HTTPS upstream; an [`Intercept`] opts one host into
//! TLS interception. No value is ever part of a Spec: only its source.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::size::ByteSize;

/// A credential kept on the host. Inside the sandbox, `env` holds a
/// placeholder random per sandbox; the proxy swaps it for the value on
/// requests to `hosts` (and refuses it anywhere else).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Secret {
    /// The secret's name: what audit lines, errors and `hutch ps` show
    /// (`[A-Za-z0-9_.-]`, at most 64 bytes, unique in a Spec).
    pub name: String,
    /// The sandbox's variable that holds the placeholder
    /// (`ANTHROPIC_API_KEY`); none: the placeholder is only in requests the
    /// proxy builds itself ([`Injection::Header`], [`Injection::Bearer`],
    /// [`Injection::Basic`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// Where the value is read on the host, when the sandbox is launched.
    pub from: SecretSource,
    /// Host patterns (the allow-list's syntax, optionally `:port`) the
    /// value may be sent to; each must be allowed by the network policy.
    pub hosts: Vec<String>,
    /// Methods it may go with (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Path prefixes it may go to (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// Where the value goes in a request.
    #[serde(default)]
    pub inject: Injection,
}

/// Where a secret's value is on the host: never the value itself.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum SecretSource {
    /// An environment variable of the launching process.
    Env(String),
    /// A file on the host (absolute path), read whole; one trailing
    /// newline is dropped.
    File(PathBuf),
    /// An fd the launching process inherited, read to its end.
    Fd(i32),
}

/// Where the proxy puts a secret's value in a request to one of its hosts.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Injection {
    /// The placeholder is replaced by the value wherever it appears in the
    /// request's header values (in `Authorization: Basic` too, decoded).
    #[default]
    Replace,
    /// This header is set to the value (`x-api-key`), whatever the client sent.
    Header(String),
    /// `Authorization: Bearer <value>`, whatever the client sent.
    Bearer,
    /// `Authorization: Basic base64(<user>:<value>)` (git over HTTPS).
    Basic(String),
}

/// A plain-HTTP endpoint inside the sandbox,
/// `http://127.0.0.1:3128/<name>/...` on the proxy's doors, mapped to one
/// HTTPS upstream: a client given it as its base URL needs no proxy
/// settings and no CA.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gateway {
    /// The first path segment of the gateway's URL (`[a-z0-9-]`).
    pub name: String,
    /// `https://host[:port][/base-path]`; the host must be allowed by the
    /// network policy.
    pub upstream: String,
    /// Sandbox variables set to the gateway's URL (`ANTHROPIC_BASE_URL`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Allowed methods (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Allowed path prefixes (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// Requests over the sandbox's life; past it, 429 and an audit line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u64>,
    /// Bytes both ways over the sandbox's life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<ByteSize>,
}

/// An allowed host whose TLS the proxy terminates (with a leaf of the
/// sandbox's own ephemeral CA) so that its requests can carry secrets and
/// follow rules. Every other allowed host stays an opaque tunnel.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Intercept {
    /// A host name (no pattern), optionally `:port` (default 443).
    pub host: String,
    /// Allowed methods (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Allowed path prefixes (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// Requests over the sandbox's life; past it, 429 and an audit line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u64>,
    /// Bytes both ways over the sandbox's life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<ByteSize>,
}
