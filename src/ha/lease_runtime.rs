//! A runtime of its own for the lease work (leader renewals, shard rounds, releases), so a flood
//! of reconciles that keeps every thread of the main runtime busy cannot hold a renewal past its
//! renew deadline and hand the leases to another replica.

use tokio::runtime::{Builder, Handle, Runtime};

/// One worker thread, `ruleop-leases`, running only lease tasks and the I/O of the lease client
/// built on it. Tokio does not preempt a busy task: on the main runtime, a burst of template
/// rendering on both worker threads delayed a shard round's list of leases by 4.3 s (the sharding
/// test's handover), longer than the 4 s lease. The OS schedules this thread beside them.
pub(crate) struct LeaseRuntime {
    /// Taken on drop only.
    runtime: Option<Runtime>,
    handle: Handle,
}

impl LeaseRuntime {
    /// Starts the thread.
    pub(crate) fn start() -> std::io::Result<Self> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ruleop-leases")
            .enable_all()
            .build()?;
        Ok(LeaseRuntime {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
        })
    }

    /// Where lease tasks are spawned, and inside which the lease client is built (its connection
    /// tasks then run here too).
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for LeaseRuntime {
    /// Leaves without waiting: by then the leases are released (or the process is exiting), and
    /// a runtime cannot be dropped with a blocking wait inside the main runtime.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn lease_tasks_tick_while_every_main_runtime_thread_is_busy() {
        let leases = LeaseRuntime::start().expect("a lease runtime");
        let ticks = Arc::new(AtomicU32::new(0));
        let counter = ticks.clone();
        leases.handle().spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                counter.fetch_add(1, Ordering::SeqCst);
            }
        });
        // The main runtime's only thread is busy (a long synchronous render), never yielding.
        let before = ticks.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
        let during = ticks.load(Ordering::SeqCst) - before;
        assert!(
            during >= 10,
            "the lease task ticked {during} times in 300 ms of a blocked main runtime"
        );

        // The same on the main runtime: nothing runs while its thread is blocked.
        let main_ticks = Arc::new(AtomicU32::new(0));
        let counter = main_ticks.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                counter.fetch_add(1, Ordering::SeqCst);
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(main_ticks.load(Ordering::SeqCst), 0);
    }
}
