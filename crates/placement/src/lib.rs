//! The pure planner of sluice: `plan(&Machine, &Job, Policy) -> Plan`.
//!
//! No syscalls happen here, so every decision can be tested on any synthetic machine.
//! `sluice-affinity` applies a [`Plan`] to the running process.
//!
//! A plan is a list of **channels** (seed 003's Tyche channel): each a NUMA-local
//! bundle of buffer memory, the NICs it drives and the threads that touch them.
//!
//! # Policies
//!
//! | policy | channels | threads |
//! |--------|----------|---------|
//! | `os`   | one, unbound | unbound: the scheduler decides (the baseline) |
//! | `bind` | one, on the first selected NIC's node | all on that node's cores, even when that oversubscribes it (seed 000's NB) |
//! | `smts` | one per socket, buffers on the socket's NIC node (else its first node) | each on a core of its channel's socket; I/O round-robin over sockets from the NIC's socket; net threads on the NIC's node (seed 000's SMTS) |
//! | `nmts` | one per NUMA node | balanced over nodes, round-robin per role; net threads on NIC nodes, control next to them (seed 000's NMTS) |
//! | `mts`  | one per NUMA node, grouped by socket | net threads on each NIC's node, I/O and compression round-robin over the sockets from the NIC's socket, then over their nodes (seed 000's MTS) |
//! | `auto` | one of the above | one usable node: `os`; all selected NICs on one node and the threads fit on its cores: `bind`; otherwise `mts` |
//!
//! Every bound thread gets one whole core while free cores remain where it may go
//! (net threads first, on their NIC's node; I/O threads starting at their storage
//! device's node, seed 002); only then do threads share cores, and the plan says so in
//! one note. When the job does not fit the machine, net threads share their NIC node's
//! cores rather than leave it, and I/O and compression threads share cores elsewhere.
//! A channel's buffers are bound to its `numa_node` alone; its `nodes` are where its
//! threads may run. Every channel that drives a NIC has a control thread (every
//! channel with data-path threads, when none drives a NIC). Manual placements (`--place ROLE=mem:N,exec:A+B|os`) express seed 001's
//! configurations A-H. [`Plan::explain`] says, in sentences, why the policy was chosen
//! and where each role went.
//!
//! # Example
//!
//! ```
//! use sluice_placement::{describe, plan, Job, Policy, Role};
//! use sluice_topology::{Machine, Nic};
//!
//! // Two sockets, one node each, four cores of two PUs; the NIC on node 1.
//! let mut machine = Machine::uniform(2, 1, 4, 2, 1 << 34);
//! machine.nics.push(Nic {
//!     name: "eth1".into(),
//!     numa_node: Some(1),
//!     link_speed_mbps: Some(100_000),
//!     mac: None,
//!     addresses: Vec::new(),
//!     pci_bus_id: None,
//! });
//! let job = Job {
//!     threads: vec![(Role::NetRecv, 2), (Role::IoWrite, 2)],
//!     nics: Vec::new(),
//!     storage: Vec::new(),
//!     buffer_bytes: 256 << 20,
//!     chunk_bytes: 4 << 20,
//!     reserved_cpus: Vec::new(),
//!     placements: Vec::new(),
//! };
//! let plan = plan(&machine, &job, Policy::Auto).expect("a valid job");
//! // Five threads fit on node 1's four cores? No: auto spreads them (MTS).
//! assert_eq!(plan.policy, Policy::Mts);
//! for (channel, thread) in plan.threads() {
//!     if thread.role == Role::NetRecv {
//!         assert_eq!(channel.numa_node, Some(1));
//!     }
//! }
//! assert_eq!(plan.buffer_bytes(), 256 << 20);
//! print!("{}", describe(&plan));
//! ```

#![deny(missing_docs)]

mod cpulist;
mod describe;
mod planner;
mod types;

pub use cpulist::format_cpulist;
pub use describe::describe;
pub use planner::{plan, PAGE_BYTES, THREADS_MAX};
pub use types::{
    Channel, ExecDomain, Job, ManualPlacement, Plan, PlanError, Policy, Role, ThreadPlan,
};
