//! The checks of interrupt placement: a NIC's interrupts on its own NUMA node, and
//! irqbalance, which moves them.

use super::facts::{Facts, NicFacts};
use super::finding::{Finding, Status, Target};
use sluice_topology::cpulist;

/// The irq checks of the checked NICs, then irqbalance.
pub fn checks(f: &Facts, t: &Target, nics: &[&NicFacts]) -> Vec<Finding> {
    let mut out: Vec<Finding> = nics.iter().map(|nic| affinity(f, t, nic)).collect();
    out.push(irqbalance(f));
    out
}

/// Whether every MSI interrupt of `nic` runs only on CPUs of the NIC's node.
pub fn affinity(f: &Facts, t: &Target, nic: &NicFacts) -> Finding {
    let check = format!("irq_affinity:{}", nic.name);
    let why = format!(
        "the NIC writes packets into its own node's memory; an interrupt and its softirq \
         on another node's CPU pull every packet across the interconnect and share that \
         CPU's cache with nothing it uses, {}",
        t.at()
    );
    let Some(node) = nic.numa_node else {
        let found = format!(
            "{} reports no NUMA node (one node, or a virtual NIC)",
            nic.name
        );
        return Finding::ok(check, found, why);
    };
    let Some(local) = f.node_cpus.get(&node).filter(|c| !c.is_empty()) else {
        let found = format!("{} is on node {node}, whose CPUs are not listed", nic.name);
        return Finding::ok(check, found, why);
    };
    if nic.irqs.is_empty() {
        let found = format!("{} lists no MSI interrupts (device/msi_irqs)", nic.name);
        return Finding::ok(check, found, why);
    }
    let off: Vec<&(u32, Vec<u32>)> = nic
        .irqs
        .iter()
        .filter(|(_, cpus)| !cpus.is_empty() && !cpus.iter().all(|c| local.contains(c)))
        .collect();
    let local_list = cpulist::format(local);
    if off.is_empty() {
        let found = format!(
            "all {} interrupts of {} run on node {node} (CPUs {local_list})",
            nic.irqs.len(),
            nic.name
        );
        return Finding::ok(check, found, why);
    }
    let examples: Vec<String> = off
        .iter()
        .take(4)
        .map(|(irq, cpus)| format!("irq {irq} on CPUs {}", cpulist::format(cpus)))
        .collect();
    let found = format!(
        "{} of {} interrupts of {} (node {node}, CPUs {local_list}) may run on other \
         nodes: {}",
        off.len(),
        nic.irqs.len(),
        nic.name,
        examples.join(", ")
    );
    let irqs: Vec<String> = off.iter().map(|(irq, _)| irq.to_string()).collect();
    let fix = format!(
        "systemctl disable --now irqbalance; for i in {}; do echo {local_list} > \
         /proc/irq/$i/smp_affinity_list; done (or the NIC vendor's \
         set_irq_affinity_cpulist.sh {local_list} {})",
        irqs.join(" "),
        nic.name
    );
    Finding::needs(Status::Limit, check, found, why, fix)
}

/// irqbalance rewrites interrupt affinity by its own policy.
pub fn irqbalance(f: &Facts) -> Finding {
    const CHECK: &str = "irqbalance";
    let why = "irqbalance moves interrupts every few seconds by its own policy and undoes \
               a NIC's pinned affinity";
    if !f.irqbalance {
        return Finding::ok(CHECK, "irqbalance does not run", why);
    }
    let fix = "systemctl disable --now irqbalance, then pin the NIC's interrupts to its \
               node (see irq_affinity); or keep it off those CPUs with \
               IRQBALANCE_BANNED_CPULIST in /etc/default/irqbalance";
    Finding::needs(Status::Advice, CHECK, "irqbalance runs", why, fix)
}
