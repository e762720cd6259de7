//! The plan of a launch, made before clone by [`super::prepare`] and read
//! by the post-clone code ([`super::child`]): plain data, so that it sits
//! below every process role and imports none of them.

mod child;
mod command;
mod ids;

pub(crate) use child::{CapPlan, ChildPlan, FORWARDED, PROXY_DOOR_IN_ROOT, signal_mask};
pub(crate) use command::{CommandPlan, Exec, StdioPlan};
pub use ids::DEFAULT_ROOT_HOST_ID;
pub(crate) use ids::{Extent, IdMaps, Ids, Subordinate, WorkloadIds};
