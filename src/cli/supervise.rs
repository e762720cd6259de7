//! `hutch __supervise`: the supervisor process the library spawns; the
//! protocol and the work are [`crate::launch::helper`]'s.

use std::ffi::OsString;

pub use crate::launch::helper::SUBCOMMAND;

pub fn main(_args: Vec<OsString>) -> i32 {
    crate::launch::helper::serve()
}
