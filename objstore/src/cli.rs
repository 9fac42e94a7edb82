//! What the two command-line clients (`objstore` over portals-rpc,
//! `objstore-grpc` over gRPC) share: their commands and progress bar, so
//! that both services are driven the same way; and the line every server
//! prints once it listens ([`announce_listening`]).

use std::path::PathBuf;

use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};

/// A client command.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Store FILE as object NAME (replacing any object of that name, atomically).
    Put {
        /// Object name.
        name: String,
        /// File to read.
        file: PathBuf,
    },
    /// Write object NAME to FILE (removed again if the transfer fails).
    Get {
        /// Object name.
        name: String,
        /// File to write.
        file: PathBuf,
    },
    /// List the objects: size and name, one per line.
    List,
    /// Remove object NAME.
    Delete {
        /// Object name.
        name: String,
    },
    /// Print the size of object NAME.
    Stat {
        /// Object name.
        name: String,
    },
}

/// Transfers at least this large get a progress bar.
pub const BAR_FROM: u64 = 16 << 20;

/// A progress bar for a transfer of `len` bytes: hidden below
/// [`BAR_FROM`], and drawn on stderr only when that is a terminal.
pub fn bar(len: u64) -> ProgressBar {
    if len < BAR_FROM {
        return ProgressBar::hidden();
    }
    // Drawn on stderr, and hidden by indicatif when that is no terminal.
    let b = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
    {
        b.set_style(style);
    }
    b
}

/// Print `listening on ADDR` on stdout and flush it: the line scripts,
/// tests and `ptl-bench` wait for before they connect (with port 0, the
/// only place the port is told).
pub fn announce_listening(addr: &dyn std::fmt::Display) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {addr}")?;
    out.flush()
}
