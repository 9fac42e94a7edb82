//! Communicators, groups and error handlers.

use std::ffi::c_int;

use mpi_on_portals::traits::*;
use mpi_on_portals::{Color, CommunicatorRelation, GroupRelation, SimpleCommunicator};

use crate::consts::*;
use crate::error::{fail, Fail, Res};
use crate::ptr;
use crate::state::{self, handle, CommEntry};

entry! {
    fn MPI_Comm_rank | PMPI_Comm_rank(comm: c_int, rank: *mut c_int) {
        state::with_comm(comm, |c| ptr::out(rank, c.rank(), "rank")).map_err(|f| f.on_comm(comm))
    }
}

entry! {
    fn MPI_Comm_size | PMPI_Comm_size(comm: c_int, size: *mut c_int) {
        state::with_comm(comm, |c| ptr::out(size, c.size(), "size")).map_err(|f| f.on_comm(comm))
    }
}

/// Store a new communicator (inheriting `parent`'s error handler).
fn add_comm(parent: c_int, c: Option<SimpleCommunicator>, out: *mut c_int) -> Res {
    let h = match c {
        None => MPI_COMM_NULL,
        Some(comm) => state::with(|st| {
            let errh = st.comm_entry(parent)?.errh;
            let h = st
                .comms
                .insert(CommEntry { comm, errh })
                .map(|i| handle(i, KIND_COMM))
                .ok_or_else(|| Fail::new(MPI_ERR_NO_MEM, "too many communicators"));
            state::comms_changed();
            h
        })?,
    };
    ptr::out(out, h, "newcomm")
}

entry! {
    fn MPI_Comm_dup | PMPI_Comm_dup(comm: c_int, newcomm: *mut c_int) {
        let c = state::comm(comm)?;
        let d = c.duplicate().map_err(|e| Fail::from(e).on_comm(comm))?;
        add_comm(comm, Some(d), newcomm)
    }
}

entry! {
    fn MPI_Comm_split | PMPI_Comm_split(comm: c_int, color: c_int, key: c_int, newcomm: *mut c_int) {
        let c = state::comm(comm)?;
        let col = if color == MPI_UNDEFINED {
            Color::undefined()
        } else if color < 0 {
            return fail(MPI_ERR_ARG, format!("invalid color {color}")).map_err(|f: Fail| f.on_comm(comm));
        } else {
            Color::with_value(color)
        };
        let s = c.split_by_color_with_key(col, key).map_err(|e| Fail::from(e).on_comm(comm))?;
        add_comm(comm, s, newcomm)
    }
}

entry! {
    fn MPI_Comm_create | PMPI_Comm_create(comm: c_int, group: c_int, newcomm: *mut c_int) {
        let c = state::comm(comm)?;
        let g = state::with(|st| st.group(group).cloned()).map_err(|f| f.on_comm(comm))?;
        let s = c.split_by_subgroup(&g).map_err(|e| Fail::from(e).on_comm(comm))?;
        add_comm(comm, s, newcomm)
    }
}

entry! {
    fn MPI_Comm_free | PMPI_Comm_free(comm: *mut c_int) {
        let h = ptr::read(comm, "comm")?;
        if h == MPI_COMM_WORLD || h == MPI_COMM_SELF {
            return fail(MPI_ERR_COMM, "predefined communicators cannot be freed").map_err(|f: Fail| f.on_comm(h));
        }
        let e = state::with(|st| {
            let i = st.comm_slot(h).ok_or_else(|| Fail::new(MPI_ERR_COMM, format!("invalid communicator {h:#x}")))?;
            let e = st.comms.remove(i).ok_or_else(|| Fail::new(MPI_ERR_COMM, format!("invalid communicator {h:#x}")));
            state::comms_changed();
            e
        })?;
        drop(e);
        ptr::out(comm, MPI_COMM_NULL, "comm")
    }
}

entry! {
    fn MPI_Comm_compare | PMPI_Comm_compare(comm1: c_int, comm2: c_int, result: *mut c_int) {
        let (a, b) = (state::comm(comm1)?, state::comm(comm2)?);
        let r = if comm1 == comm2 {
            MPI_IDENT
        } else {
            match a.compare(&b) {
                CommunicatorRelation::Identical => MPI_IDENT,
                CommunicatorRelation::Congruent => MPI_CONGRUENT,
                CommunicatorRelation::Similar => MPI_SIMILAR,
                CommunicatorRelation::Unequal => MPI_UNEQUAL,
            }
        };
        ptr::out(result, r, "result")
    }
}

entry! {
    fn MPI_Comm_group | PMPI_Comm_group(comm: c_int, group: *mut c_int) {
        let c = state::comm(comm)?;
        let h = state::with(|st| st.add_group(c.group()))?;
        ptr::out(group, h, "group")
    }
}

entry! {
    fn MPI_Comm_test_inter | PMPI_Comm_test_inter(comm: c_int, flag: *mut c_int) {
        state::comm(comm)?;
        ptr::out(flag, 0, "flag")
    }
}

entry! {
    fn MPI_Group_size | PMPI_Group_size(group: c_int, size: *mut c_int) {
        let n = state::with(|st| Ok(st.group(group)?.size()))?;
        ptr::out(size, n, "size")
    }
}

entry! {
    fn MPI_Group_rank | PMPI_Group_rank(group: c_int, rank: *mut c_int) {
        let r = state::with(|st| Ok(st.group(group)?.rank()))?;
        ptr::out(rank, r.unwrap_or(MPI_UNDEFINED), "rank")
    }
}

fn ranks<'a>(n: c_int, ranks: *const c_int) -> Result<&'a [c_int], Fail> {
    ptr::slice(ranks, ptr::count(n)?, "ranks")
}

entry! {
    fn MPI_Group_incl | PMPI_Group_incl(group: c_int, n: c_int, rks: *const c_int, newgroup: *mut c_int) {
        let r = ranks(n, rks)?;
        let h = state::with(|st| {
            let g = st.group(group)?.include(r).map_err(|e| Fail::new(MPI_ERR_RANK, e.to_string()))?;
            st.add_group(g)
        })?;
        ptr::out(newgroup, h, "newgroup")
    }
}

entry! {
    fn MPI_Group_excl | PMPI_Group_excl(group: c_int, n: c_int, rks: *const c_int, newgroup: *mut c_int) {
        let r = ranks(n, rks)?;
        let h = state::with(|st| {
            let g = st.group(group)?.exclude(r).map_err(|e| Fail::new(MPI_ERR_RANK, e.to_string()))?;
            st.add_group(g)
        })?;
        ptr::out(newgroup, h, "newgroup")
    }
}

/// The members (ranks in the group) of `a` that `keep` accepts, plus,
/// for a union, the members of `b` not in `a`; as a group of `a`'s
/// world — built from translations, since groups keep world ranks.
fn set_op(g1: c_int, g2: c_int, which: u8, out: *mut c_int) -> Res {
    let h = state::with(|st| {
        let (a, b) = (st.group(g1)?.clone(), st.group(g2)?.clone());
        let ia: Vec<c_int> = (0..a.size()).collect();
        let ib: Vec<c_int> = (0..b.size()).collect();
        let a_in_b = a.translate_ranks(&ia, &b)?;
        let g = match which {
            // union: a, then b's members not in a
            0 => {
                let b_in_a = b.translate_ranks(&ib, &a)?;
                let extra: Vec<c_int> = ib
                    .iter()
                    .zip(&b_in_a)
                    .filter(|(_, t)| t.is_none())
                    .map(|(&r, _)| r)
                    .collect();
                if extra.is_empty() {
                    a.clone()
                } else {
                    // a ∪ extra: a's world order, then b's extras.
                    let world = st
                        .comms
                        .get(0)
                        .map(|e| e.comm.group())
                        .ok_or_else(|| Fail::new(MPI_ERR_INTERN, "no world"))?;
                    let all_a = a.translate_ranks(&ia, &world)?;
                    let all_b = b.translate_ranks(&extra, &world)?;
                    let w: Vec<c_int> = all_a.into_iter().chain(all_b).flatten().collect();
                    world.include(&w)?
                }
            }
            // intersection: a's members also in b
            1 => {
                let keep: Vec<c_int> = ia
                    .iter()
                    .zip(&a_in_b)
                    .filter(|(_, t)| t.is_some())
                    .map(|(&r, _)| r)
                    .collect();
                a.include(&keep)?
            }
            // difference: a's members not in b
            _ => {
                let keep: Vec<c_int> = ia
                    .iter()
                    .zip(&a_in_b)
                    .filter(|(_, t)| t.is_none())
                    .map(|(&r, _)| r)
                    .collect();
                a.include(&keep)?
            }
        };
        st.add_group(g)
    })?;
    ptr::out(out, h, "newgroup")
}

entry! {
    fn MPI_Group_union | PMPI_Group_union(group1: c_int, group2: c_int, newgroup: *mut c_int) {
        set_op(group1, group2, 0, newgroup)
    }
}

entry! {
    fn MPI_Group_intersection | PMPI_Group_intersection(group1: c_int, group2: c_int, newgroup: *mut c_int) {
        set_op(group1, group2, 1, newgroup)
    }
}

entry! {
    fn MPI_Group_difference | PMPI_Group_difference(group1: c_int, group2: c_int, newgroup: *mut c_int) {
        set_op(group1, group2, 2, newgroup)
    }
}

entry! {
    fn MPI_Group_translate_ranks | PMPI_Group_translate_ranks(group1: c_int, n: c_int, ranks1: *const c_int, group2: c_int, ranks2: *mut c_int) {
        let cnt = ptr::count(n)?;
        let r1 = ptr::slice(ranks1, cnt, "ranks1")?;
        let out = ptr::slice_mut(ranks2, cnt, "ranks2")?;
        let t = state::with(|st| {
            let (a, b) = (st.group(group1)?, st.group(group2)?);
            // MPI_PROC_NULL translates to itself.
            let mut res = Vec::with_capacity(cnt);
            for &r in r1 {
                if r == MPI_PROC_NULL {
                    res.push(MPI_PROC_NULL);
                } else {
                    let t = a.translate_ranks(&[r], b).map_err(|e| Fail::new(MPI_ERR_RANK, e.to_string()))?;
                    res.push(t[0].unwrap_or(MPI_UNDEFINED));
                }
            }
            Ok(res)
        })?;
        out.copy_from_slice(&t);
        Ok(())
    }
}

entry! {
    fn MPI_Group_compare | PMPI_Group_compare(group1: c_int, group2: c_int, result: *mut c_int) {
        let r = state::with(|st| Ok(st.group(group1)?.compare(st.group(group2)?)))?;
        ptr::out(result, match r {
            GroupRelation::Identical => MPI_IDENT,
            GroupRelation::Similar => MPI_SIMILAR,
            GroupRelation::Unequal => MPI_UNEQUAL,
        }, "result")
    }
}

entry! {
    fn MPI_Group_free | PMPI_Group_free(group: *mut c_int) {
        let h = ptr::read(group, "group")?;
        if h != MPI_GROUP_EMPTY {
            state::with(|st| {
                st.group(h)?;
                if let Some(i) = state::slot(h, KIND_GROUP) {
                    st.groups.remove(i);
                }
                Ok(())
            })?;
        }
        ptr::out(group, MPI_GROUP_NULL, "group")
    }
}

entry! {
    fn MPI_Comm_set_errhandler | PMPI_Comm_set_errhandler(comm: c_int, errhandler: c_int) {
        crate::errhandler::check(errhandler, crate::errhandler::Serves::Comm).map_err(|f| f.on_comm(comm))?;
        state::with(|st| {
            st.comm_entry(comm)?.errh = errhandler;
            Ok(())
        })
    }
}

entry! {
    fn MPI_Comm_get_errhandler | PMPI_Comm_get_errhandler(comm: c_int, errhandler: *mut c_int) {
        let e = state::with(|st| Ok(st.comm_entry(comm)?.errh))?;
        ptr::out(errhandler, e, "errhandler")
    }
}

entry! {
    fn MPI_Errhandler_free | PMPI_Errhandler_free(errhandler: *mut c_int) {
        crate::errhandler::free(errhandler)
    }
}

/// `MPI_COMM_TYPE_SHARED`: the processes that share memory (one host).
const MPI_COMM_TYPE_SHARED: c_int = 1;

entry! {
    /// `MPI_COMM_TYPE_SHARED` groups the ranks by host name (gathered
    /// from every member), ordered by `key`; `MPI_UNDEFINED` gives
    /// `MPI_COMM_NULL`. Other split types are unsupported.
    fn MPI_Comm_split_type | PMPI_Comm_split_type(comm: c_int, split_type: c_int, key: c_int, _info: c_int, newcomm: *mut c_int) {
        let c = state::comm(comm)?;
        let color = match split_type {
            MPI_UNDEFINED => Color::undefined(),
            MPI_COMM_TYPE_SHARED => {
                const LEN: usize = 256;
                let mut mine = [0u8; LEN];
                // SAFETY: `mine` is writable for LEN bytes; gethostname
                // writes at most LEN - 1 and we keep the last byte 0.
                let r = unsafe { libc::gethostname(mine.as_mut_ptr().cast(), LEN - 1) };
                if r != 0 {
                    return fail(MPI_ERR_OTHER, "gethostname failed").map_err(|f: Fail| f.on_comm(comm));
                }
                let n = c.size() as usize;
                let mut all = vec![0u8; LEN * n];
                c.all_gather_into(&mine[..], &mut all[..]).map_err(|e| Fail::from(e).on_comm(comm))?;
                // The color: the lowest rank on this host.
                let first = (0..n).find(|&r| all[r * LEN..(r + 1) * LEN] == mine[..]).unwrap_or(0);
                Color::with_value(first as c_int)
            }
            _ => {
                return fail(MPI_ERR_UNSUPPORTED_OPERATION, format!("split type {split_type}"))
                    .map_err(|f: Fail| f.on_comm(comm))
            }
        };
        let s = c.split_by_color_with_key(color, key).map_err(|e| Fail::from(e).on_comm(comm))?;
        add_comm(comm, s, newcomm)
    }
}
