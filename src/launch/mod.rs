//! The launcher.
