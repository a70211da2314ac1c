//! (being moved here from the engine; see lib.rs)
