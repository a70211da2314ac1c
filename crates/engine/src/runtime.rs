//! The plan made real: one buffer pool per channel, allocated once, and threads spawned
//! pinned where the plan puts them.
//!
//! A [`Runtime`] is built once per process (daemon start-up, or a client run). Sessions
//! borrow its pools; nothing on the data path allocates buffer memory afterwards.

use crate::error::EngineError;
use crate::monitor::threads::ThreadInfo;
use crossbeam_channel::{Receiver, Sender};
use sluice_buffers::BufferPool;
pub use sluice_buffers::Populate;
use sluice_placement::{Plan, Role, ThreadPlan};
use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Bounded queues between the stages of a session, one per channel.
pub(crate) type Queues<T> = HashMap<u32, (Sender<T>, Receiver<T>)>;

/// The queue of `channel`, or, for a channel without threads of the queue's role (mts
/// and nmts put I/O on nodes without a NIC), one of the others picked by `k`.
pub(crate) fn queue_for<T>(queues: &Queues<T>, channel: u32, k: u32) -> Option<Sender<T>> {
    queues
        .get(&channel)
        .or_else(|| {
            let mut ids: Vec<&u32> = queues.keys().collect();
            ids.sort_unstable();
            ids.get(k as usize % ids.len().max(1))
                .and_then(|id| queues.get(*id))
        })
        .map(|(tx, _)| tx.clone())
}

/// One channel of the plan with its buffer pool.
#[derive(Debug)]
pub struct ChannelRuntime {
    /// The plan's channel id.
    pub id: u32,
    /// The node its buffers live on, if bound.
    pub node: Option<u32>,
    /// Its buffer pool (fixed slots of the plan's chunk size).
    pub pool: Arc<BufferPool>,
}

impl Drop for Runtime {
    /// Says how much of each pool was ever used (what on-demand population saved).
    fn drop(&mut self) {
        for ch in &self.channels {
            let st = ch.pool.stats();
            tracing::debug!(
                "buffer pool: channel={} used {} of {} slots (populate={})",
                ch.id,
                st.used,
                st.slots,
                st.populate
            );
        }
    }
}

/// Pools and thread placement for one plan.
#[derive(Debug)]
pub struct Runtime {
    plan: Plan,
    channels: Vec<ChannelRuntime>,
    /// The process's allowed CPUs at start-up: unbound threads get this mask back, so a
    /// thread spawned by a pinned thread does not inherit its parent's pin.
    allowed_cpus: Vec<u32>,
}

impl Runtime {
    /// Allocates every channel's buffer partition on its node (bound, mlocked where
    /// allowed; pages touched now or at first use, as `populate` says: a daemon pays at
    /// start-up, a one-job client only for what its job uses) and keeps the plan for
    /// thread placement.
    ///
    /// # Errors
    /// [`EngineError::Buffers`] when a pool cannot be allocated or bound.
    pub fn new(plan: Plan, populate: Populate) -> Result<Runtime, EngineError> {
        let slot_bytes = usize::try_from(plan.chunk_bytes).unwrap_or(usize::MAX);
        let mut channels = Vec::with_capacity(plan.channels.len());
        for ch in &plan.channels {
            if ch.buffer_bytes < plan.chunk_bytes {
                continue;
            }
            let pool = BufferPool::populated(ch.numa_node, ch.buffer_bytes, slot_bytes, populate)
                .map_err(|e| EngineError::Buffers {
                channel: ch.id,
                cause: e,
            })?;
            let pool = Arc::new(pool);
            crate::monitor::global().watch_pool(ch.id, &pool);
            // The pool's address range, for checking its pages in /proc/PID/numa_maps
            // (tests/numa-vm/scenarios/transfer.sh): slot `i` starts at base + i * slot size.
            if let Some(s) = pool.try_acquire() {
                let start = s.as_ptr() as usize - s.index() as usize * pool.slot_bytes();
                let end = start + pool.slots() as usize * pool.slot_bytes();
                tracing::info!(
                    "buffer pool: channel={} node={:?} range={start:#x}-{end:#x} populate={populate}",
                    ch.id,
                    ch.numa_node
                );
            }
            channels.push(ChannelRuntime {
                id: ch.id,
                node: ch.numa_node,
                pool,
            });
        }
        if channels.is_empty() {
            return Err(EngineError::Config(format!(
                "the plan leaves no channel with a buffer partition of at least one {}-byte chunk",
                plan.chunk_bytes
            )));
        }
        let allowed_cpus = sluice_affinity::allowed_cpus().unwrap_or_default();
        Ok(Runtime {
            plan,
            channels,
            allowed_cpus,
        })
    }

    /// The plan this runtime realises.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Slot size of every pool.
    pub fn chunk_bytes(&self) -> u32 {
        u32::try_from(self.plan.chunk_bytes).unwrap_or(u32::MAX)
    }

    /// The channels that have a buffer pool.
    pub fn channels(&self) -> &[ChannelRuntime] {
        &self.channels
    }

    /// How many threads of `role` the plan has.
    pub fn planned(&self, role: Role) -> u32 {
        let n = self
            .plan
            .channels
            .iter()
            .flat_map(|c| c.threads.iter())
            .filter(|t| t.role == role)
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The planned thread for the `index`-th thread of `role` (wrapping around when a
    /// session runs more threads of a role than the plan has: never silently, a session
    /// states it with `session::state_threads_beyond_plan`), with its channel.
    pub fn thread_plan(&self, role: Role, index: u32) -> Option<(u32, &ThreadPlan)> {
        let planned: Vec<(u32, &ThreadPlan)> = self
            .plan
            .channels
            .iter()
            .flat_map(|c| c.threads.iter().map(move |t| (c.id, t)))
            .filter(|(_, t)| t.role == role)
            .collect();
        if planned.is_empty() {
            return None;
        }
        let n = u32::try_from(planned.len()).unwrap_or(u32::MAX);
        planned.get((index % n) as usize).copied()
    }

    /// The pool a thread of `role` number `index` uses: its channel's, or the first
    /// channel's when its channel has none (a channel too small for one slot).
    pub fn pool_for(&self, role: Role, index: u32) -> (u32, Arc<BufferPool>) {
        let channel = self.thread_plan(role, index).map(|(c, _)| c);
        let ch = channel
            .and_then(|c| self.channels.iter().find(|x| x.id == c))
            .unwrap_or(&self.channels[0]);
        (ch.id, Arc::clone(&ch.pool))
    }

    /// Pins the calling thread where the plan puts thread `index` of `role` (or gives it
    /// the whole allowed set when the plan leaves it unbound). Threads it spawns inherit
    /// the mask. A failure is logged; the thread runs on.
    pub fn pin_current(&self, role: Role, index: u32) {
        let cpus = self
            .thread_plan(role, index)
            .and_then(|(_, t)| t.cpus.clone())
            .unwrap_or_else(|| self.allowed_cpus.clone());
        if cpus.is_empty() {
            return;
        }
        if let Err(e) = sluice_affinity::bind_current_thread(&cpus) {
            tracing::warn!("cannot pin {role} {index} to CPUs {cpus:?}: {e}; running unbound");
        }
    }

    /// Spawns a named thread pinned where the plan puts thread `index` of `role`
    /// (unbound when the plan leaves it to the OS). A binding failure is logged and the
    /// thread runs unbound: a transfer never fails because a pin could not be applied.
    ///
    /// # Errors
    /// The OS refused to create the thread.
    pub fn spawn<F, T>(&self, role: Role, index: u32, f: F) -> std::io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let cpus = self
            .thread_plan(role, index)
            .and_then(|(_, t)| t.cpus.clone())
            .or_else(|| Some(self.allowed_cpus.clone()).filter(|c| !c.is_empty()));
        let watch = self.watch_info(role, index);
        std::thread::Builder::new()
            .name(format!("{role}-{index}"))
            .spawn(move || {
                let mut pinned = false;
                if let Some(cpus) = cpus {
                    match sluice_affinity::bind_current_thread(&cpus) {
                        Ok(()) => pinned = true,
                        Err(e) => tracing::warn!(
                            "cannot pin {role} {index} to CPUs {cpus:?}: {e}; running unbound"
                        ),
                    }
                }
                // Watched by adaptive placement while it runs (dropped when it ends).
                let _watched = watch
                    .filter(|_| pinned)
                    .and_then(|info| crate::monitor::threads::register(info()));
                f()
            })
    }

    /// What adaptive placement watches of thread `index` of `role`: a thread the plan
    /// pins to one CPU of a channel whose buffers are bound to a node (others are left
    /// to the kernel's scheduler already). The thread id is filled in by the thread.
    fn watch_info(&self, role: Role, index: u32) -> Option<impl FnOnce() -> ThreadInfo> {
        let (channel, t) = self.thread_plan(role, index)?;
        let cpu = match t.cpus.as_deref() {
            Some(&[cpu]) => cpu,
            _ => return None,
        };
        let node = self
            .plan
            .channels
            .iter()
            .find(|c| c.id == channel)?
            .numa_node?;
        Some(move || ThreadInfo {
            tid: sluice_affinity::current_tid(),
            role: role.to_string(),
            index,
            channel,
            node,
            cpu,
        })
    }
}
