//! Machine topology for sluice.
//!
//! [`model`] is the plain-data description of a machine (packages, NUMA nodes, cores,
//! NICs, block devices, distances, the allowed cpuset) that the planner consumes and
//! `sluice topo --json` prints. [`cpulist`] reads and writes the kernel's CPU list
//! notation (`0-3,8`). With the default `discover` feature, the crate also builds the
//! model from hwloc: this machine, a synthetic description or an XML file
//! ([`discover`]), and finds the disk that holds a path ([`storage_for_path`]).
//!
//! ```
//! # #[cfg(feature = "discover")] {
//! use sluice_topology::{discover, TopologySource};
//! let source: TopologySource = "synthetic:\"pack:2 numa:2 core:4 pu:1\"".parse()?;
//! let machine = discover(&source)?;
//! assert_eq!(machine.nodes.len(), 4);
//! assert_eq!(machine.node_of_cpu(9), Some(2));
//! # }
//! # Ok::<(), sluice_topology::TopologyError>(())
//! ```
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

#[cfg(feature = "discover")]
mod discover;
#[cfg(feature = "discover")]
mod netif;
#[cfg(feature = "discover")]
mod storage;
#[cfg(feature = "discover")]
mod sysfs;

pub use error::TopologyError;
pub use model::{BlockDevice, Core, Machine, Nic, Node, Package};
pub use source::TopologySource;

#[cfg(feature = "discover")]
pub use discover::{discover, LINK_SPEED_INFO};
#[cfg(feature = "discover")]
pub use storage::storage_for_path;
