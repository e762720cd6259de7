//! The new-root builder: a pure [`plan`] made before clone, executed by
//! [`build`] in the child through the mockable [`FsSys`] layer.

pub mod build;
mod builder;
pub mod claim;
pub mod count;
mod image_root;
pub mod plan;
pub mod resident;
mod syscalls;

#[cfg(test)]
pub(crate) mod tests;

pub use build::{
    BuildError, Built, FsSys, Sources, build, build_unpivoted, expose_root, op_names,
    open_sources, pivot,
};
pub(crate) use build::symlink_conflict_target;
pub use plan::{Plan, plan};
