use super::*;

/// A fake `/proc` and `/sys` under a temporary directory.
pub(crate) struct FakeProc {
    pub(crate) dir: tempfile::TempDir,
}

impl FakeProc {
    /// `nodes[n]` lists node n's CPUs.
    pub(crate) fn new(nodes: &[&[u32]]) -> FakeProc {
        let dir = tempfile::tempdir().expect("tempdir");
        for (n, cpus) in nodes.iter().enumerate() {
            let d = dir.path().join(format!("sys/devices/system/node/node{n}"));
            std::fs::create_dir_all(&d).expect("node dir");
            let list: Vec<String> = cpus.iter().map(u32::to_string).collect();
            std::fs::write(d.join("cpulist"), list.join(",") + "\n").expect("cpulist");
        }
        std::fs::create_dir_all(dir.path().join("proc/self/task")).expect("task dir");
        FakeProc { dir }
    }

    /// `/proc/stat` with each CPU's (busy, idle) ticks.
    pub(crate) fn stat(&self, cpus: &[(u32, u64, u64)]) {
        let mut s = String::from("cpu  1 2 3 4 5 6 7 8 0 0\n");
        for &(cpu, busy, idle) in cpus {
            // 500 ticks stolen by the hypervisor: never counted as anyone's load.
            s.push_str(&format!("cpu{cpu} {busy} 0 0 {idle} 0 0 0 500 0 0\n"));
        }
        s.push_str("intr 0\nctxt 0\n");
        std::fs::write(self.dir.path().join("proc/stat"), s).expect("stat");
    }

    /// Task `tid` of "this process" has used `ticks` and last ran on `cpu`.
    pub(crate) fn task(&self, tid: i32, ticks: u64, cpu: u32) {
        let d = self.dir.path().join(format!("proc/self/task/{tid}"));
        std::fs::create_dir_all(&d).expect("task");
        let mut f = vec!["0".to_string(); 50];
        f[14 - 3] = (ticks / 2).to_string();
        f[15 - 3] = (ticks - ticks / 2).to_string();
        f[39 - 3] = cpu.to_string();
        let line = format!("{tid} (net recv (x)) S {}\n", f[1..].join(" "));
        std::fs::write(d.join("stat"), line).expect("task stat");
    }

    pub(crate) fn reader(&self) -> ProcReader {
        ProcReader::at(self.dir.path())
    }
}

#[test]
fn a_task_stat_gives_its_ticks_and_cpu_whatever_its_name() {
    let p = FakeProc::new(&[&[0]]);
    p.task(7, 301, 5);
    assert_eq!(p.reader().tasks(), [(7, 301, 5)]);
}

#[test]
fn nodes_come_from_sys_and_cpus_from_proc_stat() {
    let p = FakeProc::new(&[&[0, 1], &[2, 3]]);
    p.stat(&[(0, 10, 90), (3, 5, 5)]);
    let r = p.reader();
    assert_eq!(r.cpu_nodes().get(&3), Some(&1));
    assert_eq!(r.cpu_nodes().get(&0), Some(&0));
    let t = r.cpu_ticks();
    assert_eq!(t.get(&0), Some(&(100, 90)));
    assert_eq!(t.get(&3), Some(&(10, 5)));
    assert!(!t.contains_key(&u32::MAX), "the all-CPU line is no CPU");
}

#[test]
fn our_own_threads_time_is_not_foreign_load() {
    let p = FakeProc::new(&[&[0, 1]]);
    p.stat(&[(0, 0, 0), (1, 0, 0)]);
    p.task(100, 0, 0);
    let mut s = Sampler::new(p.reader(), vec![0, 1]);
    assert!(s.sample().is_empty(), "the first read is the baseline");
    // Over 100 ticks: CPU 0 all busy, 80 of them our thread's; CPU 1 busy 90 by others.
    p.stat(&[(0, 100, 0), (1, 90, 10)]);
    p.task(100, 80, 0);
    let loads = s.sample();
    let at = |cpu: u32| {
        loads
            .iter()
            .find(|l| l.cpu == cpu)
            .map(|l| (l.node, l.foreign))
            .expect("cpu")
    };
    assert_eq!(at(0).0, 0);
    assert!((at(0).1 - 0.2).abs() < 1e-9, "{loads:?}");
    assert!((at(1).1 - 0.9).abs() < 1e-9, "{loads:?}");
}

#[test]
fn the_registry_is_bounded_and_forgets_a_thread_when_it_ends() {
    let info = |tid| ThreadInfo {
        tid,
        role: "net-recv".into(),
        index: 0,
        channel: 0,
        node: 0,
        cpu: 0,
    };
    let base = -1_000_000;
    let regs: Vec<Registration> = (0..i32::try_from(MAX_THREADS).unwrap_or(i32::MAX) + 5)
        .filter_map(|i| register(info(base - i)))
        .collect();
    let ours = registered().iter().filter(|t| t.tid <= base).count();
    assert!(ours <= MAX_THREADS && ours == regs.len(), "{ours}");
    drop(regs);
    assert!(registered().iter().all(|t| t.tid > base));
}
