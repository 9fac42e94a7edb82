//! Which launcher started this process, when it is none we can join
//! through: the rule that a process started as one of several tasks never
//! runs as a silent job of one.
//!
//! A process that finds neither `ptlrun`'s, nor PMI's, nor PMIx's variables
//! would form a job of one. That is right for `./prog` typed at a shell,
//! and silently wrong for `srun -n 4 ./prog` under `MpiDefault=none`: four
//! independent one-rank jobs, each reporting success. Launchers leave other
//! traces in the environment, though; [`foreign_launch`] reads them, and
//! [`crate::join`] refuses to start with a message that names the launcher
//! and the fix.
//!
//! | launcher | what it leaves | what we say |
//! |---|---|---|
//! | Slurm's `srun` | `SLURM_STEP_NUM_TASKS` (or `SLURM_NTASKS` with `SLURM_STEP_ID`) | use `--mpi=pmix` or `--mpi=pmi2` |
//! | Open MPI's `mpirun` | `OMPI_COMM_WORLD_SIZE` | its PMIx server's variables are missing |
//! | Flux | `FLUX_JOB_SIZE` | run with `-o pmi=simple` (or `pmix`) |
//! | MVAPICH's `mpirun_rsh` | `MV2_COMM_WORLD_SIZE` | use `mpiexec.hydra` or `srun --mpi=pmi2` |
//! | a PMI launcher | `PMI_SIZE` without `PMI_FD`/`PMI_PORT` | its PMI connection is missing |
//!
//! Only a count above one counts: `srun -n 1 ./prog` is a job of one.
//! `PTL_SINGLETON=1` turns the rule off, for a program that is meant to run
//! as independent copies under a launcher.

/// Ours: `1` lets a process started as one of several launcher tasks run
/// as a job of one anyway.
pub const SINGLETON: &str = "PTL_SINGLETON";

/// A launcher that started several tasks we cannot join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignLaunch {
    /// Who, in words ("srun", "Open MPI's mpirun").
    pub launcher: &'static str,
    /// How many tasks it started.
    pub tasks: u32,
    /// What to do about it.
    pub fix: &'static str,
}

/// A task count from `var`, if it is set to a number.
fn count(get: &dyn Fn(&str) -> Option<String>, var: &str) -> Option<u32> {
    get(var)?.trim().parse().ok()
}

/// The launcher that started this process as one of several tasks without
/// a PMI or PMIx connection we can use, if the environment shows one; see
/// the module docs. `None` also when `PTL_SINGLETON=1`.
pub fn foreign_launch(get: &dyn Fn(&str) -> Option<String>) -> Option<ForeignLaunch> {
    if get(SINGLETON).is_some_and(|v| v.trim() == "1") {
        return None;
    }
    let slurm_tasks = count(get, "SLURM_STEP_NUM_TASKS").or_else(|| {
        // Older srun set only SLURM_NTASKS; within a batch script (no step)
        // it describes the allocation, not this process.
        get("SLURM_STEP_ID").and(count(get, "SLURM_NTASKS"))
    });
    let candidates = [
        (
            slurm_tasks,
            "srun",
            "use srun --mpi=pmix or --mpi=pmi2 (or set MpiDefault=pmix in slurm.conf)",
        ),
        (
            count(get, "OMPI_COMM_WORLD_SIZE"),
            "Open MPI's mpirun",
            "its PMIx server's variables (PMIX_NAMESPACE, PMIX_SERVER_URI*) are missing \
             from the environment; do not clear them between mpirun and this program",
        ),
        (
            count(get, "FLUX_JOB_SIZE"),
            "Flux",
            "run with -o pmi=simple (Flux's default) or -o pmi=pmix",
        ),
        (
            count(get, "MV2_COMM_WORLD_SIZE"),
            "MVAPICH's mpirun_rsh",
            "start it with mpiexec.hydra or srun --mpi=pmi2",
        ),
        (
            count(get, "PMI_SIZE"),
            "a PMI launcher",
            "PMI_SIZE is set but neither PMI_FD nor PMI_PORT: \
             the launcher's PMI connection is missing",
        ),
    ];
    candidates
        .into_iter()
        .find_map(|(tasks, launcher, fix)| match tasks {
            Some(tasks) if tasks > 1 => Some(ForeignLaunch {
                launcher,
                tasks,
                fix,
            }),
            _ => None,
        })
}

/// The PMIx launcher that started this process, as far as its other
/// variables tell; for messages only.
pub fn name_pmix_launcher(get: &dyn Fn(&str) -> Option<String>) -> &'static str {
    if get("OMPI_COMM_WORLD_SIZE").is_some() {
        "Open MPI's mpirun"
    } else if get("SLURM_STEP_ID").is_some() || get("SLURM_JOB_ID").is_some() {
        "srun --mpi=pmix"
    } else if get("FLUX_JOB_ID").is_some() {
        "Flux"
    } else if get("PRTE_LAUNCHED").is_some() || get("PRTE_MCA_ess").is_some() {
        "PRRTE"
    } else {
        "a PMIx launcher"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn srun_with_several_tasks_and_no_pmi_is_named_with_the_fix() {
        let f = foreign_launch(&env(&[
            ("SLURM_STEP_NUM_TASKS", "4"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_NTASKS", "4"),
        ]))
        .expect("srun detected");
        assert_eq!(f.launcher, "srun");
        assert_eq!(f.tasks, 4);
        assert!(f.fix.contains("--mpi=pmix") && f.fix.contains("--mpi=pmi2"));
        // An old srun that sets only SLURM_NTASKS, inside a step.
        let f = foreign_launch(&env(&[("SLURM_NTASKS", "2"), ("SLURM_STEP_ID", "3")]));
        assert_eq!(f.map(|f| f.tasks), Some(2));
    }

    #[test]
    fn a_batch_script_or_a_one_task_step_runs_alone() {
        // sbatch -n 4 script: the allocation has 4 tasks, the script is not
        // one of them.
        assert_eq!(foreign_launch(&env(&[("SLURM_NTASKS", "4")])), None);
        assert_eq!(
            foreign_launch(&env(&[
                ("SLURM_STEP_NUM_TASKS", "1"),
                ("SLURM_STEP_ID", "0"),
                ("SLURM_NTASKS", "4"),
            ])),
            None
        );
        assert_eq!(foreign_launch(&env(&[])), None);
    }

    #[test]
    fn every_launcher_in_the_table_is_recognised() {
        for (var, launcher) in [
            ("OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"),
            ("FLUX_JOB_SIZE", "Flux"),
            ("MV2_COMM_WORLD_SIZE", "MVAPICH's mpirun_rsh"),
            ("PMI_SIZE", "a PMI launcher"),
        ] {
            let f = foreign_launch(&env(&[(var, "3")]));
            assert_eq!(f.as_ref().map(|f| f.launcher), Some(launcher), "{var}");
            assert_eq!(f.map(|f| f.tasks), Some(3), "{var}");
            assert_eq!(foreign_launch(&env(&[(var, "1")])), None, "{var}=1");
            assert_eq!(foreign_launch(&env(&[(var, "junk")])), None, "{var}=junk");
        }
    }

    #[test]
    fn ptl_singleton_turns_the_rule_off() {
        let e = [("SLURM_STEP_NUM_TASKS", "4"), (SINGLETON, "1")];
        assert_eq!(foreign_launch(&env(&e)), None);
        let e = [("SLURM_STEP_NUM_TASKS", "4"), (SINGLETON, "0")];
        assert!(foreign_launch(&env(&e)).is_some());
    }

    #[test]
    fn pmix_launchers_are_named_for_messages() {
        assert_eq!(
            name_pmix_launcher(&env(&[("OMPI_COMM_WORLD_SIZE", "2")])),
            "Open MPI's mpirun"
        );
        assert_eq!(
            name_pmix_launcher(&env(&[("SLURM_STEP_ID", "0")])),
            "srun --mpi=pmix"
        );
        assert_eq!(name_pmix_launcher(&env(&[])), "a PMIx launcher");
    }
}
