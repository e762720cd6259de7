//! `hutch __supervise`: the supervisor process the library spawns. It reads
//! a [`Request`] from fd 3 and writes the exit report to fd 4.

use std::ffi::OsString;
use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use crate::launch::{self, RunOptions};
use crate::spec::Spec;

pub const SUBCOMMAND: &str = "__supervise";
/// fd carrying the request (read to EOF).
pub const REQUEST_FD: i32 = 3;
/// fd receiving the report (one JSON document).
pub const REPORT_FD: i32 = 4;

/// What the library asks the supervisor to run.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub spec: Spec,
    pub status_file: Option<std::path::PathBuf>,
    pub quiet: bool,
}

/// The report fd carries either the report or the launch error.
#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    Report(Box<launch::ExitReport>),
    Error(String),
}

pub fn main(_args: Vec<OsString>) -> i32 {
    let mut request_file = crate::sys::adopt_inherited_fd(REQUEST_FD).map(std::fs::File::from);
    let mut report_file = crate::sys::adopt_inherited_fd(REPORT_FD).map(std::fs::File::from);
    let (Some(req_f), Some(rep_f)) = (request_file.as_mut(), report_file.as_mut()) else {
        eprintln!("hutch: {SUBCOMMAND} is internal to the hutch library (fds 3 and 4 missing)");
        return 125;
    };
    let mut text = String::new();
    let response = match req_f
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())
        .and_then(|_| {
            serde_json::from_str::<Request>(&text)
                .map_err(|e| format!("malformed supervisor request: {e}"))
        }) {
        Err(e) => Response::Error(e),
        Ok(req) => {
            let opts = RunOptions {
                status_file: req.status_file,
                capture_bytes: None,
                quiet: req.quiet,
            };
            match launch::run(&req.spec, &opts) {
                Ok(r) => Response::Report(Box::new(r)),
                Err(e) => Response::Error(e.to_string()),
            }
        }
    };
    let code = match &response {
        Response::Report(r) => r.status,
        Response::Error(e) => {
            eprintln!("hutch: {e}");
            125
        }
    };
    let _ = rep_f.write_all(
        serde_json::to_string(&response)
            .expect("serializes")
            .as_bytes(),
    );
    code
}
