//! The `ruleop` binary: everything but the allocator is [`ruleop::cmd::main`].
#![forbid(unsafe_code)]

use std::process::ExitCode;

/// mimalloc rather than glibc's malloc: glibc keeps what a burst of reconciles on several threads
/// freed in per-thread arenas, so the RSS after a restart over N parents stayed ~1.5x the steady
/// RSS; mimalloc returns freed pages (issue 13). Built with `no_thp`: mimalloc would otherwise
/// advise transparent huge pages for its arenas, which put ~10 MB more in the RSS of an idle
/// process (where the node's THP mode is `madvise`). mimalloc over jemalloc: one C file built by
/// `cc` (no `make`/autoconf step), and it links into the static glibc binary of `make image`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    ruleop::cmd::main()
}
