//! Generates the gRPC service from `proto/objstore.proto` with the vendored
//! `protoc` (nothing to install), only when the `grpc` feature is on.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    #[cfg(feature = "grpc")]
    {
        println!("cargo:rerun-if-changed=proto/objstore.proto");
        std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
        tonic_build::configure()
            .bytes(["."])
            .compile_protos(&["proto/objstore.proto"], &["proto"])?;
    }
    Ok(())
}
