//! Machine topology for sluice.
//!
//! [`model`] is the plain-data description of a machine (packages, NUMA nodes, cores,
//! NICs, block devices, distances, the allowed cpuset) that the planner consumes and
//! `sluice topo --json` prints. [`cpulist`] reads and writes the kernel's CPU list
//! notation (`0-3,8`). [`TopologySource`] names where a machine comes from.
//!
//! Module map: `model` (the contract), `cpulist`, `source` (what `--topology` names),
//! `error`; behind `discover`: `discover` (hwloc -> model), `sysfs` (what hwloc does not
//! say: link speed, disk size, virtio device locality), `netif` (IP addresses),
//! `storage` (path -> disk).

#![deny(missing_docs)]

pub mod cpulist;
pub mod error;
pub mod model;
pub mod source;

pub use error::TopologyError;
pub use model::{BlockDevice, Core, Machine, Nic, Node, Package};
pub use source::TopologySource;
