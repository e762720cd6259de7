//! A fake model server for the integration tests: plain HTTP and HTTPS
//! (a leaf signed by a test CA made here with rcgen) on host loopback,
//! ephemeral ports, speaking enough of the Anthropic Messages API and the
//! OpenAI Responses API, streamed, for a real agent CLI (Claude Code,
//! Codex) to complete one scripted tool-use exchange:
//!
//! 1. the CLI's first request carries the user's prompt: the model answers
//!    with one shell tool call ([`Script::command`]): Claude Code's `Bash`
//!    tool, Codex's `exec_command` function;
//! 2. the CLI runs it and sends the result back (a `tool_result` block, a
//!    `function_call_output` item): the model answers [`Script::final_text`]
//!    and ends the turn.
//!
//! The server is stateless about the exchange (it looks at the request: is
//! there a tool result in it?), so a CLI's retries and parallel requests
//! are answered alike. Every request is recorded ([`FakeModel::requests`]):
//! method, path, headers, body, and whether it came over TLS. Anything else
//! (`/v1/models`, telemetry a CLI might try) is answered 404 and recorded.
//!
//! Use it from a test binary with `mod model_support;`; `examples/fake_model.rs`
//! runs it as a process (for benches and by hand).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// What the model does in the exchange.
#[derive(Debug, Clone)]
pub struct Script {
    /// The shell command the model asks the CLI to run.
    pub command: String,
    /// The model's last message, after the command's result came back.
    pub final_text: String,
    /// The model name given back (the CLIs do not check it).
    pub model: String,
}

impl Script {
    pub fn shell(command: &str, final_text: &str) -> Script {
        Script {
            command: command.to_string(),
            final_text: final_text.to_string(),
            model: "fake-model".to_string(),
        }
    }
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// The request target as sent (with its query).
    pub path: String,
    /// Names lower-cased, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub tls: bool,
    /// What the server answered: `tool_use`, `final`, `not_found`, `bad_request`.
    pub answered: &'static str,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The text of the tool result this request carries back to the model
    /// (the command's output as the CLI reported it), if any.
    pub fn tool_result(&self) -> Option<String> {
        tool_result_of(&self.json()?)
    }
}

/// The running server; stops accepting when dropped (the listener threads
/// end with the test process).
pub struct FakeModel {
    pub http_port: u16,
    pub https_port: u16,
    ca_pem: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl FakeModel {
    /// Start on 127.0.0.1 (two ephemeral ports, bound before this returns:
    /// ready as soon as it returns). The HTTPS leaf certificate is valid for
    /// `names` (DNS names or IP addresses) and signed by a CA made here.
    pub fn start(script: Script, names: &[&str]) -> FakeModel {
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(
            rcgen::DnType::CommonName,
            "hutch test CA (fake model server)",
        );
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA certificate");
        let leaf_key = rcgen::KeyPair::generate().expect("leaf key");
        let mut leaf_params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("leaf names");
        leaf_params.distinguished_name.push(
            rcgen::DnType::CommonName,
            names.first().copied().unwrap_or("fake-model"),
        );
        leaf_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let leaf = leaf_params
            .signed_by(&leaf_key, &ca)
            .expect("leaf certificate");

        // ring (no C toolchain to build, unlike aws-lc-rs); its provider is
        // deprecated for lacking post-quantum key exchange, which a test
        // server on loopback does not need.
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone(), ca.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
            )
            .expect("TLS server config");
        let tls = Arc::new(tls);

        let requests = Arc::new(Mutex::new(Vec::new()));
        let plain = TcpListener::bind("127.0.0.1:0").expect("bind the plain port");
        let secure = TcpListener::bind("127.0.0.1:0").expect("bind the TLS port");
        let (http_port, https_port) = (
            plain.local_addr().unwrap().port(),
            secure.local_addr().unwrap().port(),
        );
        let script = Arc::new(script);
        {
            let (script, requests) = (script.clone(), requests.clone());
            std::thread::spawn(move || {
                for conn in plain.incoming().flatten() {
                    let (script, requests) = (script.clone(), requests.clone());
                    std::thread::spawn(move || serve(conn, false, &script, &requests));
                }
            });
        }
        {
            let (script, requests) = (script.clone(), requests.clone());
            std::thread::spawn(move || {
                for conn in secure.incoming().flatten() {
                    let (script, requests, tls) = (script.clone(), requests.clone(), tls.clone());
                    std::thread::spawn(move || {
                        let Ok(session) = rustls::ServerConnection::new(tls) else {
                            return;
                        };
                        serve(
                            rustls::StreamOwned::new(session, conn),
                            true,
                            &script,
                            &requests,
                        );
                    });
                }
            });
        }
        FakeModel {
            http_port,
            https_port,
            ca_pem: ca.pem(),
            requests,
        }
    }

    /// The test CA's certificate (PEM): what a client must trust.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Write the CA certificate to `path`, readable by everyone (a sandbox
    /// of another uid reads it).
    pub fn write_ca(&self, path: &Path) {
        std::fs::write(path, &self.ca_pem).unwrap();
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// The model requests (`/v1/messages`, `/v1/responses`) received so far.
    pub fn model_requests(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.answered == "tool_use" || r.answered == "final")
            .collect()
    }
}

trait Conn: Read + Write {}
impl<T: Read + Write> Conn for T {}

/// Serve one connection: HTTP/1.1 requests until the client closes it or
/// sends `Connection: close`.
fn serve(conn: impl Conn, tls: bool, script: &Script, requests: &Mutex<Vec<Request>>) {
    let mut conn = BufReader::new(conn);
    loop {
        let Some(mut req) = read_request(&mut conn, tls) else {
            return;
        };
        let close = req
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let answer = answer(&req, script);
        req.answered = answer.kind;
        requests.lock().unwrap().push(req);
        let out = conn.get_mut();
        if answer.write(out).is_err() || close {
            return;
        }
    }
}

/// Read one request (head and body, by Content-Length or chunked); None
/// when the connection ends or the request is malformed.
fn read_request(conn: &mut impl BufRead, tls: bool) -> Option<Request> {
    let mut line = String::new();
    if conn.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if conn.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    // A bound on what one request may carry: the CLIs send ~50 KB.
    const MAX_BODY: usize = 16 << 20;
    let mut body = Vec::new();
    if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            conn.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            if size == 0 || body.len() + size > MAX_BODY {
                let mut end = String::new();
                conn.read_line(&mut end).ok()?;
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            conn.read_exact(&mut body[start..]).ok()?;
            let mut crlf = [0u8; 2];
            conn.read_exact(&mut crlf).ok()?;
        }
    } else if let Some(n) = get("content-length") {
        let n: usize = n.parse().ok()?;
        if n > MAX_BODY {
            return None;
        }
        body.resize(n, 0);
        conn.read_exact(&mut body).ok()?;
    }
    Some(Request {
        method,
        path,
        headers,
        body,
        tls,
        answered: "",
    })
}

struct Answer {
    kind: &'static str,
    status: &'static str,
    content_type: &'static str,
    /// Server-sent events are written one chunk per event, flushed, as a
    /// real model streams them; a JSON answer is one chunk.
    chunks: Vec<String>,
}

impl Answer {
    fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
        write!(
            out,
            "HTTP/1.1 {}\r\ncontent-type: {}\r\ntransfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n",
            self.status, self.content_type
        )?;
        out.flush()?;
        for c in &self.chunks {
            write!(out, "{:x}\r\n{c}\r\n", c.len())?;
            out.flush()?;
        }
        out.write_all(b"0\r\n\r\n")?;
        out.flush()
    }

    fn json(kind: &'static str, status: &'static str, v: serde_json::Value) -> Answer {
        Answer {
            kind,
            status,
            content_type: "application/json",
            chunks: vec![v.to_string()],
        }
    }

    fn events(kind: &'static str, events: Vec<(&str, serde_json::Value)>) -> Answer {
        Answer {
            kind,
            status: "200 OK",
            content_type: "text/event-stream",
            chunks: events
                .into_iter()
                .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
                .collect(),
        }
    }
}

fn answer(req: &Request, script: &Script) -> Answer {
    let route = req.path.split('?').next().unwrap_or("");
    let api = match (req.method.as_str(), route) {
        ("POST", "/v1/messages") => Api::Anthropic,
        ("POST", "/v1/responses") => Api::OpenAi,
        _ => {
            return Answer::json(
                "not_found",
                "404 Not Found",
                serde_json::json!({"type": "error", "error": {"type": "not_found_error", "message": format!("fake model server: no {route}")}}),
            );
        }
    };
    let Some(body) = req.json() else {
        return Answer::json(
            "bad_request",
            "400 Bad Request",
            serde_json::json!({"type": "error", "error": {"type": "invalid_request_error", "message": "fake model server: the body is not JSON"}}),
        );
    };
    let stream = body["stream"].as_bool().unwrap_or(false);
    let turn = if tool_result_of(&body).is_some() {
        Turn::Final
    } else {
        Turn::ToolCall
    };
    match api {
        Api::Anthropic => anthropic(script, turn, stream),
        Api::OpenAi => openai(script, turn),
    }
}

enum Api {
    Anthropic,
    OpenAi,
}

#[derive(Clone, Copy, PartialEq)]
enum Turn {
    ToolCall,
    Final,
}

impl Turn {
    fn kind(self) -> &'static str {
        match self {
            Turn::ToolCall => "tool_use",
            Turn::Final => "final",
        }
    }
}

/// The text of the last tool result in a Messages or Responses request.
fn tool_result_of(body: &serde_json::Value) -> Option<String> {
    let text_of = |c: &serde_json::Value| -> String {
        match c {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
            other => other.to_string(),
        }
    };
    // Anthropic: {"messages": [{"role": "user", "content": [{"type": "tool_result", "content": ...}]}]}
    let anthropic = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| {
            m["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| b["type"] == "tool_result")
                .map(|b| text_of(&b["content"]))
        });
    // OpenAI: {"input": [{"type": "function_call_output", "output": ...}]}
    let openai = body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "function_call_output" || i["type"] == "custom_tool_call_output")
        .map(|i| text_of(&i["output"]));
    anthropic.chain(openai).last()
}

fn anthropic(script: &Script, turn: Turn, stream: bool) -> Answer {
    use serde_json::json;
    let usage = json!({"input_tokens": 12, "output_tokens": 8, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    let (block, stop_reason) = match turn {
        Turn::ToolCall => (
            json!({"type": "tool_use", "id": "toolu_fake_01", "name": "Bash",
                   "input": {"command": script.command, "description": "Run the scripted command"}}),
            "tool_use",
        ),
        Turn::Final => (
            json!({"type": "text", "text": script.final_text}),
            "end_turn",
        ),
    };
    let id = format!("msg_fake_{}", turn.kind());
    if !stream {
        return Answer::json(
            turn.kind(),
            "200 OK",
            json!({"id": id, "type": "message", "role": "assistant", "model": script.model,
                   "content": [block], "stop_reason": stop_reason, "stop_sequence": null, "usage": usage}),
        );
    }
    let (start_block, delta) = match turn {
        Turn::ToolCall => (
            json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
            json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}),
        ),
        Turn::Final => (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": script.final_text}),
        ),
    };
    Answer::events(
        turn.kind(),
        vec![
            (
                "message_start",
                json!({"type": "message_start", "message": {
                "id": id, "type": "message", "role": "assistant", "model": script.model,
                "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage}}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": start_block}),
            ),
            ("ping", json!({"type": "ping"})),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": delta}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                "message_delta",
                json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 8}}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ],
    )
}

fn openai(script: &Script, turn: Turn) -> Answer {
    use serde_json::json;
    let id = format!("resp_fake_{}", turn.kind());
    let item = match turn {
        Turn::ToolCall => {
            json!({"type": "function_call", "id": "fc_fake_01", "call_id": "call_fake_01",
            "name": "exec_command", "arguments": json!({"cmd": script.command}).to_string(), "status": "completed"})
        }
        Turn::Final => {
            json!({"type": "message", "id": "msg_fake_01", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": script.final_text, "annotations": []}]})
        }
    };
    let response = |status: &str, output: serde_json::Value| {
        json!({"id": id, "object": "response", "created_at": 1_700_000_000, "status": status,
               "model": script.model, "output": output,
               "usage": {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0},
                         "output_tokens": 8, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 20}})
    };
    let mut events = vec![(
        "response.created",
        json!({"type": "response.created", "response": response("in_progress", json!([]))}),
    )];
    match turn {
        Turn::ToolCall => {
            let mut added = item.clone();
            added["arguments"] = json!("");
            added["status"] = json!("in_progress");
            events.push((
                "response.output_item.added",
                json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
            ));
            events.push((
                "response.function_call_arguments.delta",
                json!({"type": "response.function_call_arguments.delta",
                "item_id": item["id"], "output_index": 0, "delta": item["arguments"]}),
            ));
            events.push((
                "response.function_call_arguments.done",
                json!({"type": "response.function_call_arguments.done",
                "item_id": item["id"], "output_index": 0, "arguments": item["arguments"]}),
            ));
        }
        Turn::Final => {
            let mut added = item.clone();
            added["content"] = json!([]);
            added["status"] = json!("in_progress");
            events.push((
                "response.output_item.added",
                json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
            ));
            events.push(("response.content_part.added", json!({"type": "response.content_part.added",
                "item_id": item["id"], "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})));
            events.push(("response.output_text.delta", json!({"type": "response.output_text.delta",
                "item_id": item["id"], "output_index": 0, "content_index": 0, "delta": script.final_text})));
            events.push(("response.output_text.done", json!({"type": "response.output_text.done",
                "item_id": item["id"], "output_index": 0, "content_index": 0, "text": script.final_text})));
        }
    }
    events.push((
        "response.output_item.done",
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
    ));
    events.push((
        "response.completed",
        json!({"type": "response.completed", "response": response("completed", json!([item]))}),
    ));
    Answer::events(turn.kind(), events)
}

/// A plain TCP connection to the server, for its own tests.
pub fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}
