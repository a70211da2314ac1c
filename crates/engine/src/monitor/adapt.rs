//! Adaptive placement's decision core (issue 17 part 5; no I/O): each tick it is told
//! every CPU's foreign load (the share of its time other processes used) and decides
//! which bound thread moves to which free core of its own node. It never moves a
//! thread across nodes (its buffer slots are there): where its node has no free core
//! the move is refused and said once. Hysteresis keeps it from oscillating: a core must
//! stay hot for `sustain` ticks before its thread moves, a moved thread stays put for
//! `cooldown` ticks, and only a core under `low` load (well below `high`) is a target.
//! Among targets, a core none of the watched threads uses comes first; one that our own
//! threads share is taken only where the node has no other (our own load is not
//! foreign: the plan itself puts several threads on one core).
//!
//! Threads are known by a key (the shell's thread id; [`Adapter::new`]'s are their
//! indexes), watched and unwatched as they come and go. The I/O shell that reads
//! `/proc` and re-pins threads is [`super::mover`].

/// The thresholds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tunables {
    /// Foreign load at which a thread's core is hot (0-1).
    pub high: f64,
    /// Foreign load below which a core is free (0-1; below `high`).
    pub low: f64,
    /// Ticks a core must stay hot before its thread moves.
    pub sustain: u32,
    /// Ticks a moved thread stays where it went.
    pub cooldown: u32,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            high: 0.5,
            low: 0.2,
            sustain: 3,
            cooldown: 10,
        }
    }
}

/// A thread pinned to one CPU of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// The node its buffers live on.
    pub node: u32,
    /// Its CPU.
    pub cpu: u32,
}

/// One CPU's load over the last tick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuLoad {
    /// The CPU.
    pub cpu: u32,
    /// Its node.
    pub node: u32,
    /// The share of its time other processes used (0-1).
    pub foreign: f64,
}

/// What a tick decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Thread `thread` moves from `from` to `to`, both on `node`.
    Move {
        /// The thread's key.
        thread: usize,
        /// Its CPU until now.
        from: u32,
        /// Its CPU from now on.
        to: u32,
        /// Their node.
        node: u32,
    },
    /// Thread `thread`'s core is hot but its node has no free core: it stays.
    Refused {
        /// The thread's key.
        thread: usize,
        /// Its (hot) CPU.
        cpu: u32,
        /// Its node.
        node: u32,
    },
}

#[derive(Debug, Clone)]
struct Watched {
    key: usize,
    bound: Bound,
    hot_ticks: u32,
    cooldown_left: u32,
    refusal_said: bool,
}

/// The decision core: the bound threads and their hysteresis state.
#[derive(Debug, Clone)]
pub struct Adapter {
    tun: Tunables,
    threads: Vec<Watched>,
}

impl Adapter {
    /// Watches `threads` (indexes are their order).
    pub fn new(threads: &[Bound], tun: Tunables) -> Adapter {
        assert!(
            tun.low < tun.high && tun.sustain > 0,
            "hysteresis needs low < high"
        );
        let threads = threads
            .iter()
            .enumerate()
            .map(|(key, &bound)| Watched {
                key,
                bound,
                hot_ticks: 0,
                cooldown_left: 0,
                refusal_said: false,
            })
            .collect();
        Adapter { tun, threads }
    }

    /// Watches thread `key` bound at `bound` (nothing if it is watched already).
    pub fn watch(&mut self, key: usize, bound: Bound) {
        if self.threads.iter().all(|t| t.key != key) {
            self.threads.push(Watched {
                key,
                bound,
                hot_ticks: 0,
                cooldown_left: 0,
                refusal_said: false,
            });
        }
    }

    /// Stops watching thread `key` (it ended).
    pub fn unwatch(&mut self, key: usize) {
        self.threads.retain(|t| t.key != key);
    }

    /// The keys watched now, in order.
    pub fn keys(&self) -> Vec<usize> {
        self.threads.iter().map(|t| t.key).collect()
    }

    /// Where the threads are now.
    pub fn placement(&self) -> Vec<Bound> {
        self.threads.iter().map(|t| t.bound).collect()
    }

    /// One tick: the CPUs' foreign load over it, and what moves.
    pub fn tick(&mut self, loads: &[CpuLoad]) -> Vec<Decision> {
        let mut out = Vec::new();
        for i in 0..self.threads.len() {
            if let Some(d) = self.decide(i, loads) {
                out.push(d);
            }
        }
        out
    }

    fn decide(&mut self, i: usize, loads: &[CpuLoad]) -> Option<Decision> {
        let tun = self.tun;
        let t = &mut self.threads[i];
        if t.cooldown_left > 0 {
            t.cooldown_left -= 1;
            t.hot_ticks = 0;
            return None;
        }
        let load = loads
            .iter()
            .find(|l| l.cpu == t.bound.cpu)
            .map_or(0.0, |l| l.foreign);
        if load < tun.high {
            t.hot_ticks = 0;
            t.refusal_said = false;
            return None;
        }
        t.hot_ticks += 1;
        if t.hot_ticks < tun.sustain {
            return None;
        }
        let Bound { node, cpu } = t.bound;
        let key = t.key;
        match self.free_core(node, cpu, loads) {
            Some(to) => {
                debug_assert!(loads.iter().any(|l| l.cpu == to && l.node == node));
                let t = &mut self.threads[i];
                t.bound.cpu = to;
                t.hot_ticks = 0;
                t.cooldown_left = tun.cooldown;
                Some(Decision::Move {
                    thread: key,
                    from: cpu,
                    to,
                    node,
                })
            }
            None => {
                let t = &mut self.threads[i];
                let first = !t.refusal_said;
                t.refusal_said = true;
                first.then_some(Decision::Refused {
                    thread: key,
                    cpu,
                    node,
                })
            }
        }
    }

    /// A core of `node` other than `from` under `low` foreign load: the one the fewest
    /// watched threads use, then the least loaded, then the lowest.
    fn free_core(&self, node: u32, from: u32, loads: &[CpuLoad]) -> Option<u32> {
        let users = |cpu: u32| self.threads.iter().filter(|t| t.bound.cpu == cpu).count();
        loads
            .iter()
            .filter(|l| l.node == node && l.cpu != from && l.foreign < self.tun.low)
            .min_by(|a, b| {
                users(a.cpu)
                    .cmp(&users(b.cpu))
                    .then(a.foreign.total_cmp(&b.foreign))
                    .then(a.cpu.cmp(&b.cpu))
            })
            .map(|l| l.cpu)
    }
}

#[cfg(test)]
mod tests;
