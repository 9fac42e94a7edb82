//! Loopback soundness: once a network interface is dropped, no other thread
//! may still write the caller memory it had lent (the contract of
//! `md_attach_raw` lets its owner free that memory then).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use portals::loopback::LoopbackNetwork;
use portals::*;

const KEY: u64 = 0x10b;
const PT: PortalIndex = PortalIndex(3);
const LEN: usize = 8 << 20;

#[test]
fn dropping_a_target_waits_for_deliveries_into_its_raw_memory() {
    let net = LoopbackNetwork::new();
    let init = Arc::new(net.ni(NiConfig::new(ProcessId::new(0, 1), KEY)).unwrap());
    let src = init
        .md_bind(&MdDesc::default(), vec![0x55; LEN], Unlink::Retain)
        .unwrap();
    let target_id = ProcessId::new(0, 2);
    let deadline = Instant::now() + Duration::from_secs(60);
    for trial in 0..12 {
        let target = net.ni(NiConfig::new(target_id, KEY)).unwrap();
        let mut mem = vec![0u8; LEN].into_boxed_slice();
        let me = target
            .me_attach(PT, ProcessId::ANY, 0, 0, Unlink::Retain, Position::After)
            .unwrap();
        // SAFETY: `mem` outlives the interface (dropped below, before `mem`
        // is touched again); nothing else uses it meanwhile.
        unsafe {
            target.md_attach_raw(
                me,
                &MdDesc::new(MdOptions::OP_PUT | MdOptions::MANAGE_REMOTE),
                mem.as_mut_ptr(),
                mem.len(),
                Unlink::Retain,
            )
        }
        .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicUsize::new(0));
        let putter = {
            let (init, stop, done) = (init.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                // Put 8 MB after 8 MB into the target's memory; each copy
                // takes long enough for the drop below to land inside one.
                while !stop.load(Ordering::SeqCst) {
                    let _ = init.put(src, AckReq::NoAck, &Remote::new(target_id, PT, 0), 0);
                    done.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        while done.load(Ordering::SeqCst) < 1 + trial % 3 {
            assert!(Instant::now() < deadline, "the putter made no progress");
            std::thread::yield_now();
        }
        drop(target);
        // The interface is gone: the memory is ours again. Anything written
        // into it from now on is a write after free in a real program.
        mem.fill(0xaa);
        std::thread::sleep(Duration::from_millis(5));
        stop.store(true, Ordering::SeqCst);
        putter.join().unwrap();
        assert!(
            mem.iter().all(|&b| b == 0xaa),
            "trial {trial}: the memory was written after its interface was dropped"
        );
    }
}
