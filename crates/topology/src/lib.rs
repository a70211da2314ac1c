//! Machine topology for sluice.
//!
//! [`model`] is the plain-data description of a machine (packages, NUMA nodes, cores,
//! NICs, block devices, distances, the allowed cpuset) that the planner consumes and
//! `sluice topo --json` prints. With the default `discover` feature, the crate also
//! builds that model from hwloc: this machine, a synthetic description or an XML file.

pub mod model;

pub use model::{BlockDevice, Core, Machine, Nic, Node, Package};
