use super::*;
use std::net::IpAddr;

#[test]
fn each_stream_gets_a_nic_of_the_channel_that_serves_it_in_turn() {
    // Streams alternate over two channels; channel 0 drives eth1, channel 1 drives
    // eth2 and eth3 (eth3 without an address); channel 2 drives nothing.
    let nics: [Vec<String>; 3] = [
        vec!["eth1".into()],
        vec!["eth2".into(), "eth3".into(), "eth4".into()],
        vec![],
    ];
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let addrs = vec![
        ("eth1".to_string(), ip("10.0.1.2")),
        ("eth2".to_string(), ip("10.0.2.2")),
        ("eth4".to_string(), ip("fd00::4")),
    ];
    let a = stream_addresses(
        6,
        |i| u32::from(i % 2),
        |c| &nics[c as usize][..],
        &addrs,
        7878,
    );
    let got: Vec<String> = (0..6).map(|i| a.of(i).unwrap().to_string()).collect();
    assert_eq!(
        got,
        [
            "10.0.1.2:7878",
            "10.0.2.2:7878",
            "10.0.1.2:7878",
            "[fd00::4]:7878",
            "10.0.1.2:7878",
            "10.0.2.2:7878",
        ]
    );
    // A channel without a NIC that has an address: its streams get no entry.
    let a = stream_addresses(
        3,
        |i| if i == 1 { 2 } else { 0 },
        |c| &nics[c as usize][..],
        &addrs,
        1,
    );
    assert_eq!(
        a.entries.iter().map(|e| e.stream_index).collect::<Vec<_>>(),
        [0, 2]
    );
    assert!(
        stream_addresses(4, |_| 0, |c| &nics[c as usize][..], &[], 1)
            .entries
            .is_empty()
    );
}
