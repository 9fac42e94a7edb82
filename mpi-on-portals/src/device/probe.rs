//! Probe: look for a saved unexpected message without receiving it.
//!
//! **Admission.** A probe that finds nothing admits its source (a process,
//! or any for any source) past the envelope cap, and the admission stays
//! until a probe or a receive from the same source is called again and
//! finds its message (or a receive from it is posted). Why: the awaited
//! message may be held in the transport behind messages of the same sender
//! that nothing received yet (the cap is full), and MPI requires a repeated
//! `iprobe` to see a message that was sent; an admission only for the
//! length of one call would end before a progress thread had offered the
//! held messages again. So a blocking probe admits its source while it
//! waits (it is a loop of these), and a loop of `iprobe`s does as well. The
//! cost: a program that probes a source once without ever receiving from
//! it leaves that source uncapped.

use portals::{ProcessId, PtlError};

use super::recv::source_id;
use super::{gone, gone_any, Device, State};
use crate::bits;
use crate::error::Result;
use crate::status::Status;

impl Device {
    /// Look for a message matching the receive without receiving it.
    pub(crate) fn iprobe(
        &self,
        ctx: u16,
        src: Option<(u32, u32)>,
        tag: Option<u32>,
    ) -> Result<Option<Status>> {
        self.poll_test();
        let mut st = self.lock();
        self.drain(&mut st);
        self.check(&st)?;
        let recv = bits::receive(ctx, src.map(|s| s.0), tag);
        let found = st
            .saved
            .iter()
            .find(|u| bits::accepts(recv, u.bits))
            .map(|u| {
                let f = bits::decode(u.bits);
                Status::new(
                    f.src as i32,
                    f.tag as i32,
                    u.rlength as usize,
                    u.rlength as usize,
                )
            });
        let who = source_id(src);
        if found.is_some() {
            self.end_probe_admission(&mut st, who);
        } else if !st.probe_admits.contains(&who) {
            match self.ni().eq_admit(self.unexp_eq, who) {
                Ok(()) => st.probe_admits.push(who),
                Err(e) => return Err(super::ptl(e)),
            }
            // The probed message may be behind messages its sender keeps
            // queued while paused (`throttle.rs`).
            self.resume_for(&mut st, who);
        }
        Ok(found)
    }

    /// Take back the admission a probe that found nothing gave `who`, if
    /// any (see the module docs).
    pub(super) fn end_probe_admission(&self, st: &mut State, who: ProcessId) {
        if let Some(i) = st.probe_admits.iter().position(|&p| p == who) {
            st.probe_admits.swap_remove(i);
            match self.ni().eq_unadmit(self.unexp_eq, who) {
                Ok(()) | Err(PtlError::InvalidArgument(_)) => {}
                Err(e) => tracing::warn!(error = %e, "could not end a probe's admission"),
            }
        }
    }

    /// Wait until a matching message is here.
    pub(crate) fn probe(
        &self,
        ctx: u16,
        src: Option<(u32, u32)>,
        tag: Option<u32>,
    ) -> Result<Status> {
        loop {
            if let Some(s) = self.iprobe(ctx, src, tag)? {
                return Ok(s);
            }
            let st = self.lock();
            let unreachable = match src {
                Some((_, w)) => gone(&st, w),
                None => gone_any(&st, ctx, self.job.rank()),
            };
            drop(st);
            if let Some(e) = unreachable {
                return Err(e);
            }
            self.block();
        }
    }
}
