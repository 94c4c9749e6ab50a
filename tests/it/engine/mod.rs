//! The rule language and the reconcile against the real control plane: children, actions,
//! lookups, lifecycle, hot reload, hostile parents, the live view, peers' examples.

mod actions;
mod collections;
mod control_plane;
mod events;
mod hostile;
mod lifecycle;
mod live;
mod peers;
mod reload;
pub(crate) mod rollout;
