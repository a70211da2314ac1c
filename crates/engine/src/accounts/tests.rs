use super::file::{self, parse, Secret};
use super::*;
use sluice_wire::{ClientConfig, ClientHandshake, Codec, ErrorCode, Frame, HandshakeStatus};
use std::os::unix::fs::PermissionsExt;

const TWO: &str = r#"
[[account]]
name = "alice"
token_file = "alice.token"
root = "a"
rights = ["read", "write"]
expires = "2027-01-31T00:00:00Z"

[[account]]
name = "bob"
token = "bob-secret"
root = "b"
rights = ["read"]
"#;

#[test]
fn two_accounts_parse_with_their_rights_and_expiry() {
    let e = parse(TWO).unwrap();
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].name, "alice");
    assert_eq!(e[0].secret, Secret::File("alice.token".into()));
    assert_eq!(e[0].rights, Rights::ALL);
    let t = e[0].expires.unwrap();
    assert_eq!(
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs(),
        1_801_353_600
    );
    assert_eq!(e[1].secret, Secret::Inline(b"bob-secret".to_vec()));
    assert_eq!(
        e[1].rights,
        Rights {
            read: true,
            write: false
        }
    );
    assert!(e[1].expires.is_none());
    // The inline token never shows in Debug.
    assert!(!format!("{e:?}").contains("bob-secret"));
}

#[test]
fn an_unquoted_toml_datetime_is_accepted() {
    let text = TWO.replace("\"2027-01-31T00:00:00Z\"", "2027-01-31T00:00:00Z");
    assert_eq!(
        parse(&text).unwrap()[0].expires,
        parse(TWO).unwrap()[0].expires
    );
}

#[test]
fn bad_entries_name_the_account_and_the_field() {
    let one = |body: &str| format!("[[account]]\nname = \"x\"\nroot = \"r\"\n{body}\n");
    let cases = [
        (
            one("token = \"t\"\nrights = []"),
            "account 1 (\"x\"): rights: empty",
        ),
        (
            one("token = \"t\"\nrights = [\"admin\"]"),
            "unknown right \"admin\"",
        ),
        (
            one("token = \"t\"\nrights = [\"read\", \"read\"]"),
            "given twice",
        ),
        (one("rights = [\"read\"]"), "no token or token_file"),
        (
            one("token = \"t\"\ntoken_file = \"f\"\nrights = [\"read\"]"),
            "not both",
        ),
        (
            one("token = \"t\"\nrights = [\"read\"]\nexpires = \"soon\""),
            "expires: \"soon\"",
        ),
        (
            one("token = \"t\"\nrights = [\"read\"]\nexpires = 5"),
            "expected a date",
        ),
        (
            one("token = \"t\"\nrights = [\"read\"]\nextra = 1"),
            "unknown field",
        ),
        (String::new(), "no [[account]] entries"),
        (
            one("token = \"t\"\nrights = [\"read\"]").repeat(2),
            "account 2 (\"x\"): the name is used twice",
        ),
        (
            one("token = \"t\"\nrights = [\"read\"]").replace("\"x\"", "\"a b\""),
            "name must be",
        ),
    ];
    for (text, want) in cases {
        let e = parse(&text).unwrap_err();
        assert!(e.contains(want), "{text:?}: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}

#[test]
fn too_many_accounts_are_refused() {
    let one = "[[account]]\nname = \"n\"\ntoken = \"t\"\nroot = \"r\"\nrights = [\"read\"]\n";
    let e = parse(&one.repeat(MAX_ACCOUNTS + 1)).unwrap_err();
    assert!(e.contains("at most 4096"), "{e}");
}

fn setup(text: &str, mode: u32) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["a", "b"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    std::fs::write(dir.path().join("alice.token"), "alice-secret\n").unwrap();
    let path = dir.path().join("accounts.toml");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    (dir, path)
}

#[test]
fn load_opens_roots_reads_token_files_and_finds_each_account_by_its_proof() {
    let (dir, path) = setup(TWO, 0o600);
    let accounts = file::load(&path).unwrap();
    assert_eq!(accounts.len(), 2);
    assert!(accounts.auth_required() && accounts.open_account().is_none());
    let (cn, sn) = ([1u8; 32], [2u8; 32]);
    for (token, name, root) in [("alice-secret", "alice", "a"), ("bob-secret", "bob", "b")] {
        let t = Token::new(token).unwrap();
        let mac = auth::client_proof(&t, &cn, &sn);
        let found = accounts.find(&cn, &sn, &mac).unwrap();
        assert_eq!(found.name, name);
        assert_eq!(found.root.path(), dir.path().join(root));
        // Another pair of nonces: the same proof no longer matches.
        assert!(accounts.find(&sn, &cn, &mac).is_none());
    }
    let wrong = auth::client_proof(&Token::new("nobody").unwrap(), &cn, &sn);
    assert!(accounts.find(&cn, &sn, &wrong).is_none());
    assert!(!format!("{accounts:?}").contains("secret"));
}

#[test]
fn inline_tokens_need_a_private_file() {
    let (_dir, path) = setup(TWO, 0o640);
    let e = file::load(&path).unwrap_err().to_string();
    assert!(e.contains("mode is 640") && e.contains("chmod 600"), "{e}");
    // Token files only: the accounts file may be readable.
    let text = TWO.replace("token = \"bob-secret\"", "token_file = \"alice.token\"");
    let (_dir, path) = setup(&text, 0o644);
    let e = file::load(&path).unwrap_err().to_string();
    assert!(
        e.contains("account 2 (\"bob\"): the same token as another account"),
        "{e}"
    );
}

#[test]
fn a_missing_root_or_token_file_is_named() {
    let (dir, path) = setup(TWO, 0o600);
    std::fs::remove_dir(dir.path().join("b")).unwrap();
    let e = file::load(&path).unwrap_err().to_string();
    assert!(
        e.contains("account 2 (\"bob\")") && e.contains("root"),
        "{e}"
    );
    std::fs::create_dir(dir.path().join("b")).unwrap();
    std::fs::remove_file(dir.path().join("alice.token")).unwrap();
    let e = file::load(&path).unwrap_err().to_string();
    assert!(e.contains("account 1 (\"alice\"): token_file"), "{e}");
}

#[test]
fn a_reload_that_fails_keeps_the_accounts_in_force() {
    let (_dir, path) = setup(TWO, 0o600);
    let live = Live::new(file::load(&path).unwrap());
    let before = live.current();
    std::fs::write(&path, "[[account]]\nname = ").unwrap();
    let e = live.reload().unwrap_err();
    assert!(e.contains("accounts.toml"), "{e}");
    assert!(Arc::ptr_eq(&before, &live.current()));
    std::fs::write(&path, TWO.replace("bob-secret", "bob-new")).unwrap();
    assert_eq!(live.reload().unwrap(), 2);
    assert!(!Arc::ptr_eq(&before, &live.current()));
    // The old Arc (a running session's) is untouched.
    assert_eq!(before.len(), 2);
}

#[test]
fn rights_allow_by_direction() {
    let read = Rights {
        read: true,
        write: false,
    };
    assert!(read.allow(Direction::Pull) && !read.allow(Direction::Push));
    let write = Rights {
        read: false,
        write: true,
    };
    assert!(!write.allow(Direction::Pull) && write.allow(Direction::Push));
    assert_eq!(write.describe(), "write");
    assert!(Rights::ALL.allow(Direction::Push) && Rights::ALL.allow(Direction::Pull));
}

#[test]
fn expiry_is_checked_against_now() {
    let root = Arc::new(crate::fs::Root::open(std::env::temp_dir()).unwrap());
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(100);
    let a = Account::new("a", Token::new("x").ok(), root, Rights::ALL, Some(t));
    assert!(!a.expired(t - std::time::Duration::from_secs(1)));
    assert!(a.expired(t));
}

/// Drives a client handshake with `token` against [`handshake::server_handshake`] over
/// a socket pair; the client's outcome and the server's.
fn handshake_with(
    accounts: Accounts,
    token: &str,
    now: SystemTime,
) -> (Result<(), String>, Result<String, String>) {
    use crate::transport::control_halves;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let (mut r, mut w) = control_halves(crate::net::tls::Link::plain(s)).unwrap();
        let hello = r.next("hello").unwrap().unwrap();
        let mut proved = None;
        let result =
            handshake::server_handshake(hello, &mut r, &mut w, &accounts, now, &mut proved)
                .map(|a| a.account.name.clone())
                .map_err(|e| e.to_string());
        match (&result, proved) {
            (Ok(name), proved) => assert_eq!(proved.unwrap_or_default(), *name),
            (Err(e), Some(name)) => return Err(format!("{e} [proved {name}]")),
            (Err(_), None) => {}
        }
        result
    });
    let s = std::net::TcpStream::connect(addr).unwrap();
    let (mut r, mut w) = control_halves(crate::net::tls::Link::plain(s)).unwrap();
    let client = crate::session::client_handshake(&mut r, &mut w, Token::new(token).ok())
        .map(|_| ())
        .map_err(|e| e.to_string());
    (client, server.join().unwrap())
}

#[test]
fn the_handshake_finds_the_account_refuses_wrong_and_expired_tokens() {
    let (_dir, path) = setup(TWO, 0o600);
    let before = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
    let (c, s) = handshake_with(file::load(&path).unwrap(), "bob-secret", before);
    assert_eq!((c, s), (Ok(()), Ok("bob".to_string())));
    let (c, s) = handshake_with(file::load(&path).unwrap(), "alice-secret", before);
    assert_eq!((c, s), (Ok(()), Ok("alice".to_string())));
    // A wrong token: AuthFailed as with one token, naming no account.
    let (c, s) = handshake_with(file::load(&path).unwrap(), "guess", before);
    let c = c.unwrap_err();
    assert!(
        c.contains(&ErrorCode::AuthFailed.to_string()) && c.contains("wrong token"),
        "{c}"
    );
    assert!(
        !c.contains("alice") && !c.contains("bob") && !c.contains("expired"),
        "{c}"
    );
    assert!(!s.unwrap_err().contains("proved"));
    // Alice's token after its expiry: refused, and told so (the proof verified).
    let after = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_900_000_000);
    let (c, s) = handshake_with(file::load(&path).unwrap(), "alice-secret", after);
    let c = c.unwrap_err();
    assert!(c.contains("AuthFailed") && c.contains("expired"), "{c}");
    let s = s.unwrap_err();
    assert!(s.contains("expired") && s.contains("[proved alice]"), "{s}");
    // Bob's token never expires.
    let (c, _) = handshake_with(file::load(&path).unwrap(), "bob-secret", after);
    assert!(c.is_ok());
}

#[test]
fn the_implicit_account_keeps_the_one_token_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let open = Accounts::single(dir.path(), None).unwrap();
    assert!(!open.auth_required() && open.open_account().is_some());
    let (c, s) = handshake_with(open, "", SystemTime::now());
    assert_eq!((c, s), (Ok(()), Ok(String::new())));
    let one = Accounts::single(dir.path(), Token::new("t").ok()).unwrap();
    assert!(one.auth_required());
    let (c, s) = handshake_with(one, "t", SystemTime::now());
    assert_eq!((c, s), (Ok(()), Ok("token".to_string())));
}

#[test]
fn the_decoy_welcome_is_what_the_account_would_send() {
    // The Welcome depends on the Hello and the nonce, not on which token: so the
    // client cannot tell a daemon with accounts from one with a single token.
    let hello_bytes = {
        let mut c = ClientHandshake::new(ClientConfig::new(Token::new("x").ok()), [9; 32]);
        let mut out = Vec::new();
        c.start(&mut out);
        out
    };
    let (hello, _) = Frame::decode(&hello_bytes).unwrap();
    let welcome = |t: &str| {
        let mut s = sluice_wire::ServerHandshake::new(
            sluice_wire::ServerConfig::new(Token::new(t).ok()),
            [4; 32],
        );
        let mut out = Vec::new();
        assert_eq!(
            s.handle(&hello, &mut out).unwrap(),
            HandshakeStatus::InProgress
        );
        out
    };
    assert_eq!(welcome("one"), welcome("another token"));
}

proptest::proptest! {
    #[test]
    fn parse_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        if let Err(e) = parse(&text) {
            proptest::prop_assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn parse_never_panics_on_mutated_files(cut in 0usize..300, byte in proptest::num::u8::ANY) {
        let mut b = TWO.as_bytes().to_vec();
        let at = cut % b.len();
        b[at] = byte;
        let _ = parse(&String::from_utf8_lossy(&b));
        let _ = parse(&TWO[..cut.min(TWO.len())]);
    }
}
