//! Hot reload of the rules: noticing edits of the files ([`watch`]), the decisions over what a
//! reload found ([`decide`], pure), and the [`reloader::Reloader`] that carries them out, one
//! reload at a time.

pub(crate) mod decide;
pub(crate) mod reloader;
pub(crate) mod watch;
