//! NUMA-local fixed-size buffer pools, allocated once at start-up.
