use super::*;
use std::net::Ipv4Addr;

fn limits(per_address: usize, sessions: usize) -> Limits {
    Limits {
        max_sessions: sessions,
        max_per_address: per_address,
        ..Limits::default()
    }
}

#[test]
fn unauthenticated_connections_are_counted_per_address() {
    let g = Guard::new(limits(2, 1));
    let a = IpAddr::V4(Ipv4Addr::new(10, 42, 0, 1));
    let b = IpAddr::V4(Ipv4Addr::new(10, 42, 0, 2));
    let t1 = g.connection(a).unwrap();
    let mut t2 = g.connection(a).unwrap();
    let refused = g.connection(a).unwrap_err();
    assert!(
        refused.0.contains("10.42.0.1") && refused.0.contains("at most 2"),
        "{refused:?}"
    );
    let _other = g.connection(b).unwrap();
    // Authenticating frees the slot; dropping the ticket later does not free it twice.
    t2.authenticated();
    assert_eq!(g.unauthenticated(a), 1);
    let t3 = g.connection(a).unwrap();
    drop(t2);
    assert_eq!(g.unauthenticated(a), 2);
    drop((t1, t3));
    assert_eq!(g.unauthenticated(a), 0);
}

#[test]
fn sessions_are_bounded() {
    let g = Guard::new(limits(1, 2));
    let s1 = g.session().unwrap();
    let _s2 = g.session().unwrap();
    assert!(g.session().unwrap_err().0.contains("2 sessions"));
    drop(s1);
    assert_eq!(g.sessions(), 1);
    let _s3 = g.session().unwrap();
}

use crate::testing::tcp_pair as pair;

#[test]
fn an_armed_deadline_shuts_the_socket_down_and_a_disarmed_one_does_not() {
    use std::io::Read;
    let dog = Watchdog::start().unwrap();
    let (_c1, mut s1) = pair();
    let armed = dog.arm(&s1, Duration::from_millis(50));
    // The read blocks until the watchdog shuts the socket down (no read timeout set).
    let mut b = [0u8; 1];
    assert_eq!(s1.read(&mut b).unwrap(), 0);
    assert!(armed.fired());
    let (mut c2, mut s2) = pair();
    let mut armed = dog.arm(&s2, Duration::from_millis(50));
    armed.disarm();
    std::thread::sleep(Duration::from_millis(200));
    std::io::Write::write_all(&mut c2, b"x").unwrap();
    assert_eq!(s2.read(&mut b).unwrap(), 1);
    assert!(!armed.fired());
    dog.stop();
}

#[test]
fn a_silent_session_is_ended_and_aborting_names_each_session() {
    use std::io::Read;
    let dog = Watchdog::start().unwrap();
    let (_c, mut s) = pair();
    let w = dog.watch(
        "quiet".into(),
        vec![s.try_clone().unwrap()],
        Duration::from_millis(100),
    );
    let mut b = [0u8; 1];
    assert_eq!(s.read(&mut b).unwrap(), 0);
    assert!(w.idled() && !w.aborted());
    let (_c2, mut s2) = pair();
    let w2 = dog.watch("busy".into(), vec![s2.try_clone().unwrap()], Duration::ZERO);
    drop(w);
    assert_eq!(dog.abort_sessions(), ["busy"]);
    assert_eq!(s2.read(&mut b).unwrap(), 0);
    assert!(w2.aborted() && !w2.idled());
    dog.stop();
}

#[test]
fn the_fd_limit_is_at_least_what_it_was() {
    assert!(raise_fd_limit() >= 256);
}

#[test]
fn a_pull_by_a_client_that_does_not_acknowledge_has_no_idle_timeout() {
    let l = Limits::default();
    assert_eq!(idle_timeout(l, true, false), Duration::ZERO);
    assert_eq!(idle_timeout(l, true, true), l.idle_timeout);
    assert_eq!(idle_timeout(l, false, false), l.idle_timeout);
}
