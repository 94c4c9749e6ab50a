//! The apply layer, the only code that writes to the cluster: children, prune, actions, status.
pub mod compare;
