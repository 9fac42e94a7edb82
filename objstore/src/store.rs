//! The object store on the server's disk, shared by the portals-rpc and the
//! gRPC service: one file per object in one directory.
//!
//! A put streams into a temporary file (`.tmp-…`, a name no object can
//! have), fsyncs it, renames it over the object and fsyncs the directory:
//! a crash leaves either the old object or the new one, never a torn one,
//! and at worst a temporary file that [`Store::open`] removes. Concurrent
//! puts to one name each write their own temporary file; the last rename
//! wins, whole. A reader that opened an object keeps reading the version it
//! opened. Data moves in caller-sized chunks: nothing loads an object whole.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Longest object name, in bytes (a common file-name limit).
pub const MAX_NAME_LEN: usize = 255;

/// Prefix of temporary files; object names cannot start with `.`.
const TMP_PREFIX: &str = ".tmp-";

/// What can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The name is not a valid object name.
    #[error("invalid object name {name:?}: {why}")]
    InvalidName {
        /// The name as given (lossy for display).
        name: String,
        /// Which rule it breaks.
        why: &'static str,
    },
    /// No object of that name.
    #[error("no object named {0:?}")]
    NotFound(String),
    /// A file-system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What the store was doing.
        what: String,
        /// The error.
        source: io::Error,
    },
}

impl StoreError {
    fn io(what: impl Into<String>, source: io::Error) -> StoreError {
        StoreError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result of store operations.
pub type Result<T> = std::result::Result<T, StoreError>;

/// A validated object name: 1 to [`MAX_NAME_LEN`] bytes of ASCII letters,
/// digits, `.`, `_` and `-`, not starting with `.` (so no `..`, no `/`, no
/// hidden or temporary file can be named).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectName(String);

impl ObjectName {
    /// Check `name` against the rules.
    pub fn new(name: &str) -> Result<ObjectName> {
        let bad = |why| {
            Err(StoreError::InvalidName {
                name: name.chars().take(80).collect(),
                why,
            })
        };
        if name.is_empty() {
            return bad("empty");
        }
        if name.len() > MAX_NAME_LEN {
            return bad("longer than 255 bytes");
        }
        if name.starts_with('.') {
            return bad("starts with '.'");
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return bad("only ASCII letters, digits, '.', '_' and '-' are allowed");
        }
        Ok(ObjectName(name.to_string()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ObjectName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An object's name and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// The name.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
}

/// The store: a directory of objects.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    /// The directory, open for its fsyncs (opening it for each put cost
    /// two system calls and a path walk of every put).
    dir: Arc<File>,
    /// This process's id, for temporary names (`getpid` is a system call).
    pid: u32,
    /// Makes temporary names unique among this process's concurrent puts.
    seq: AtomicU64,
}

impl Store {
    /// Open (creating it if needed) the store in `root`, removing temporary
    /// files a crashed put left behind.
    pub fn open(root: impl Into<PathBuf>) -> Result<Store> {
        let root = root.into();
        fs::create_dir_all(&root)
            .map_err(|e| StoreError::io(format!("creating {}", root.display()), e))?;
        let entries = fs::read_dir(&root)
            .map_err(|e| StoreError::io(format!("reading {}", root.display()), e))?;
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
                let _ = fs::remove_file(entry.path());
            }
        }
        let dir = File::open(&root)
            .map_err(|e| StoreError::io(format!("opening {}", root.display()), e))?;
        Ok(Store {
            root,
            dir: Arc::new(dir),
            pid: std::process::id(),
            seq: AtomicU64::new(0),
        })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path_of(&self, name: &ObjectName) -> PathBuf {
        self.root.join(name.as_str())
    }

    /// Start a put of `name`: write the data with [`PutWriter::write_chunk`]
    /// (or [`Write`]), then [`PutWriter::commit`]. Dropped uncommitted, the
    /// put leaves nothing behind.
    pub fn put(&self, name: &ObjectName) -> Result<PutWriter> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        // Pid and sequence make it unique; the name's start is for people
        // looking at the directory (the whole of a 255-byte name would make
        // the temporary name too long for the file system).
        let tmp = self.root.join(format!(
            "{TMP_PREFIX}{}-{seq}-{}",
            self.pid,
            name.as_str().get(..64).unwrap_or(name.as_str())
        ));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| StoreError::io(format!("creating {}", tmp.display()), e))?;
        Ok(PutWriter {
            file: Some(file),
            tmp,
            dest: self.path_of(name),
            dir: Arc::clone(&self.dir),
            written: 0,
        })
    }

    /// Put the whole of `src`, read in chunks of `chunk` bytes; the size
    /// stored.
    pub fn put_from(&self, name: &ObjectName, src: &mut dyn Read, chunk: usize) -> Result<u64> {
        let mut w = self.put(name)?;
        let mut buf = vec![0u8; chunk.max(1)];
        loop {
            let n = match src.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(StoreError::io("reading the data to put", e)),
            };
            w.write_chunk(&buf[..n])?;
        }
        w.commit()
    }

    /// Open `name` for reading.
    pub fn get(&self, name: &ObjectName) -> Result<ObjectReader> {
        let path = self.path_of(name);
        let file = File::open(&path).map_err(|e| self.not_found_or(name, "opening", e))?;
        let size = file
            .metadata()
            .map_err(|e| StoreError::io(format!("stat of {}", path.display()), e))?
            .len();
        Ok(ObjectReader { file, size, pos: 0 })
    }

    /// Name and size of `name`.
    pub fn stat(&self, name: &ObjectName) -> Result<ObjectInfo> {
        let meta =
            fs::metadata(self.path_of(name)).map_err(|e| self.not_found_or(name, "stat of", e))?;
        Ok(ObjectInfo {
            name: name.to_string(),
            size: meta.len(),
        })
    }

    /// Every object, sorted by name (temporary files are not objects).
    pub fn list(&self) -> Result<Vec<ObjectInfo>> {
        let what = || format!("listing {}", self.root.display());
        let mut v = Vec::new();
        for entry in fs::read_dir(&self.root).map_err(|e| StoreError::io(what(), e))? {
            let entry = entry.map_err(|e| StoreError::io(what(), e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if ObjectName::new(&name).is_err() {
                continue;
            }
            // An object deleted between readdir and stat is simply gone.
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_file() {
                v.push(ObjectInfo {
                    name,
                    size: meta.len(),
                });
            }
        }
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    /// Remove `name` (durably: the directory is fsynced).
    pub fn delete(&self, name: &ObjectName) -> Result<()> {
        fs::remove_file(self.path_of(name)).map_err(|e| self.not_found_or(name, "removing", e))?;
        sync_dir(&self.dir, &self.root)
    }

    fn not_found_or(&self, name: &ObjectName, what: &str, e: io::Error) -> StoreError {
        if e.kind() == io::ErrorKind::NotFound {
            StoreError::NotFound(name.to_string())
        } else {
            StoreError::io(format!("{what} {}", self.path_of(name).display()), e)
        }
    }
}

fn sync_dir(dir: &File, path: &Path) -> Result<()> {
    dir.sync_all()
        .map_err(|e| StoreError::io(format!("fsync of {}", path.display()), e))
}

/// A put in progress: data goes to a temporary file until [`commit`](Self::commit).
#[derive(Debug)]
pub struct PutWriter {
    /// `None` once committed (nothing left to clean up).
    file: Option<File>,
    tmp: PathBuf,
    dest: PathBuf,
    /// The store's directory, fsynced after the rename.
    dir: Arc<File>,
    written: u64,
}

impl PutWriter {
    /// Append a chunk.
    pub fn write_chunk(&mut self, data: &[u8]) -> Result<()> {
        let Some(f) = self.file.as_mut() else {
            return Err(StoreError::io(
                "writing a committed put",
                io::Error::other("already committed"),
            ));
        };
        f.write_all(data)
            .map_err(|e| StoreError::io(format!("writing {}", self.tmp.display()), e))?;
        self.written += data.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Make the object durable and visible under its name: fsync, rename,
    /// fsync the directory. Returns its size.
    pub fn commit(mut self) -> Result<u64> {
        let Some(f) = self.file.take() else {
            return Ok(self.written);
        };
        let done = f
            .sync_all()
            .map_err(|e| StoreError::io(format!("fsync of {}", self.tmp.display()), e))
            .and_then(|()| {
                drop(f);
                fs::rename(&self.tmp, &self.dest)
                    .map_err(|e| StoreError::io(format!("renaming to {}", self.dest.display()), e))
            });
        if let Err(e) = done {
            let _ = fs::remove_file(&self.tmp);
            return Err(e);
        }
        let root = self.dest.parent().unwrap_or(Path::new("."));
        sync_dir(&self.dir, root)?;
        Ok(self.written)
    }
}

impl Write for PutWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_chunk(buf).map_err(io::Error::other)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for PutWriter {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// An object open for reading: sequential chunks ([`Read`]) or positioned
/// reads ([`read_at`](Self::read_at)) for a bulk path that fetches by offset.
#[derive(Debug)]
pub struct ObjectReader {
    file: File,
    size: u64,
    pos: u64,
}

impl ObjectReader {
    /// The open file (its metadata names the version: a put renames a new
    /// file in).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The object's size when it was opened.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Fill as much of `buf` as the object has from `offset`; the bytes read
    /// (short only at the end).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(StoreError::io("reading an object", e)),
            }
        }
        Ok(done)
    }
}

impl Read for ObjectReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.read_at(self.pos, buf).map_err(io::Error::other)?;
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> ObjectName {
        ObjectName::new(s).expect("valid name")
    }

    fn files_in(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn name_validation_refuses_traversal_and_odd_names() {
        for bad in [
            "",
            ".",
            "..",
            "../etc/passwd",
            "a/b",
            "/abs",
            ".hidden",
            ".tmp-x",
            "a b",
            "é",
            "a\0b",
        ] {
            assert!(
                matches!(ObjectName::new(bad), Err(StoreError::InvalidName { .. })),
                "{bad:?} accepted"
            );
        }
        assert!(ObjectName::new(&"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(ObjectName::new(&"x".repeat(MAX_NAME_LEN + 1)).is_err());
        for good in ["a", "A-b_c.d", "data.tar.gz", "x..y", "0"] {
            assert_eq!(ObjectName::new(good).expect("valid").as_str(), good);
        }
    }

    #[test]
    fn put_get_stat_list_delete() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let n = store
            .put_from(&name("b"), &mut &data[..], 333)
            .expect("put");
        assert_eq!(n, data.len() as u64);
        store
            .put_from(&name("a"), &mut &[][..], 16)
            .expect("empty put");
        let mut back = Vec::new();
        store
            .get(&name("b"))
            .expect("get")
            .read_to_end(&mut back)
            .expect("read");
        assert_eq!(back, data);
        let r = store.get(&name("b")).expect("get");
        let mut mid = [0u8; 10];
        assert_eq!(r.read_at(9_995, &mut mid).expect("read_at"), 5);
        assert_eq!(&mid[..5], &data[9_995..]);
        assert_eq!(store.stat(&name("a")).expect("stat").size, 0);
        assert_eq!(
            store.list().expect("list"),
            vec![
                ObjectInfo {
                    name: "a".into(),
                    size: 0
                },
                ObjectInfo {
                    name: "b".into(),
                    size: 10_000
                },
            ]
        );
        store.delete(&name("a")).expect("delete");
        assert!(matches!(
            store.stat(&name("a")),
            Err(StoreError::NotFound(_))
        ));
        assert!(matches!(
            store.get(&name("a")),
            Err(StoreError::NotFound(_))
        ));
        assert!(matches!(
            store.delete(&name("a")),
            Err(StoreError::NotFound(_))
        ));
        assert_eq!(files_in(dir.path()), vec!["b".to_string()]);
    }

    /// A reader that fails after some bytes: the put must leave neither the
    /// object nor its temporary file.
    struct Failing(usize);
    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0 == 0 {
                return Err(io::Error::other("source broke"));
            }
            let n = buf.len().min(self.0);
            buf[..n].fill(1);
            self.0 -= n;
            Ok(n)
        }
    }

    #[test]
    fn an_object_with_the_longest_name_can_be_put() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let name = ObjectName::new(&"n".repeat(MAX_NAME_LEN)).expect("name");
        let mut w = store.put(&name).expect("put");
        w.write_chunk(b"abc").expect("write");
        assert_eq!(w.commit().expect("commit"), 3);
        assert_eq!(store.stat(&name).expect("stat").size, 3);
    }

    #[test]
    fn failed_put_leaves_no_object_and_no_temp_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let err = store.put_from(&name("obj"), &mut Failing(5000), 1024);
        assert!(matches!(err, Err(StoreError::Io { .. })), "{err:?}");
        assert!(
            files_in(dir.path()).is_empty(),
            "{:?}",
            files_in(dir.path())
        );
        // An abandoned writer also cleans up, and an older version survives it.
        store
            .put_from(&name("obj"), &mut &b"old"[..], 16)
            .expect("put");
        let mut w = store.put(&name("obj")).expect("writer");
        w.write_chunk(b"new, half written").expect("write");
        drop(w);
        assert_eq!(files_in(dir.path()), vec!["obj".to_string()]);
        let mut back = String::new();
        store
            .get(&name("obj"))
            .expect("get")
            .read_to_string(&mut back)
            .expect("read");
        assert_eq!(back, "old");
    }

    #[test]
    fn open_removes_temp_files_of_a_crashed_put() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join(".tmp-1-x-0"), b"torn").expect("write");
        fs::write(dir.path().join("x"), b"whole").expect("write");
        let store = Store::open(dir.path()).expect("open");
        assert_eq!(files_in(dir.path()), vec!["x".to_string()]);
        assert_eq!(store.list().expect("list").len(), 1);
    }

    #[test]
    fn concurrent_puts_to_one_name_leave_one_whole_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let n = name("shared");
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let (store, n) = (&store, &n);
                s.spawn(move || {
                    for _ in 0..5 {
                        let data = vec![t; 64 << 10];
                        store.put_from(n, &mut &data[..], 4096).expect("put");
                    }
                });
            }
        });
        let mut back = Vec::new();
        store
            .get(&n)
            .expect("get")
            .read_to_end(&mut back)
            .expect("read");
        assert_eq!(back.len(), 64 << 10);
        assert!(back.iter().all(|&b| b == back[0]), "torn object");
        assert_eq!(files_in(dir.path()), vec!["shared".to_string()]);
    }
}
