//! What the source and the sink wire the same way: the inline/queued choice and the
//! stage threads a session spawns and joins.

use crate::error::EngineError;
use crate::runtime::Runtime;
use crate::Pipeline;
use sluice_placement::Role;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Whether the thread that produced a chunk also sends (or writes) it: Tyche (seed 003)
/// found the inline path faster once the protocol is NUMA-aware; the queue only pays
/// when I/O threads outnumber connections by more than two to one.
#[must_use]
pub fn is_inline(pipeline: Pipeline, io_threads: u32, streams: u32) -> bool {
    match pipeline {
        Pipeline::Inline => true,
        Pipeline::Queued => false,
        Pipeline::Auto => io_threads <= streams.saturating_mul(2),
    }
}

/// The threads of one session's stages: spawned pinned by the plan, joined together.
#[derive(Debug, Default)]
pub struct Stages {
    threads: Vec<JoinHandle<Result<(), EngineError>>>,
}

impl Stages {
    /// Spawns thread `index` of `role` where the plan puts it.
    ///
    /// # Errors
    /// The OS refused to create the thread.
    pub fn spawn<F>(
        &mut self,
        runtime: &Arc<Runtime>,
        role: Role,
        index: u32,
        f: F,
    ) -> Result<(), EngineError>
    where
        F: FnOnce() -> Result<(), EngineError> + Send + 'static,
    {
        let t = runtime
            .spawn(role, index, f)
            .map_err(|e| EngineError::io(format!("starting {role} thread {index}"), e))?;
        self.threads.push(t);
        Ok(())
    }

    /// Joins every thread; the first error (or panic) is returned, after all have ended.
    /// `on_error` runs at each failure (to abort the others).
    pub fn join(self, on_error: impl Fn()) -> Option<EngineError> {
        let mut first = None;
        for t in self.threads {
            let err = match t.join() {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(_) => EngineError::Aborted("a data thread panicked".into()),
            };
            on_error();
            first.get_or_insert(err);
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_goes_inline_unless_readers_far_outnumber_connections() {
        assert!(is_inline(Pipeline::Auto, 2, 2));
        assert!(is_inline(Pipeline::Auto, 4, 2));
        assert!(!is_inline(Pipeline::Auto, 5, 2));
        assert!(!is_inline(Pipeline::Queued, 1, 8));
        assert!(is_inline(Pipeline::Inline, 64, 1));
    }
}
