use super::*;
use sluice_wire::OpenOptions;

fn open(direction: Direction, path: &str) -> Open {
    Open {
        direction,
        path: path.to_string(),
        options: OpenOptions::default(),
    }
}

#[test]
fn the_open_must_name_the_path_and_direction_it_was_started_for() {
    let push = Direction::Push;
    assert!(check_open(&open(push, "dst"), push, "dst").is_ok());
    // The client adds a '/' when several sources go into a directory.
    assert!(check_open(&open(push, "dst/"), push, "dst").is_ok());
    assert!(check_open(&open(push, "/"), push, "/").is_ok());
    let e = check_open(&open(push, "other"), push, "dst").unwrap_err();
    assert!(e.to_string().contains("\"other\""), "{e}");
    assert!(e.to_string().contains("\"dst\""), "{e}");
    assert!(check_open(&open(push, "dst/../x"), push, "dst").is_err());
    let e = check_open(&open(Direction::Pull, "dst"), push, "dst").unwrap_err();
    assert!(e.to_string().contains("Pull"), "{e}");
}
