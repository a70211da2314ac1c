//! The pure planner of sluice: `plan(&Machine, &Job, Policy) -> Plan`.
//!
//! No syscalls happen here, so every decision can be tested on any synthetic machine.
//! `sluice-affinity` applies a [`Plan`] to the running process.

mod types;

pub use types::{
    Channel, ExecDomain, Job, ManualPlacement, Plan, PlanError, Policy, Role, ThreadPlan,
};
