//! Hostile and malformed input: every datagram is counted, nothing panics,
//! the sink contract holds. The proptests double as CI stand-ins for the
//! fuzz targets (`fuzz/fuzz_targets/udp_*.rs` run the same harnesses).

use std::time::Instant;

use nal_udp::fuzzing::{self, ContractSink};
use nal_udp::proto::wire::{self, FrameOut, HeaderFields, Sack, Transmission, HEADER_LEN};
use nal_udp::proto::{Config, Endpoint, OutPayload, PeerId, Stats};
use proptest::prelude::*;

const KEY: u64 = 77;

fn endpoint() -> Endpoint {
    let mut ep = Endpoint::new(Config::default(), KEY, 0).unwrap();
    ep.add_peer(1);
    ep.add_peer(2);
    ep
}

fn accounted(s: &Stats) -> u64 {
    s.datagrams_received + s.datagrams_rejected()
}

fn hdr(sack: &Sack, key: u64, src: PeerId, dst: PeerId, cum_ack: u64) -> HeaderFields<'_> {
    HeaderFields {
        job_key: key,
        src,
        dst,
        cum_ack,
        window: 64,
        sack,
        ack_requested: false,
        transmission: Transmission::Original,
        loss_report: 0,
        late_dups: 0,
    }
}

fn msg_datagram(key: u64, src: PeerId, dst: PeerId, seq: u64, msg: u64, payload: &[u8]) -> Vec<u8> {
    let sack = Sack::ZERO;
    let header = [0xffu8; HEADER_LEN];
    let mut buf = vec![0u8; 2000];
    let frame = FrameOut::Msg {
        seq,
        msg,
        total: payload.len() as u64,
        frag_size: 1000,
        header: &header,
        len: payload.len(),
    };
    let n = wire::encode(&mut buf, &hdr(&sack, key, src, dst, 0), &frame, |d| {
        d.copy_from_slice(payload)
    })
    .unwrap();
    buf.truncate(n);
    buf
}

/// What is wrong, the datagram, the peer it claims to come from, its counter.
type Case = (&'static str, Vec<u8>, PeerId, fn(&Stats) -> u64);

#[test]
fn each_kind_of_bad_datagram_has_its_counter() {
    let mut ep = endpoint();
    let mut sink = ContractSink::default();
    let now = Instant::now();
    let good = msg_datagram(KEY, 1, 0, 0, 0, b"hello");
    let cases: [Case; 8] = [
        ("bad key", msg_datagram(KEY + 1, 1, 0, 0, 0, b"x"), 1, |s| {
            s.bad_key_drops
        }),
        ("bad magic", b"NOPE and more bytes".to_vec(), 1, |s| {
            s.bad_magic_drops
        }),
        (
            "bad version",
            {
                let mut d = good.clone();
                d[4] = 9;
                d
            },
            1,
            |s| s.bad_magic_drops,
        ),
        ("unknown peer", good.clone(), 5, |s| s.unknown_peer_drops),
        (
            "wrong source",
            msg_datagram(KEY, 2, 0, 0, 0, b"x"),
            1,
            |s| s.misaddressed_drops,
        ),
        (
            "wrong destination",
            msg_datagram(KEY, 1, 3, 0, 0, b"x"),
            1,
            |s| s.misaddressed_drops,
        ),
        (
            "truncated",
            good[..good.len() - 10 - HEADER_LEN].to_vec(),
            1,
            |s| s.malformed_drops,
        ),
        ("too long", vec![0u8; 70_000], 1, |s| s.malformed_drops),
    ];
    for (what, d, peer, counter) in cases {
        let before = ep.stats();
        ep.handle_datagram(now, peer, &d, &mut sink);
        let after = ep.stats();
        assert_eq!(counter(&after), counter(&before) + 1, "{what}");
        assert_eq!(accounted(&after), accounted(&before) + 1, "{what}");
        assert_eq!(
            after.datagrams_received, before.datagrams_received,
            "{what}"
        );
    }
    // an ack for data never sent
    let sack = Sack::ZERO;
    let mut buf = [0u8; 100];
    let n = wire::encode(&mut buf, &hdr(&sack, KEY, 1, 0, 5), &FrameOut::Ack, |_| {}).unwrap();
    ep.handle_datagram(now, 1, &buf[..n], &mut sink);
    assert_eq!(ep.stats().malformed_drops, 3);
    assert_eq!(sink.started, 0);
    // the good one goes through, once
    ep.handle_datagram(now, 1, &good, &mut sink);
    ep.handle_datagram(now, 1, &good, &mut sink);
    assert_eq!(sink.started, 1);
    assert_eq!(ep.stats().dup_drops, 1);
}

#[test]
fn protocol_violations_are_counted_not_delivered() {
    let mut ep = endpoint();
    let mut sink = ContractSink::default();
    let now = Instant::now();
    // message index 3 where 0 is due
    ep.handle_datagram(now, 1, &msg_datagram(KEY, 1, 0, 0, 3, b"abc"), &mut sink);
    assert_eq!(ep.stats().protocol_violations, 1);
    assert_eq!(sink.started, 0);
    // a completion notice for a large message never sent: counted as
    // stale, and acknowledged (it could be a repeat after our answer was lost)
    let sack = Sack::ZERO;
    let mut buf = [0u8; 100];
    let n = wire::encode(
        &mut buf,
        &hdr(&sack, KEY, 1, 0, 0),
        &FrameOut::Done { msg: 0 },
        |_| {},
    )
    .unwrap();
    ep.handle_datagram(now, 1, &buf[..n], &mut sink);
    assert_eq!(ep.stats().stale_drops, 1);
    let mut out = vec![0u8; ep.max_datagram()];
    let (to, len) = ep.poll_transmit(now, &mut out).unwrap();
    assert_eq!(to, 1);
    assert_eq!(
        wire::decode(&out[..len]).unwrap().frame,
        wire::Frame::DoneAck { msg: 0 }
    );
    // an acknowledgment for a notice never sent
    let n = wire::encode(
        &mut buf,
        &hdr(&sack, KEY, 1, 0, 0),
        &FrameOut::DoneAck { msg: 0 },
        |_| {},
    )
    .unwrap();
    ep.handle_datagram(now, 1, &buf[..n], &mut sink);
    assert_eq!(ep.stats().stale_drops, 2);
    // a pull for a message that does not exist
    let n = wire::encode(
        &mut buf,
        &hdr(&sack, KEY, 1, 0, 0),
        &FrameOut::Pull {
            msg: 0,
            limit: 10,
            first_frag: 0,
            frag_size: 10,
            mask: 1,
        },
        |_| {},
    )
    .unwrap();
    ep.handle_datagram(now, 1, &buf[..n], &mut sink);
    assert_eq!(ep.stats().stale_drops, 3);
    // sequence numbers far beyond the window
    ep.handle_datagram(
        now,
        1,
        &msg_datagram(KEY, 1, 0, 1 << 40, 0, b"x"),
        &mut sink,
    );
    assert_eq!(ep.stats().out_of_window_drops, 1);
    assert_eq!(accounted(&ep.stats()), 5);
}

#[test]
fn out_of_order_buffering_is_bounded_by_the_window() {
    let cfg = Config {
        recv_window: 32,
        ..Config::default()
    };
    let mut ep = Endpoint::new(cfg, KEY, 0).unwrap();
    ep.add_peer(1);
    let mut sink = ContractSink::default();
    let now = Instant::now();
    // seq 0 never arrives; a peer floods everything after it
    for seq in 1..10_000 {
        ep.handle_datagram(
            now,
            1,
            &msg_datagram(KEY, 1, 0, seq, seq, b"data"),
            &mut sink,
        );
    }
    let s = ep.stats();
    assert_eq!(s.buffered_datagrams, 31);
    assert_eq!(s.max_buffered_datagrams, 31);
    assert_eq!(s.out_of_window_drops, 10_000 - 32);
    // the missing one arrives: everything buffered is delivered in order
    ep.handle_datagram(now, 1, &msg_datagram(KEY, 1, 0, 0, 0, b"data"), &mut sink);
    assert_eq!(sink.started, 32);
    assert_eq!(ep.stats().buffered_datagrams, 0);
}

#[test]
fn send_rejects_what_it_cannot_carry() {
    let mut ep = endpoint();
    let now = Instant::now();
    let h = [0u8; HEADER_LEN];
    assert!(ep.send(now, 9, &h, OutPayload::copy_from(b"x"), 1).is_err());
    struct Huge;
    impl nal_udp::proto::PayloadSource for Huge {
        fn len(&self) -> u64 {
            u64::MAX
        }
        fn read_at(&self, _: u64, _: &mut [u8]) {
            unreachable!()
        }
    }
    assert!(ep
        .send(now, 1, &h, OutPayload::Borrowed(Box::new(Huge)), 2)
        .is_err());
    assert_eq!(ep.poll_event(), None, "refused sends are not reported");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_are_counted_and_never_panic(
        datagrams in prop::collection::vec(
            (0u64..4, prop::collection::vec(any::<u8>(), 0..1500)),
            1..20,
        )
    ) {
        let mut ep = endpoint();
        let mut sink = ContractSink::default();
        let now = Instant::now();
        for (i, (peer, d)) in datagrams.iter().enumerate() {
            ep.handle_datagram(now, *peer, d, &mut sink);
            prop_assert_eq!(accounted(&ep.stats()), i as u64 + 1);
        }
        let mut buf = vec![0u8; ep.max_datagram()];
        while ep.poll_transmit(now, &mut buf).is_some() {}
    }

    #[test]
    fn valid_headers_with_arbitrary_bodies(
        frames in prop::collection::vec(
            (1u8..9, 0u64..8, any::<bool>(), prop::collection::vec(any::<u8>(), 0..400)),
            1..40,
        )
    ) {
        let mut ep = endpoint();
        let mut sink = ContractSink::default();
        let now = Instant::now();
        let sack = Sack::ZERO;
        for (i, (kind, seq, ackreq, body)) in frames.iter().enumerate() {
            let mut h = hdr(&sack, KEY, 1, 0, 0);
            h.ack_requested = *ackreq;
            let mut d = vec![0u8; 100];
            let n = wire::encode(&mut d, &h, &FrameOut::Ack, |_| {}).unwrap();
            d.truncate(n);
            d[5] = *kind;
            d.extend_from_slice(&seq.to_le_bytes());
            d.extend_from_slice(body);
            ep.handle_datagram(now, 1, &d, &mut sink);
            prop_assert_eq!(accounted(&ep.stats()), i as u64 + 1);
        }
        let mut buf = vec![0u8; ep.max_datagram()];
        while ep.poll_transmit(now, &mut buf).is_some() {}
    }

    #[test]
    fn datagram_decoder_roundtrips(data in prop::collection::vec(any::<u8>(), 0..300)) {
        fuzzing::datagram(&data);
    }

    #[test]
    fn mutated_valid_datagrams_roundtrip(
        seq in any::<u64>(),
        payload in prop::collection::vec(any::<u8>(), 0..200),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..), 0..4),
    ) {
        let mut d = msg_datagram(KEY, 1, 0, seq, 0, &payload);
        for (at, x) in flips {
            let i = at.index(d.len());
            d[i] ^= x;
        }
        fuzzing::datagram(&d);
    }

    #[test]
    fn endpoint_pair_under_adversarial_scheduling(
        ops in prop::collection::vec(any::<u8>(), 0..3000)
    ) {
        fuzzing::endpoint(&ops);
    }
}
