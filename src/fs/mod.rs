//! New-root builder.
