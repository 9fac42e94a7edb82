//! What the services' end-to-end tests use: random and failing sources,
//! a streaming comparison of two files, and a store directory's listing.

#![allow(dead_code)] // each test binary uses its own subset

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use rand::{RngCore, SeedableRng};

/// Whether two files hold the same bytes, read side by side in chunks
/// (never loaded whole; slices compare with memcmp, fast even unoptimised).
pub fn same_contents(a: &Path, b: &Path) -> bool {
    let (mut fa, mut fb) = (File::open(a).expect("open"), File::open(b).expect("open"));
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let na = read_full(&mut fa, &mut ba);
        let nb = read_full(&mut fb, &mut bb);
        if na != nb || ba[..na] != bb[..nb] {
            return false;
        }
        if na == 0 {
            return true;
        }
    }
}

/// Fill `buf` from `f` as far as the file goes; the bytes read.
pub fn read_full(f: &mut File, buf: &mut [u8]) -> usize {
    let mut done = 0;
    while done < buf.len() {
        match f.read(&mut buf[done..]).expect("read") {
            0 => break,
            n => done += n,
        }
    }
    done
}

/// A file of `size` random bytes in `dir`.
pub fn random_file(dir: &Path, name: &str, size: usize, rng: &mut impl RngCore) -> PathBuf {
    let mut data = vec![0u8; size];
    rng.fill_bytes(&mut data);
    let p = dir.join(name);
    std::fs::write(&p, &data).expect("write");
    p
}

/// A sparse file of `size` bytes in `dir` with random 64 KiB blocks at
/// the start, just before the middle and at the end (the rest holes).
pub fn sparse_file(dir: &Path, name: &str, size: u64) -> PathBuf {
    let p = dir.join(name);
    let mut f = File::create(&p).expect("create");
    f.set_len(size).expect("set_len");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
    let mut block = vec![0u8; 64 << 10];
    for at in [0, size / 2 - 1000, size - block.len() as u64] {
        rng.fill_bytes(&mut block);
        f.seek(SeekFrom::Start(at)).expect("seek");
        f.write_all(&block).expect("write");
    }
    p
}

/// A source that breaks after some bytes.
pub struct Failing(pub usize);
impl Read for Failing {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.0 == 0 {
            return Err(std::io::Error::other("disk on fire"));
        }
        let n = buf.len().min(self.0);
        buf[..n].fill(7);
        self.0 -= n;
        Ok(n)
    }
}

/// The names in `dir`, sorted (objects and temporary files alike).
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}
