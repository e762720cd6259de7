//! Support for the confinement tests that is not part of the library.
#![allow(dead_code)]

pub mod install;
pub mod seccomp_reference;
pub mod seccompiler_format;
