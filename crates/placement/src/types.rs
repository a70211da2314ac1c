//! Job, policy and plan: the inputs and the output of the planner.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a thread does. The names are the CLI's and the JSON's (`net-recv`, `io-read` ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Master/control thread of a channel (seed 000's MT): schedules chunks, owns the
    /// control connection.
    Control,
    /// Writes frames to a data connection (seed 000's CT on the source side).
    NetSend,
    /// Reads frames from a data connection (CT on the sink side).
    NetRecv,
    /// Reads chunks from storage into channel buffers.
    IoRead,
    /// Writes chunks from channel buffers to storage.
    IoWrite,
    /// Compresses chunks (seed 001).
    Compress,
    /// Decompresses chunks (seed 001).
    Decompress,
}

impl Role {
    /// Every role, in the order threads are listed in a channel.
    pub const ALL: [Role; 7] = [
        Role::Control,
        Role::NetSend,
        Role::NetRecv,
        Role::IoRead,
        Role::IoWrite,
        Role::Compress,
        Role::Decompress,
    ];

    /// The role's name as written on the command line and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Control => "control",
            Role::NetSend => "net-send",
            Role::NetRecv => "net-recv",
            Role::IoRead => "io-read",
            Role::IoWrite => "io-write",
            Role::Compress => "compress",
            Role::Decompress => "decompress",
        }
    }

    /// Whether the thread talks to a NIC (and so belongs on the NIC's node).
    pub fn is_nic_facing(self) -> bool {
        matches!(self, Role::NetSend | Role::NetRecv)
    }

    /// Whether the thread touches storage.
    pub fn is_io(self) -> bool {
        matches!(self, Role::IoRead | Role::IoWrite)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Role::ALL.iter().map(|r| r.as_str()).collect();
                format!("unknown role {s:?}: expected one of {}", names.join(", "))
            })
    }
}

/// A placement policy (see the crate docs for what each does and which seed it follows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Bind nothing: the operating system places threads and pages.
    Os,
    /// Every thread and all buffer memory on the NIC's node (seed 000's NB).
    Bind,
    /// One buffer partition and connection group per socket (seed 000's SMTS).
    Smts,
    /// One channel per NUMA node, threads balanced over nodes, a channel's control and
    /// communication threads co-located (seed 000's NMTS).
    Nmts,
    /// SMTS and NMTS together (seed 000's MTS).
    Mts,
    /// Chosen from the machine and the job; the plan's `explain` says why.
    Auto,
}

impl Policy {
    /// Every policy, in the order `--help` lists them.
    pub const ALL: [Policy; 6] = [
        Policy::Auto,
        Policy::Os,
        Policy::Bind,
        Policy::Smts,
        Policy::Nmts,
        Policy::Mts,
    ];

    /// The policy's name as written on the command line and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Os => "os",
            Policy::Bind => "bind",
            Policy::Smts => "smts",
            Policy::Nmts => "nmts",
            Policy::Mts => "mts",
            Policy::Auto => "auto",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                format!("unknown policy {s:?}: expected one of auto, os, bind, smts, nmts, mts")
            })
    }
}

/// Where a manually placed role executes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExecDomain {
    /// On the union of the allowed PUs of these nodes (seed 001's "0 & 1").
    Nodes(Vec<u32>),
    /// Unbound: the OS decides (seed 001's "OS").
    Os,
}

/// A manual placement for every thread of one role: `--place ROLE=mem:N,exec:A+B|os`.
/// Enough to write seed 001's configurations A-H.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManualPlacement {
    /// The role placed.
    pub role: Role,
    /// NUMA node of the buffer memory those threads use (their channel's node).
    pub mem_node: u32,
    /// Where they run.
    pub exec: ExecDomain,
}

impl FromStr for ManualPlacement {
    type Err = String;

    /// Parses `ROLE=mem:N,exec:A+B` or `ROLE=mem:N,exec:os`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let expected = "expected ROLE=mem:N,exec:A[+B...] or ROLE=mem:N,exec:os";
        let (role, spec) = s
            .split_once('=')
            .ok_or_else(|| format!("invalid placement {s:?}: {expected}"))?;
        let role: Role = role
            .trim()
            .parse()
            .map_err(|e| format!("invalid placement {s:?}: {e}"))?;
        let mut mem_node = None;
        let mut exec = None;
        for part in spec.split(',') {
            let (key, value) = part.split_once(':').ok_or_else(|| {
                format!("invalid placement {s:?}: {part:?} is not KEY:VALUE; {expected}")
            })?;
            match key.trim() {
                "mem" => {
                    let n = value.trim().parse::<u32>().map_err(|_| {
                        format!("invalid placement {s:?}: mem {value:?} is not a node number")
                    })?;
                    mem_node = Some(n);
                }
                "exec" if value.trim() == "os" => exec = Some(ExecDomain::Os),
                "exec" => {
                    let nodes = value
                        .split('+')
                        .map(|v| v.trim().parse::<u32>())
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|_| {
                            format!(
                                "invalid placement {s:?}: exec {value:?} is not node numbers joined by '+' or 'os'"
                            )
                        })?;
                    exec = Some(ExecDomain::Nodes(nodes));
                }
                other => {
                    return Err(format!(
                        "invalid placement {s:?}: unknown key {other:?}; {expected}"
                    ))
                }
            }
        }
        match (mem_node, exec) {
            (Some(mem_node), Some(exec)) => Ok(ManualPlacement {
                role,
                mem_node,
                exec,
            }),
            _ => Err(format!(
                "invalid placement {s:?}: both mem and exec are needed; {expected}"
            )),
        }
    }
}

/// What a transfer needs: how many threads of each role, which NICs and storage
/// devices, how much buffer memory, and the operator's constraints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Number of threads per role (control threads are added per channel by the
    /// planner; a count given here is a minimum).
    pub threads: Vec<(Role, u32)>,
    /// NIC names to use. Empty: the planner takes the machine's NICs with a known node,
    /// or none.
    pub nics: Vec<String>,
    /// Block devices the job reads or writes (source and destination storage).
    pub storage: Vec<String>,
    /// Total buffer memory for all channels, bytes (`--buffer-mem`).
    pub buffer_bytes: u64,
    /// Slot (chunk) size, bytes (`--chunk-size`).
    pub chunk_bytes: u64,
    /// PUs never to be used (`--reserve-cores`, seed 002's zoning).
    pub reserved_cpus: Vec<u32>,
    /// Manual placements per role (`--place`).
    pub placements: Vec<ManualPlacement>,
}

impl Job {
    /// The number of threads of `role` the job asks for.
    pub fn count(&self, role: Role) -> u32 {
        self.threads
            .iter()
            .filter(|(r, _)| *r == role)
            .map(|(_, n)| n)
            .sum()
    }
}

/// The planner's output: a list of channels, each a NUMA-local bundle of threads,
/// buffer memory and NICs (Tyche's channel, seed 003).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The policy applied (never `auto`: auto resolves to one of the others).
    pub policy: Policy,
    /// The policy the caller asked for (`auto` or the same as `policy`).
    pub requested_policy: Policy,
    /// Slot size the buffer partitions are cut into, bytes.
    pub chunk_bytes: u64,
    /// The channels.
    pub channels: Vec<Channel>,
    /// Facts an operator should know: oversubscription, NICs without locality,
    /// sockets without a NIC, reservations.
    pub notes: Vec<String>,
    /// Why the policy was chosen and how the threads were placed (`--explain`).
    pub explain: Vec<String>,
}

/// A channel: protocol state, buffers and threads that live together on one NUMA node
/// (or one socket for `smts`, or nowhere in particular for `os`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Channel {
    /// Channel number, 0-based, stable within a plan.
    pub id: u32,
    /// The node the channel's buffer partition is bound to, and only this node
    /// (`sluice-affinity` binds and verifies the partition against it alone): the NIC
    /// node for `bind`; the channel's node for `nmts` and `mts`; for `smts`, the
    /// socket's node with a selected NIC, else its first usable node. `None` when
    /// unbound (`os`).
    pub numa_node: Option<u32>,
    /// The nodes the channel's threads may run on (never where its memory goes; see
    /// `numa_node`): `[numa_node]`, or a socket's nodes for `smts`, plus any node that
    /// one of its net threads spilled to because the NIC's node was full (the job
    /// fitting the machine). Sorted; empty when unbound.
    pub nodes: Vec<u32>,
    /// Package of the channel, if bound.
    pub package: Option<u32>,
    /// NICs whose connections this channel drives. Under `smts`, `nmts` and `mts` only
    /// NICs attached to one of the channel's `nodes` (a NIC on a node without usable
    /// CPUs or memory counts as attached to the nearest usable node), and NICs of
    /// unknown locality in the channel their net threads went to; `bind` lists every
    /// selected NIC (a note says which cross the interconnect), and manually placed net
    /// threads make their channel list the NIC they drive.
    pub nics: Vec<String>,
    /// This channel's buffer partition, bytes. All partitions add up to the job's cap.
    pub buffer_bytes: u64,
    /// The channel's threads.
    pub threads: Vec<ThreadPlan>,
}

/// One planned thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadPlan {
    /// What it does.
    pub role: Role,
    /// Its number within its role across the whole plan (net-send 0, net-send 1, ...).
    pub index: u32,
    /// OS indexes of the PUs it is bound to; `None` for unbound.
    pub cpus: Option<Vec<u32>>,
    /// Whether a manual placement put it here (it may then run outside the channel's node).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manual: bool,
}

impl Plan {
    /// All threads of the plan with the channel each belongs to.
    pub fn threads(&self) -> impl Iterator<Item = (&Channel, &ThreadPlan)> {
        self.channels
            .iter()
            .flat_map(|c| c.threads.iter().map(move |t| (c, t)))
    }

    /// Sum of all buffer partitions.
    pub fn buffer_bytes(&self) -> u64 {
        self.channels.iter().map(|c| c.buffer_bytes).sum()
    }
}

/// Why no plan could be made. Each message names the value and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// `--nic NAME` names an interface the machine does not have.
    #[error("unknown NIC {name:?}: this machine has {available}")]
    UnknownNic {
        /// The name asked for.
        name: String,
        /// The NICs the machine has, comma-separated, or "no NICs".
        available: String,
    },
    /// A storage device the machine does not have.
    #[error("unknown block device {name:?}: this machine has {available}")]
    UnknownBlockDevice {
        /// The name asked for.
        name: String,
        /// The devices the machine has.
        available: String,
    },
    /// A reserved CPU the machine does not have.
    #[error("reserved CPU {cpu} does not exist: allowed CPUs are {allowed}")]
    UnknownReservedCpu {
        /// The CPU asked for.
        cpu: u32,
        /// The allowed CPUs, as a list.
        allowed: String,
    },
    /// Reservations (and the allowed cpuset) leave no CPU to run on.
    #[error("--reserve-cores {reserved} leaves no usable CPU: allowed CPUs are {allowed}")]
    NoCpuLeft {
        /// The reserved CPUs, as a list.
        reserved: String,
        /// The allowed CPUs, as a list.
        allowed: String,
    },
    /// The buffer cap cannot give every data-path thread one slot.
    #[error(
        "--buffer-mem {buffer_bytes} is too small: {threads} threads need at least one {chunk_bytes}-byte slot each ({needed} bytes)"
    )]
    BufferTooSmall {
        /// The cap.
        buffer_bytes: u64,
        /// Slot size.
        chunk_bytes: u64,
        /// Threads that need a slot.
        threads: u64,
        /// Bytes needed.
        needed: u64,
    },
    /// Chunk size zero or not a multiple of the page size.
    #[error("--chunk-size {chunk_bytes} is invalid: expected a positive multiple of 4096 bytes")]
    BadChunkSize {
        /// The size asked for.
        chunk_bytes: u64,
    },
    /// A manual placement names a node that does not exist or has no CPUs/memory.
    #[error("--place {role}: node {node} {problem}")]
    BadPlacementNode {
        /// The role placed.
        role: Role,
        /// The node named.
        node: u32,
        /// What is wrong with it.
        problem: String,
    },
    /// The machine has no node with both CPUs and memory (or none at all).
    #[error("the machine has no NUMA node with both usable CPUs and memory")]
    NoUsableNode,
    /// The job asks for more threads than a plan may hold (a limit, so that a typo such
    /// as `--streams 4000000000` is an error rather than an out-of-memory abort).
    #[error("the job asks for {threads} threads: expected at most {max}")]
    TooManyThreads {
        /// Threads asked for, all roles together.
        threads: u64,
        /// The limit ([`crate::THREADS_MAX`]).
        max: u64,
    },
}
