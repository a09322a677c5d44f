//! Empty library: this crate exists for its `[[bench]]` targets (see Cargo.toml).
