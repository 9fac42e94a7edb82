//! Probe: look for a saved unexpected message without receiving it.

use super::{gone, gone_any, Device};
use crate::bits;
use crate::error::Result;
use crate::status::Status;

impl Device {
    /// Look for a message matching the receive without receiving it.
    pub(crate) fn iprobe(
        &self,
        ctx: u16,
        src: Option<u32>,
        tag: Option<u32>,
    ) -> Result<Option<Status>> {
        self.poll();
        let mut st = self.lock();
        self.drain(&mut st);
        self.check(&st)?;
        let recv = bits::receive(ctx, src, tag);
        Ok(st
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
            }))
    }

    /// Wait until a matching message is here.
    pub(crate) fn probe(
        &self,
        ctx: u16,
        src: Option<(u32, u32)>,
        tag: Option<u32>,
    ) -> Result<Status> {
        loop {
            if let Some(s) = self.iprobe(ctx, src.map(|s| s.0), tag)? {
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
