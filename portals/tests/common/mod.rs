//! The fixture the Portals semantics tests share: two interfaces on a
//! loopback network, and helpers to post, put and read.

// Each test file uses a different part of it.
#![allow(dead_code)]

use portals::loopback::LoopbackNetwork;
use portals::wire::{Header, Op};
use portals::*;

pub const KEY: u64 = 0x5eed;
pub const PT: PortalIndex = PortalIndex(7);

pub struct Pair {
    pub _net: LoopbackNetwork,
    pub target: NetworkInterface,
    pub init: NetworkInterface,
    pub teq: EqHandle,
    pub ieq: EqHandle,
}

/// An engine alone (process 1.1, no transport), driven by hand through
/// `recv_header`.
pub fn bare_target() -> Engine {
    Engine::new(ProcessId::new(1, 1), KEY, NiLimits::default()).unwrap()
}

/// A retained entry at the end of `PT`'s list that matches every message
/// from anyone.
pub fn catch_all(t: &mut Engine) -> MeHandle {
    t.me_attach(
        PT,
        ProcessId::ANY,
        0,
        u64::MAX,
        Unlink::Retain,
        Position::After,
    )
    .unwrap()
}

pub fn pair() -> Pair {
    let net = LoopbackNetwork::new();
    let target = net.ni(NiConfig::new(ProcessId::new(1, 10), KEY)).unwrap();
    let init = net.ni(NiConfig::new(ProcessId::new(2, 20), KEY)).unwrap();
    let teq = target.eq_alloc(64).unwrap();
    let ieq = init.eq_alloc(64).unwrap();
    Pair {
        _net: net,
        target,
        init,
        teq,
        ieq,
    }
}

impl Pair {
    /// Attach an ME (tail of PT) with an MD over `len` zero bytes.
    pub fn post(
        &self,
        bits: u64,
        ignore: u64,
        desc: MdDesc,
        len: usize,
        unlink: Unlink,
    ) -> (MeHandle, MdHandle) {
        self.post_to(self.teq, bits, ignore, desc, len, unlink)
    }

    /// [`Pair::post`], reporting to the target's queue `eq`.
    pub fn post_to(
        &self,
        eq: EqHandle,
        bits: u64,
        ignore: u64,
        desc: MdDesc,
        len: usize,
        unlink: Unlink,
    ) -> (MeHandle, MdHandle) {
        let me = self
            .target
            .me_attach(PT, ProcessId::ANY, bits, ignore, unlink, Position::After)
            .unwrap();
        let md = self
            .target
            .md_attach(me, &desc.eq(eq), vec![0; len], unlink)
            .unwrap();
        (me, md)
    }

    pub fn source(&self, data: &[u8]) -> MdHandle {
        self.init
            .md_bind(
                &MdDesc::default().eq(self.ieq),
                data.to_vec(),
                Unlink::Retain,
            )
            .unwrap()
    }

    pub fn put(&self, data: &[u8], bits: u64, ack: AckReq, offset: u64, hdr: u64) -> MdHandle {
        let md = self.source(data);
        self.init
            .put(
                md,
                ack,
                &Remote::new(self.target.id(), PT, bits).with_offset(offset),
                hdr,
            )
            .unwrap();
        md
    }

    pub fn tev(&self) -> Option<Event> {
        self.target.eq_get(self.teq).unwrap()
    }

    pub fn iev(&self) -> Option<Event> {
        self.init.eq_get(self.ieq).unwrap()
    }

    pub fn read(&self, md: MdHandle, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.target.md_read(md, 0, &mut v).unwrap();
        v
    }
}

pub fn put_desc() -> MdDesc {
    MdDesc::new(MdOptions::OP_PUT)
}

pub fn request(op: Op, bits: u64, len: u64) -> Header {
    Header {
        op,
        ack_req: false,
        ack_lazy: false,
        fail: FailType::Ok,
        job_key: KEY,
        src: ProcessId::new(9, 9),
        dst: ProcessId::new(1, 1),
        pt_index: PT,
        ac_index: 0,
        match_bits: bits,
        offset: 0,
        hdr_data: 0,
        rlength: len,
        mlength: 0,
        cookie: 1,
        atomic: None,
    }
}
