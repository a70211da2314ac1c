use super::*;
use crate::monitor::threads::tests::FakeProc;

fn thread(tid: i32, role: &str, node: u32, cpu: u32) -> ThreadInfo {
    ThreadInfo {
        tid,
        role: role.into(),
        index: 0,
        channel: node,
        node,
        cpu,
    }
}

/// Two nodes (CPUs 0-1, 2-3); net-recv 101 on CPU 0 (node 0), io-write 202 on CPU 2
/// (node 1). A hog takes CPU 0 and others take all of node 1; ten one-second ticks.
#[test]
fn the_shell_moves_within_the_node_refuses_across_and_repins_through_the_kernel_call() {
    let p = FakeProc::new(&[&[0, 1], &[2, 3]]);
    let threads = [thread(101, "net-recv", 0, 0), thread(202, "io-write", 1, 2)];
    let mut m = Mover::new(
        Sampler::new(p.reader(), vec![0, 1, 2, 3]),
        Tunables::default(),
    );
    let mut applied = Vec::new();
    let mut events = Vec::new();
    for s in 0..10u64 {
        // Every CPU counts 100 ticks a second; CPUs 0, 2 and 3 are busy, CPU 1 idle.
        p.stat(&[
            (0, 100 * s, 0),
            (1, 0, 100 * s),
            (2, 100 * s, 0),
            (3, 100 * s, 0),
        ]);
        p.task(101, 5 * s, 0); // our thread's own 5 %: the rest is foreign
        p.task(202, 5 * s, 2);
        let mut apply = |tid: i32, cpu: u32| {
            applied.push((tid, cpu));
            Ok(())
        };
        events.extend(m.tick(&threads, &mut apply));
    }
    assert_eq!(
        applied,
        [(101, 1)],
        "only the node-0 thread moves, to CPU 1"
    );
    let moves: Vec<&PlacementMove> = events
        .iter()
        .filter_map(|e| match e {
            Event::Moved(101, m) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(moves.len(), 1, "{events:?}");
    assert_eq!(
        (
            moves[0].role.as_str(),
            moves[0].node,
            moves[0].from_cpu,
            moves[0].to_cpu
        ),
        ("net-recv", 0, 0, 1)
    );
    assert!(moves[0].reason.contains("95%"), "{}", moves[0].reason);
    let refusals: Vec<&PlacementRefusal> = events
        .iter()
        .filter_map(|e| match e {
            Event::Refused(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(refusals.len(), 1, "said once: {events:?}");
    assert_eq!((refusals[0].node, refusals[0].cpu), (1, 2));
    assert_eq!(events.len(), 2);
}

#[test]
fn a_move_the_kernel_refuses_is_not_recorded() {
    let p = FakeProc::new(&[&[0, 1]]);
    let threads = [thread(101, "net-send", 0, 0)];
    let mut m = Mover::new(Sampler::new(p.reader(), vec![0, 1]), Tunables::default());
    let mut events = Vec::new();
    for s in 0..6u64 {
        p.stat(&[(0, 100 * s, 0), (1, 0, 100 * s)]);
        p.task(101, 0, 0);
        let mut apply = |_: i32, _: u32| Err("ESRCH".to_string());
        events.extend(m.tick(&threads, &mut apply));
    }
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn recorded_moves_are_timed_from_the_start_asked_about() {
    let start = Instant::now();
    let m = PlacementMove {
        role: "test-only-role".into(),
        channel: 9,
        node: 0,
        from_cpu: 0,
        to_cpu: 1,
        at_secs: 0.0,
        reason: "r".into(),
    };
    record(Event::Moved(-5, m.clone()));
    let (moves, _) = since(start);
    let mine: Vec<_> = moves
        .iter()
        .filter(|x| x.role == "test-only-role")
        .collect();
    assert_eq!(mine.len(), 1);
    assert!(mine[0].at_secs >= 0.0 && mine[0].to_cpu == 1);
    let later = Instant::now() + Duration::from_secs(3600);
    assert!(since(later).0.iter().all(|x| x.role != "test-only-role"));
    assert!(move_counts()
        .iter()
        .any(|((role, node), n)| role == "test-only-role" && *node == 0 && *n == 1));
    let text = crate::monitor::prom::render();
    assert!(
        text.contains(r#"sluice_thread_moves_total{role="test-only-role",node="0"} 1"#),
        "{text}"
    );
    assert!(text.contains("# TYPE sluice_thread_cpu gauge"), "{text}");
}

#[test]
fn recorded_refusals_are_counted_in_the_metrics() {
    let r = PlacementRefusal {
        role: "test-only-refused-role".into(),
        channel: 3,
        node: 1,
        cpu: 2,
        at_secs: 0.0,
        reason: "r".into(),
    };
    record(Event::Refused(r.clone()));
    record(Event::Refused(r));
    assert!(refusal_counts()
        .iter()
        .any(|((role, node), n)| role == "test-only-refused-role" && *node == 1 && *n == 2));
    let text = crate::monitor::prom::render();
    assert!(
        text.contains(
            r#"sluice_thread_move_refusals_total{role="test-only-refused-role",node="1"} 2"#
        ),
        "{text}"
    );
}

#[test]
fn the_text_summary_has_a_line_per_move_and_refusal() {
    let m = PlacementMove {
        role: "io-read".into(),
        channel: 0,
        node: 1,
        from_cpu: 3,
        to_cpu: 2,
        at_secs: 4.04,
        reason: "why".into(),
    };
    let r = PlacementRefusal {
        role: "net-recv".into(),
        channel: 1,
        node: 0,
        cpu: 1,
        at_secs: 5.0,
        reason: "full".into(),
    };
    assert!(lines(&[], &[]).is_empty());
    assert_eq!(
        lines(&[m], &[r]),
        [
            "placement: moved io-read (channel 0, node 1) from CPU 3 to CPU 2 at 4.0 s: why",
            "placement: net-recv (channel 1, node 0) stayed on busy CPU 1 at 5.0 s: full"
        ]
    );
}

/// One node of CPUs 0-2; net-send 101 on CPU 0, which a hog takes; CPU 1 is busy too and
/// CPU 2, the only idle one, is reserved (`--reserve-cores 2`): the thread stays, and
/// the refusal is said, instead of moving onto a CPU the operator kept for others.
#[test]
fn a_reserved_cpu_is_never_a_target() {
    assert_eq!(watched_cpus(vec![0, 1, 2], &[2]), vec![0, 1]);
    assert_eq!(watched_cpus(vec![0, 1], &[0, 1]), vec![0, 1], "never none");
    let p = FakeProc::new(&[&[0, 1, 2]]);
    let threads = [thread(101, "net-send", 0, 0)];
    let run = |cpus: Vec<u32>| {
        let mut m = Mover::new(Sampler::new(p.reader(), cpus), Tunables::default());
        let mut applied = Vec::new();
        for s in 0..10u64 {
            p.stat(&[(0, 100 * s, 0), (1, 100 * s, 0), (2, 0, 100 * s)]);
            p.task(101, 5 * s, 0);
            let mut apply = |tid: i32, cpu: u32| {
                applied.push((tid, cpu));
                Ok(())
            };
            let _ = m.tick(&threads, &mut apply);
        }
        applied
    };
    assert_eq!(run(vec![0, 1, 2]), [(101, 2)], "unreserved, CPU 2 is taken");
    assert!(
        run(watched_cpus(vec![0, 1, 2], &[2])).is_empty(),
        "reserved, it is not"
    );
}
