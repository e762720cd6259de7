//! What crosses the socket between the supervisor and hutch init: the
//! control messages, the fixed-size failure record and a claimed command.

pub mod claim;
pub mod command;
pub mod message;
pub mod rusage;
pub mod stage;
