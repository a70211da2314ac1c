use super::*;

/// Two nodes of four CPUs: node 0 has CPUs 0-3, node 1 CPUs 4-7; `hot` CPUs carry a
/// foreign load of 1.0, the others none.
fn loads(hot: &[u32]) -> Vec<CpuLoad> {
    (0..8)
        .map(|cpu| CpuLoad {
            cpu,
            node: cpu / 4,
            foreign: if hot.contains(&cpu) { 1.0 } else { 0.0 },
        })
        .collect()
}

fn moves(d: &[Decision]) -> usize {
    d.iter()
        .filter(|d| matches!(d, Decision::Move { .. }))
        .count()
}

#[test]
fn a_steady_hog_moves_its_thread_once_to_a_free_core_of_the_same_node() {
    let mut a = Adapter::new(&[Bound { node: 0, cpu: 0 }], Tunables::default());
    let mut all = Vec::new();
    for _ in 0..100 {
        all.extend(a.tick(&loads(&[0])));
    }
    assert_eq!(
        all,
        [Decision::Move {
            thread: 0,
            from: 0,
            to: 1,
            node: 0
        }]
    );
    assert_eq!(a.placement(), [Bound { node: 0, cpu: 1 }]);
}

#[test]
fn a_flapping_load_never_moves_a_thread() {
    let mut a = Adapter::new(&[Bound { node: 0, cpu: 0 }], Tunables::default());
    for tick in 0..1000 {
        let hot: &[u32] = if tick % 3 == 2 { &[] } else { &[0] };
        assert!(a.tick(&loads(hot)).is_empty(), "tick {tick}");
    }
}

#[test]
fn a_hog_that_follows_the_thread_moves_it_at_most_once_per_cooldown() {
    let tun = Tunables::default();
    let mut a = Adapter::new(&[Bound { node: 0, cpu: 0 }], tun);
    let mut n = 0;
    let ticks = 300;
    for _ in 0..ticks {
        let at = a.placement()[0].cpu;
        let d = a.tick(&loads(&[at]));
        n += moves(&d);
        for d in &d {
            if let Decision::Move { from, to, node, .. } = d {
                assert_ne!(from, to);
                assert_eq!((*node, to / 4), (0, 0), "never across nodes");
            }
        }
    }
    let bound = ticks / (tun.sustain + tun.cooldown) + 1;
    assert!(n > 0 && n <= bound as usize, "{n} moves in {ticks} ticks");
}

#[test]
fn a_full_node_refuses_once_and_never_crosses_to_the_idle_one() {
    let mut a = Adapter::new(&[Bound { node: 0, cpu: 0 }], Tunables::default());
    let mut all = Vec::new();
    for _ in 0..50 {
        all.extend(a.tick(&loads(&[0, 1, 2, 3])));
    }
    assert_eq!(
        all,
        [Decision::Refused {
            thread: 0,
            cpu: 0,
            node: 0
        }]
    );
    assert_eq!(a.placement(), [Bound { node: 0, cpu: 0 }]);
}

#[test]
fn two_threads_never_move_onto_the_same_core() {
    let threads = [Bound { node: 1, cpu: 4 }, Bound { node: 1, cpu: 5 }];
    let mut a = Adapter::new(&threads, Tunables::default());
    for _ in 0..20 {
        a.tick(&loads(&[4, 5]));
    }
    let p = a.placement();
    assert_ne!(p[0].cpu, p[1].cpu);
    assert!(
        p.iter().all(|b| b.node == 1 && (6..8).contains(&b.cpu)),
        "{p:?}"
    );
}

#[test]
fn a_core_our_own_threads_share_is_taken_only_when_the_node_has_no_other() {
    // Node 0 of a two-core machine: thread 0 on the hot CPU 0, thread 1 on CPU 1.
    let two = |hot: u32| -> Vec<CpuLoad> {
        (0..2)
            .map(|cpu| CpuLoad {
                cpu,
                node: 0,
                foreign: if cpu == hot { 1.0 } else { 0.0 },
            })
            .collect()
    };
    let mut a = Adapter::new(
        &[Bound { node: 0, cpu: 0 }, Bound { node: 0, cpu: 1 }],
        Tunables::default(),
    );
    let mut all = Vec::new();
    for _ in 0..10 {
        all.extend(a.tick(&two(0)));
    }
    assert_eq!(
        all,
        [Decision::Move {
            thread: 0,
            from: 0,
            to: 1,
            node: 0
        }]
    );
    // With CPUs 2-3 free on node 0, the unshared one wins over CPU 1.
    let mut b = Adapter::new(
        &[Bound { node: 0, cpu: 0 }, Bound { node: 0, cpu: 1 }],
        Tunables::default(),
    );
    let all: Vec<Decision> = (0..10).flat_map(|_| b.tick(&loads(&[0]))).collect();
    assert!(matches!(all[..], [Decision::Move { to: 2, .. }]), "{all:?}");
}

#[test]
fn threads_watched_later_are_known_by_their_key_and_unwatched_ones_never_move() {
    let mut a = Adapter::new(&[], Tunables::default());
    a.watch(4242, Bound { node: 1, cpu: 4 });
    a.watch(77, Bound { node: 1, cpu: 5 });
    a.watch(4242, Bound { node: 1, cpu: 6 }); // already watched: unchanged
    a.unwatch(77);
    assert_eq!(a.keys(), [4242]);
    let all: Vec<Decision> = (0..10).flat_map(|_| a.tick(&loads(&[4, 5]))).collect();
    assert_eq!(
        all,
        [Decision::Move {
            thread: 4242,
            from: 4,
            to: 6,
            node: 1
        }]
    );
}
