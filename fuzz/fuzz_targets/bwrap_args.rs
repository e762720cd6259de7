//! bubblewrap's command line (`hutch-bwrap`): arbitrary argv and `--args`
//! files, nested or not, through the parser and the translation to a
//! Spec. Neither may panic; every refusal is one `bwrap: ...` line; a
//! translated Spec passes or fails the Spec's own check without panicking.
//!
//! Input: segments split by 0xFF; the first is the argv (NUL-separated),
//! segment N the content of fd N+2 (so `--args 3` reads segment 1).
#![no_main]

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use hutch::internals::bwrap::args::{self, FdReader};
use hutch::internals::bwrap::translate::{self, Caller};
use libfuzzer_sys::fuzz_target;

struct Table(HashMap<i32, Vec<u8>>);

impl FdReader for Table {
    fn read_fd(&mut self, fd: i32) -> std::io::Result<Vec<u8>> {
        // Read once, like a pipe (a second --args of the same fd is empty).
        self.0
            .remove(&fd)
            .ok_or_else(|| std::io::Error::from_raw_os_error(EBADF))
    }
}

const EBADF: i32 = 9;

fuzz_target!(|data: &[u8]| {
    let mut segments = data.split(|b| *b == 0xFF);
    let argv: Vec<OsString> = segments
        .next()
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| OsString::from_vec(a.to_vec()))
        .collect();
    let fds: HashMap<i32, Vec<u8>> = segments
        .enumerate()
        .map(|(i, s)| (i as i32 + 3, s.to_vec()))
        .collect();
    let mut table = Table(fds);
    let parsed = match args::parse(argv, &mut table) {
        Ok(p) => p,
        Err(e) => {
            assert!(!e.line(false).contains('\n'), "one line: {e:?}");
            return;
        }
    };
    let caller = Caller {
        uid: 1000,
        gid: 1000,
        env: vec![("HOME".into(), "/home/u".into())],
        cwd: Some("/".into()),
        effective: 0,
        bounding: 0,
        inheritable: 0,
        userns_available: true,
        cgroupns_available: true,
        stdout_tty: None,
    };
    match translate::translate(&parsed, &caller, &mut table) {
        Ok((spec, _)) => {
            let _ = hutch::spec::validate(&spec);
        }
        Err(e) => assert!(!e.line(false).contains('\n'), "one line: {e:?}"),
    }
});
