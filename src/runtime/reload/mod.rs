//! Hot reload of the rules: noticing edits of the files ([`watch`]), the decisions over what a
//! reload found ([`decide`], pure), the staged rollouts' half of the loop ([`rollouts`]: the step
//! clock, halts, requests), and the [`reloader::Reloader`] that carries them out, one reload at a
//! time.

pub(crate) mod decide;
pub(crate) mod reloader;
pub(crate) mod rollouts;
pub(crate) mod watch;
