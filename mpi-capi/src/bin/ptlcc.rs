//! `ptlcc`: an `mpicc`-style compiler wrapper for C MPI programs that run
//! on portals-rs.
//!
//! It compiles against MPICH's `mpi.h` (this library has MPICH's ABI) and
//! links portals-rs's `libmpich.so.12` with an rpath to the directory that
//! holds it, so the program runs under `ptlrun` with no
//! `LD_LIBRARY_PATH`. Every argument but its own goes to the C compiler.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Parser;

const ABOUT: &str = "Compile and link C MPI programs against portals-rs's libmpich.so.12";

const LONG_ABOUT: &str = "\
Compile and link C MPI programs against portals-rs's libmpich.so.12 (mpi-capi),
as mpicc does for MPICH: the result runs under ptlrun with no LD_LIBRARY_PATH.

  ptlcc -O2 -o prog prog.c && ptlrun -n 4 ./prog

Every argument other than ptlcc's own is passed to the C compiler unchanged.
ptlcc adds -I<MPICH's include directory> (mpi-capi has MPICH's ABI, so it
compiles against MPICH's mpi.h) and, unless the compiler only compiles
(-c, -S, -E, -M, -MM), -L<libdir> -lmpich -Wl,-rpath,<libdir>.

Environment:
  PTLCC_CC           the C compiler (default: cc)
  PTLCC_LIBDIR       a directory holding libmpich.so.12 and libmpich.so
                     (default: <ptlcc's directory>/mpich-abi, linking to
                     the libmpich.so cargo builds with ptlcc; else
                     <ptlcc's directory>/../lib, the layout of
                     mpi-capi/install.sh)
  PTLCC_MPI_INCLUDE  the directory holding MPICH's mpi.h (default: the -I
                     of `mpicc.mpich -show`, else /usr/include/<arch>/mpich
                     or /usr/include/mpich)";

/// The wrapper's own options; everything else is the C compiler's.
#[derive(Parser, Debug)]
#[command(
    name = "ptlcc",
    about = ABOUT,
    long_about = LONG_ABOUT,
    disable_help_flag = true,
    disable_version_flag = true
)]
struct Cli {
    /// Print the compiler command instead of running it (also `-show`,
    /// as mpicc spells it).
    #[arg(long)]
    show: bool,
    /// Print this help (also `-help`).
    #[arg(long, action = clap::ArgAction::Help)]
    help: Option<bool>,
    /// Arguments for the C compiler: sources, objects, -o, -O2, -l...
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    cc_args: Vec<OsString>,
}

/// Why the command could not be put together.
#[derive(Debug)]
enum Error {
    NoLibrary(PathBuf),
    NoHeader,
    Io(&'static str, PathBuf, std::io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoLibrary(dir) => write!(
                f,
                "no libmpich.so beside {} nor in its ../lib: run `cargo build -p mpi-capi` \
                 (or mpi-capi/install.sh), or set PTLCC_LIBDIR",
                dir.display()
            ),
            Error::NoHeader => write!(
                f,
                "MPICH's mpi.h not found (install libmpich-dev, or set PTLCC_MPI_INCLUDE)"
            ),
            Error::Io(what, p, e) => write!(f, "{what} {}: {e}", p.display()),
        }
    }
}

/// Take the mpicc-style single-dash spellings and the wrapper's flags out
/// of the argument list wherever they stand (mpicc accepts `-show` after
/// the sources), and hand clap the rest after `--` so no compiler flag is
/// mistaken for one of ours.
fn parse() -> Cli {
    let mut raw = std::env::args_os();
    let argv0 = raw.next().unwrap_or_else(|| "ptlcc".into());
    let mut own = vec![argv0];
    let mut rest = Vec::new();
    for a in raw {
        match a.to_str() {
            Some("-show" | "--show") => own.push("--show".into()),
            Some("-help" | "--help") => own.push("--help".into()),
            _ => rest.push(a),
        }
    }
    own.push("--".into());
    own.extend(rest);
    Cli::parse_from(own)
}

/// Whether the compiler stops before linking.
fn compile_only(args: &[OsString]) -> bool {
    args.iter()
        .any(|a| matches!(a.to_str(), Some("-c" | "-S" | "-E" | "-M" | "-MM")))
}

/// The directory with `libmpich.so.12` (the rpath) and `libmpich.so` (for
/// `-lmpich`).
fn lib_dir() -> Result<PathBuf, Error> {
    if let Some(d) = std::env::var_os("PTLCC_LIBDIR") {
        return Ok(PathBuf::from(d));
    }
    let exe = std::env::current_exe()
        .and_then(|e| e.canonicalize())
        .map_err(|e| Error::Io("locating", "ptlcc".into(), e))?;
    let here = exe.parent().unwrap_or(Path::new("/")).to_path_buf();
    // Cargo's layout: target/<profile>/{ptlcc,deps/libmpich.so} (the copy
    // cargo rebuilds for tests too; `cargo build` also copies it beside
    // ptlcc, where it can be older). The loader
    // asks for the soname, so a directory of its own links that name to
    // the library (as bench/c/run_peer.sh does).
    if let Some(built) = ["deps/libmpich.so", "libmpich.so"]
        .into_iter()
        .find(|f| here.join(f).is_file())
    {
        let dir = here.join("mpich-abi");
        std::fs::create_dir_all(&dir).map_err(|e| Error::Io("creating", dir.clone(), e))?;
        let target = Path::new("..").join(built);
        for name in ["libmpich.so.12", "libmpich.so"] {
            let link = dir.join(name);
            if std::fs::read_link(&link).ok().as_deref() != Some(target.as_path()) {
                // Made aside and renamed over the old link, so that a
                // program starting meanwhile never finds the name missing.
                let tmp = dir.join(format!(".{name}.{}", std::process::id()));
                let _ = std::fs::remove_file(&tmp);
                std::os::unix::fs::symlink(&target, &tmp)
                    .and_then(|()| std::fs::rename(&tmp, &link))
                    .map_err(|e| Error::Io("linking", link.clone(), e))?;
            }
        }
        return Ok(dir);
    }
    let installed = here.join("../lib");
    if installed.join("libmpich.so.12").is_file() {
        return installed
            .canonicalize()
            .map_err(|e| Error::Io("resolving", installed, e));
    }
    Err(Error::NoLibrary(here))
}

/// MPICH's include directory: the one holding its `mpi.h`.
fn include_dir() -> Result<PathBuf, Error> {
    if let Some(d) = std::env::var_os("PTLCC_MPI_INCLUDE") {
        return Ok(PathBuf::from(d));
    }
    let has_header = |d: &Path| d.join("mpi.h").is_file();
    if let Ok(out) = Command::new("mpicc.mpich").arg("-show").output() {
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(d) = text
            .split_whitespace()
            .filter_map(|t| t.strip_prefix("-I"))
            .map(PathBuf::from)
            .find(|d| has_header(d))
        {
            return Ok(d);
        }
    }
    let mut candidates = vec![PathBuf::from("/usr/include/mpich")];
    if let Ok(entries) = std::fs::read_dir("/usr/include") {
        candidates.extend(entries.flatten().map(|e| e.path().join("mpich")));
    }
    candidates.sort();
    candidates
        .into_iter()
        .find(|d| has_header(d))
        .ok_or(Error::NoHeader)
}

/// The compiler command: `$PTLCC_CC` (words) or `cc`, the include
/// directory, the caller's arguments, then the link flags.
fn command(cc_args: &[OsString]) -> Result<Vec<OsString>, Error> {
    let cc = std::env::var("PTLCC_CC").unwrap_or_else(|_| "cc".into());
    let mut cmd: Vec<OsString> = cc.split_whitespace().map(Into::into).collect();
    if cmd.is_empty() {
        cmd.push("cc".into());
    }
    let mut inc = OsString::from("-I");
    inc.push(include_dir()?);
    cmd.push(inc);
    cmd.extend(cc_args.iter().cloned());
    if !compile_only(cc_args) {
        let lib = lib_dir()?;
        let mut l = OsString::from("-L");
        l.push(&lib);
        let mut rpath = OsString::from("-Wl,-rpath,");
        rpath.push(&lib);
        cmd.extend([l, "-lmpich".into(), rpath]);
    }
    Ok(cmd)
}

/// One word as a shell reads it back (for `-show`).
fn quoted(w: &OsString) -> String {
    let s = w.to_string_lossy();
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./,=+:@%".contains(c));
    if plain {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn main() -> ExitCode {
    let cli = parse();
    let cmd = match command(&cli.cc_args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ptlcc: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.show {
        let words: Vec<String> = cmd.iter().map(quoted).collect();
        println!("{}", words.join(" "));
        return ExitCode::SUCCESS;
    }
    let (prog, args) = cmd.split_at(1);
    match Command::new(&prog[0]).args(args).status() {
        Ok(st) => match st.code() {
            Some(0) => ExitCode::SUCCESS,
            Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
            None => ExitCode::from(1),
        },
        Err(e) => {
            eprintln!("ptlcc: running {}: {e}", prog[0].to_string_lossy());
            ExitCode::from(127)
        }
    }
}
