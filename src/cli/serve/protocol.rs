//! The `hutch serve` wire format: one JSON document per line each way
//! (docs/machine.md, "hutch serve"). Requests are parsed here into typed
//! messages; events are built here, so the loop never touches JSON.

use serde_json::{Value, json};

use crate::cli::machine::{self, ErrorKind, MachineError};

/// Version of this protocol (the `hello` event's `protocol`). Adding a
/// field or an event is not a new version; renaming or removing one is.
pub(crate) const PROTOCOL: u32 = 1;

/// Longest request line, newline excluded (a `stdin` message carries its
/// data base64-encoded, so this bounds one message's data to ~12 MiB).
pub(crate) const MAX_LINE: usize = 16 << 20;
/// Most `argv` requests in flight at once.
pub(crate) const MAX_IN_FLIGHT: usize = 64;
/// Most bytes of one `stdout`/`stderr` event (before base64).
pub(crate) const CHUNK: usize = 64 << 10;
/// Most stdin bytes held for one request that its process has not read yet.
pub(crate) const MAX_STDIN_PENDING: usize = 16 << 20;
/// Most bytes held of an envelope (`json_stdout`, or a `report_fd` line):
/// the largest `--json` document hutch writes (a diff) is bounded at 256 MiB.
pub(crate) const MAX_ENVELOPE: usize = (256 << 20) + (4 << 20);
/// Lowest and highest descriptor number a request may ask for as `report_fd`.
pub(crate) const REPORT_FD_RANGE: std::ops::RangeInclusive<i32> = 3..=63;

/// Features a client may test for in `hello` (added ones never removed
/// within a protocol version).
const FEATURES: &[&str] = &[
    "argv",
    "stdin",
    "signal",
    "cancel",
    "report_fd",
    "json_stdout",
    "cwd",
    "env",
    "pty",
    "resize",
];

/// One parsed request line.
pub(crate) enum Request {
    Hello {
        id: Value,
        protocol: Option<u64>,
    },
    /// Run hutch's command line `argv` (without the program name).
    Argv {
        id: Value,
        argv: Vec<String>,
        stdin: bool,
        report_fd: Option<i32>,
        json_stdout: bool,
        /// The directory hutch runs in (default: the server's).
        cwd: Option<String>,
        /// Changes to the server's environment: a value sets, `null` unsets.
        env: Vec<(String, Option<String>)>,
        /// `"pty": true`: hutch's stdin is a terminal of the server's, of
        /// this size (`"pty_size": [cols, rows]`, default 80x24).
        pty: Option<(u16, u16)>,
    },
    Stdin {
        id: Value,
        data: Vec<u8>,
        eof: bool,
    },
    Signal {
        id: Value,
        signal: i32,
    },
    Cancel {
        id: Value,
    },
    /// The terminal of a `"pty": true` request takes a new size.
    Resize {
        id: Value,
        cols: u16,
        rows: u16,
    },
}

/// A request that could not be parsed: the id (when one was readable), the
/// verb (when known) and why.
pub(crate) struct BadRequest {
    pub id: Value,
    pub verb: Option<String>,
    pub error: Box<MachineError>,
}

fn bad(id: &Value, verb: Option<&str>, what: String, hint: &str) -> BadRequest {
    let mut error = MachineError::new(ErrorKind::Usage, format!("serve: {what}"));
    error.location = Some("serve".into());
    error.hint = Some(hint.into());
    BadRequest {
        id: id.clone(),
        verb: verb.map(str::to_owned),
        error: Box::new(error),
    }
}

/// A request's key in the table of requests in flight: its id as JSON text.
pub(crate) fn key(id: &Value) -> String {
    id.to_string()
}

/// Parse one request line.
pub(crate) fn parse(line: &[u8]) -> Result<Request, BadRequest> {
    let doc: Value = serde_json::from_slice(line).map_err(|e| {
        bad(
            &Value::Null,
            None,
            format!("a request line is not JSON ({e})"),
            "send one JSON object per line (docs/machine.md, \"hutch serve\")",
        )
    })?;
    let Value::Object(obj) = doc else {
        return Err(bad(
            &Value::Null,
            None,
            "a request line is not a JSON object".into(),
            "send one JSON object per line",
        ));
    };
    let id = obj.get("id").cloned().unwrap_or(Value::Null);
    if !(id.is_u64() || id.is_i64() || id.is_string()) {
        return Err(bad(
            &id,
            None,
            "a request has no \"id\" (a number or a string)".into(),
            "give every request an id; its events carry it",
        ));
    }
    let verb = obj.get("verb").and_then(Value::as_str).unwrap_or_default();
    let v = Some(verb);
    match verb {
        "hello" => Ok(Request::Hello {
            id,
            protocol: obj.get("protocol").and_then(Value::as_u64),
        }),
        "argv" => {
            let argv = obj
                .get("argv")
                .and_then(Value::as_array)
                .and_then(|a| {
                    a.iter()
                        .map(|s| s.as_str().map(str::to_owned))
                        .collect::<Option<Vec<_>>>()
                })
                .filter(|a| !a.is_empty())
                .ok_or_else(|| {
                    bad(
                        &id,
                        v,
                        "\"argv\" must be a non-empty list of strings".into(),
                        "e.g. {\"id\":1,\"verb\":\"argv\",\"argv\":[\"version\",\"--json\"]}",
                    )
                })?;
            if argv[0] == "serve" {
                return Err(bad(
                    &id,
                    v,
                    "\"serve\" cannot be run inside serve".into(),
                    "send the requests to this server instead",
                ));
            }
            let report_fd = match obj.get("report_fd") {
                None | Some(Value::Null) => None,
                Some(n) => Some(
                    n.as_i64()
                        .and_then(|n| i32::try_from(n).ok())
                        .filter(|n| REPORT_FD_RANGE.contains(n))
                        .ok_or_else(|| {
                            bad(
                                &id,
                                v,
                                format!("\"report_fd\" must be a number from 3 to 63, not {n}"),
                                "name the fd the argv gives to --result-fd or --status-fd",
                            )
                        })?,
                ),
            };
            let cwd = match obj.get("cwd") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(other) => {
                    return Err(bad(
                        &id,
                        v,
                        format!("\"cwd\" must be a string, not {other}"),
                        "send the client's working directory as a string",
                    ));
                }
            };
            let env = match obj.get("env") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Object(m)) => m
                    .iter()
                    .map(|(k, val)| match val {
                        Value::String(s) => Some((k.clone(), Some(s.clone()))),
                        Value::Null => Some((k.clone(), None)),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        bad(
                            &id,
                            v,
                            "\"env\" values must be strings (set) or null (unset)".into(),
                            "e.g. \"env\": {\"HUTCH_STATE_DIR\": \"/srv/state\", \"TMPDIR\": null}",
                        )
                    })?,
                Some(_) => {
                    return Err(bad(
                        &id,
                        v,
                        "\"env\" must be an object".into(),
                        "e.g. \"env\": {\"HUTCH_STATE_DIR\": \"/srv/state\"}",
                    ));
                }
            };
            let pty = match (flag(&obj, "pty", &id, v)?, obj.get("pty_size")) {
                (false, None | Some(Value::Null)) => None,
                (false, Some(_)) => {
                    return Err(bad(
                        &id,
                        v,
                        "\"pty_size\" needs \"pty\": true".into(),
                        "e.g. \"pty\": true, \"pty_size\": [120, 40]",
                    ));
                }
                (true, None | Some(Value::Null)) => Some(crate::launch::DEFAULT_TERMINAL_SIZE),
                (true, Some(size)) => Some(terminal_size(size).ok_or_else(|| {
                    bad(
                        &id,
                        v,
                        format!("\"pty_size\" must be [cols, rows], each 1 to 65535, not {size}"),
                        "e.g. \"pty_size\": [120, 40]",
                    )
                })?),
            };
            Ok(Request::Argv {
                cwd,
                env,
                argv,
                pty,
                stdin: flag(&obj, "stdin", &id, v)?,
                json_stdout: flag(&obj, "json_stdout", &id, v)?,
                report_fd,
                id,
            })
        }
        "stdin" => {
            let data = match obj.get("data") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::String(s)) => crate::spec::base64_decode(s).ok_or_else(|| {
                    bad(
                        &id,
                        v,
                        "\"data\" is not standard base64".into(),
                        "encode stdin bytes as standard base64 with padding",
                    )
                })?,
                Some(_) => {
                    return Err(bad(
                        &id,
                        v,
                        "\"data\" must be a base64 string".into(),
                        "encode stdin bytes as standard base64 with padding",
                    ));
                }
            };
            Ok(Request::Stdin {
                data,
                eof: flag(&obj, "eof", &id, v)?,
                id,
            })
        }
        "signal" => {
            let signal = obj
                .get("signal")
                .and_then(signal_number)
                .ok_or_else(|| {
                    bad(
                        &id,
                        v,
                        format!(
                            "\"signal\" must be a signal name (TERM, INT, KILL, HUP, QUIT, USR1, USR2, CONT, STOP, WINCH) or number 1-64, not {}",
                            obj.get("signal").unwrap_or(&Value::Null)
                        ),
                        "e.g. {\"id\":1,\"verb\":\"signal\",\"signal\":\"INT\"}",
                    )
                })?;
            Ok(Request::Signal { id, signal })
        }
        "cancel" => Ok(Request::Cancel { id }),
        "resize" => {
            let size = json!([obj.get("cols"), obj.get("rows")]);
            let (cols, rows) = terminal_size(&size).ok_or_else(|| {
                bad(
                    &id,
                    v,
                    format!("\"cols\" and \"rows\" must be numbers from 1 to 65535, not {size}"),
                    "e.g. {\"id\":1,\"verb\":\"resize\",\"cols\":120,\"rows\":40}",
                )
            })?;
            Ok(Request::Resize { id, cols, rows })
        }
        other => Err(bad(
            &id,
            (!other.is_empty()).then_some(other),
            format!("unknown verb {other:?}"),
            "verbs: hello, argv, stdin, signal, cancel, resize",
        )),
    }
}

fn flag(
    obj: &serde_json::Map<String, Value>,
    name: &str,
    id: &Value,
    verb: Option<&str>,
) -> Result<bool, BadRequest> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(bad(
            id,
            verb,
            format!("{name:?} must be true or false, not {other}"),
            "use a JSON boolean",
        )),
    }
}

/// `[cols, rows]`, each from 1 to 65535.
fn terminal_size(v: &Value) -> Option<(u16, u16)> {
    let [c, r] = v.as_array()?.as_slice() else {
        return None;
    };
    let n = |x: &Value| x.as_u64().and_then(|n| u16::try_from(n).ok()).filter(|n| *n > 0);
    Some((n(c)?, n(r)?))
}

fn signal_number(v: &Value) -> Option<i32> {
    if let Some(n) = v.as_i64() {
        return (1..=64).contains(&n).then_some(n as i32);
    }
    let name = v.as_str()?;
    let name = name.strip_prefix("SIG").unwrap_or(name);
    Some(match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        "WINCH" => libc::SIGWINCH,
        _ => return None,
    })
}

fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().trim_start_matches("SIG").to_owned())
        .unwrap_or_else(|_| sig.to_string())
}

fn line(v: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(v).unwrap_or_else(|_| b"{}".to_vec());
    out.push(b'\n');
    out
}

/// The first line the server writes, and its answer to a `hello` request.
pub(crate) fn hello(id: Option<&Value>) -> Vec<u8> {
    let mut v = json!({
        "event": "hello",
        "protocol": PROTOCOL,
        "hutch": env!("CARGO_PKG_VERSION"),
        "machine": machine::VERSION,
        "features": FEATURES,
        "limits": {
            "line_bytes": MAX_LINE,
            "in_flight": MAX_IN_FLIGHT,
            "chunk_bytes": CHUNK,
            "stdin_pending_bytes": MAX_STDIN_PENDING,
            "envelope_bytes": MAX_ENVELOPE,
        },
    });
    if let Some(id) = id {
        v["id"] = id.clone();
    }
    line(&v)
}

pub(crate) fn started(id: &Value, pid: i32) -> Vec<u8> {
    line(&json!({"id": id, "event": "started", "pid": pid}))
}

/// A `stdout` or `stderr` chunk (at most [`CHUNK`] bytes).
pub(crate) fn output(id: &Value, stream: &str, data: &[u8]) -> Vec<u8> {
    line(&json!({"id": id, "event": stream, "data": machine::base64(data)}))
}

/// One non-envelope line of the report descriptor (a status event).
pub(crate) fn report(id: &Value, text: &[u8]) -> Vec<u8> {
    let doc = serde_json::from_slice::<Value>(text)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(text).into_owned()));
    line(&json!({"id": id, "event": "report", "line": doc}))
}

/// How a request's hutch process ended.
pub(crate) struct Ended {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub cancelled: bool,
}

pub(crate) fn exit(id: &Value, ended: &Ended, envelope: Option<Value>) -> Vec<u8> {
    line(&json!({
        "id": id,
        "event": "exit",
        "code": ended.code,
        "signal": ended.signal.map(signal_name),
        "cancelled": ended.cancelled,
        "envelope": envelope,
    }))
}

pub(crate) fn error(id: &Value, verb: Option<&str>, error: &MachineError) -> Vec<u8> {
    line(&json!({"id": id, "event": "error", "verb": verb, "error": error}))
}

/// A server-side error of kind `kind` about request `id`.
pub(crate) fn server_error(kind: ErrorKind, what: String, hint: &str) -> MachineError {
    let mut e = MachineError::new(kind, format!("serve: {what}"));
    e.location = Some("serve".into());
    e.hint = Some(hint.into());
    e
}

/// The envelope in `text` (the last line of `--json` stdout or a report
/// descriptor line): a JSON object with a `hutch` key.
pub(crate) fn as_envelope(text: &[u8]) -> Option<Value> {
    let doc: Value = serde_json::from_slice(text).ok()?;
    doc.get("hutch").is_some().then_some(doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_bad_ones_say_why() {
        let Ok(Request::Argv {
            argv, report_fd, ..
        }) = parse(br#"{"id":1,"verb":"argv","argv":["version"],"report_fd":3}"#)
        else {
            panic!("argv request not parsed");
        };
        assert_eq!(argv, ["version"]);
        assert_eq!(report_fd, Some(3));
        let Ok(Request::Stdin { data, eof, .. }) =
            parse(br#"{"id":"a","verb":"stdin","data":"aGk=","eof":true}"#)
        else {
            panic!("stdin request not parsed");
        };
        assert_eq!((data.as_slice(), eof), (&b"hi"[..], true));
        assert!(matches!(
            parse(br#"{"id":2,"verb":"signal","signal":"SIGINT"}"#),
            Ok(Request::Signal { signal: 2, .. })
        ));
        for (text, what) in [
            (&b"nope"[..], "not JSON"),
            (b"[1]", "not a JSON object"),
            (br#"{"verb":"argv"}"#, "no \"id\""),
            (br#"{"id":1,"verb":"argv","argv":[]}"#, "non-empty list"),
            (br#"{"id":1,"verb":"argv","argv":["serve"]}"#, "inside serve"),
            (
                br#"{"id":1,"verb":"argv","argv":["x"],"report_fd":1}"#,
                "from 3 to 63",
            ),
            (br#"{"id":1,"verb":"stdin","data":"!!"}"#, "base64"),
            (br#"{"id":1,"verb":"signal","signal":"NOPE"}"#, "signal name"),
            (br#"{"id":1,"verb":"frob"}"#, "unknown verb"),
        ] {
            let Err(e) = parse(text) else {
                panic!("{text:?} accepted")
            };
            assert!(e.error.what.contains(what), "{}", e.error.what);
            assert_eq!(e.error.kind, ErrorKind::Usage);
        }
    }
}
