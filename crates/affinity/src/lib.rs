//! Applies a plan to the running process: pins threads, binds memory, verifies both.
