//! What the README's MPI examples print when they succeed, checked the same
//! way under every launcher (`tests/hydra.rs`, `openmpi.rs`, `slurm.rs`).

use crate::launcher::Run;

/// How often `needle` occurs in `haystack`.
pub fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

/// `cg` on `n` ranks succeeded: rank 0 reports once, for the whole job,
/// after checking the solution against the exact one. `what` names the
/// launcher in failure messages.
pub fn assert_cg_ok(r: &Run, n: u32, what: &str) {
    assert!(r.ok(), "{what}: cg on {n}: {}", r.describe());
    assert_eq!(count(&r.stdout, "cg: OK"), 1, "{what}: {}", r.describe());
    assert!(
        r.stdout.contains(&format!("Poisson on {n} ranks")),
        "{what}: {}",
        r.describe()
    );
}

/// `ring LAPS` on `n` ranks succeeded with the right token: each lap adds
/// every rank but 0.
pub fn assert_ring_ok(r: &Run, n: u32, laps: u32, what: &str) {
    assert!(r.ok(), "{what}: ring on {n}: {}", r.describe());
    let token = laps * (1..n).sum::<u32>();
    let line = format!("ring of {n} ranks: {laps} laps, token {token} (expected {token})");
    assert!(r.stdout.contains(&line), "{what}: {line}: {}", r.describe());
    assert_eq!(count(&r.stdout, "ring: OK"), 1, "{what}: {}", r.describe());
}

/// `hello` on `n` ranks: every rank says hello once, naming the job size.
pub fn assert_hello_ok(r: &Run, n: u32, what: &str) {
    assert!(r.ok(), "{what}: hello on {n}: {}", r.describe());
    assert_eq!(
        count(&r.stdout, "hello from rank"),
        n as usize,
        "{what}: {}",
        r.describe()
    );
    for rank in 0..n {
        let line = format!("hello from rank {rank} of {n} ");
        assert_eq!(
            count(&r.stdout, &line),
            1,
            "{what}: {line}: {}",
            r.describe()
        );
    }
}
