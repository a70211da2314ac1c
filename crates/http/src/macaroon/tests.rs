use super::*;

fn scope(path: &str, acts: &[&str], expires: u64) -> Scope {
    Scope {
        account: "alice".into(),
        path: path.into(),
        activities: acts.iter().map(|s| (*s).to_owned()).collect(),
        expires,
        nonce: "n".into(),
    }
}

fn target(p: &str) -> Target {
    crate::target::parse(p).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn issued_tokens_verify_and_forgeries_do_not() {
    let key = Key::random().unwrap_or_else(|e| panic!("{e}"));
    let now = UNIX_EPOCH + Duration::from_secs(1000);
    let s = scope("data/run1", &["DOWNLOAD"], 2000);
    let token = key.issue(&s);
    assert_eq!(key.verify(token.as_bytes(), now), Ok(Some(s.clone())));
    assert_eq!(key.verify(b"plain-account-token", now), Ok(None));
    let mut forged = token.clone().into_bytes();
    let i = PREFIX.len() + 3;
    forged[i] = if forged[i] == b'A' { b'B' } else { b'A' };
    assert_eq!(
        key.verify(&forged, now).err().map(|f| f.status),
        Some(StatusCode::UNAUTHORIZED)
    );
    let other = Key::random().unwrap_or_else(|e| panic!("{e}"));
    assert!(other.verify(token.as_bytes(), now).is_err());
    let late = UNIX_EPOCH + Duration::from_secs(2000);
    assert!(key.verify(token.as_bytes(), late).is_err());
}

#[test]
fn scope_limits_path_and_activity() {
    let s = scope("data/run1", &["DOWNLOAD", "LIST"], 10);
    assert!(s.allow(Activity::Download, &target("/data/run1/f")).is_ok());
    assert!(s.allow(Activity::Download, &target("/data/run1")).is_ok());
    assert!(s.allow(Activity::Download, &target("/data/run10")).is_err());
    assert!(s.allow(Activity::Upload, &target("/data/run1/f")).is_err());
    assert!(scope("", &["LIST"], 1)
        .allow(Activity::List, &target("/"))
        .is_ok());
}

#[test]
fn durations() {
    assert_eq!(iso_duration("PT60M"), Some(Duration::from_secs(3600)));
    assert_eq!(
        iso_duration("P1DT1H30M5S"),
        Some(Duration::from_secs(86_400 + 5405))
    );
    for bad in ["", "P", "PT", "60M", "PT5X", "PT5"] {
        assert_eq!(iso_duration(bad), None, "{bad}");
    }
}
