//! Library API (placeholder during bring-up).

pub struct Command;
pub struct Child;
pub struct ExitReport;
pub struct Outcome;
