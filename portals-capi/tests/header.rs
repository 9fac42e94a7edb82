//! `include/portals.h` is what cbindgen generates from the crate today:
//! a change to the C API that forgets the header fails here. Set
//! `PORTALS_CAPI_BLESS=1` to rewrite the header instead.

use std::path::Path;

#[test]
fn header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let path = dir.join("include/portals.h");
    if std::env::var_os("PORTALS_CAPI_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/portals.h");
        return;
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/portals.h is stale: regenerate it with \
         PORTALS_CAPI_BLESS=1 cargo test -p portals-capi --test header"
    );
}
