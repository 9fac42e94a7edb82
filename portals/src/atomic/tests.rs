use super::*;
use AtomicOp::*;

const INTS: [Datatype; 8] = [
    Datatype::I8,
    Datatype::U8,
    Datatype::I16,
    Datatype::U16,
    Datatype::I32,
    Datatype::U32,
    Datatype::I64,
    Datatype::U64,
];

/// Little-endian bytes of integer `v` as an element of `dt`.
fn int(dt: Datatype, v: i128) -> Vec<u8> {
    v.to_le_bytes()[..dt.size()].to_vec()
}

/// The value of integer element bytes `b` of `dt`.
fn int_value(dt: Datatype, b: &[u8]) -> i128 {
    let signed = matches!(
        dt,
        Datatype::I8 | Datatype::I16 | Datatype::I32 | Datatype::I64
    );
    let fill = if signed && b[b.len() - 1] & 0x80 != 0 {
        0xff
    } else {
        0
    };
    let mut w = [fill; 16];
    w[..b.len()].copy_from_slice(b);
    i128::from_le_bytes(w)
}

fn float(dt: Datatype, v: f64) -> Vec<u8> {
    match dt {
        Datatype::F32 => (v as f32).to_le_bytes().to_vec(),
        _ => v.to_le_bytes().to_vec(),
    }
}

fn complex(dt: Datatype, re: f64, im: f64) -> Vec<u8> {
    let part = if dt == Datatype::ComplexF32 {
        Datatype::F32
    } else {
        Datatype::F64
    };
    let mut v = float(part, re);
    v.extend(float(part, im));
    v
}

/// Apply `op` to one element; returns (new target, fetched old value).
fn one(op: AtomicOp, dt: Datatype, t: &[u8], s: &[u8], o: Option<&[u8]>) -> (Vec<u8>, Vec<u8>) {
    let (mut t, mut s) = (t.to_vec(), s.to_vec());
    apply(op, dt, &mut t, &mut s, o).unwrap_or_else(|e| panic!("{op:?} on {dt:?}: {e}"));
    (t, s)
}

/// (operation, target, source, operand, expected target) for every
/// integer type: small positive values, so each row holds in `i8` too.
const INT_TABLE: &[(AtomicOp, i128, i128, Option<i128>, i128)] = &[
    (Min, 6, 3, None, 3),
    (Min, 3, 6, None, 3),
    (Max, 6, 3, None, 6),
    (Max, 3, 6, None, 6),
    (Sum, 6, 3, None, 9),
    (Prod, 6, 3, None, 18),
    (Lor, 0, 3, None, 1),
    (Lor, 0, 0, None, 0),
    (Land, 6, 3, None, 1),
    (Land, 6, 0, None, 0),
    (Bor, 6, 3, None, 7),
    (Band, 6, 3, None, 2),
    (Lxor, 6, 3, None, 0),
    (Lxor, 6, 0, None, 1),
    (Lxor, 0, 0, None, 0),
    (Bxor, 6, 3, None, 5),
    (Swap, 6, 3, None, 3),
    (Cswap, 6, 3, Some(6), 3),
    (Cswap, 6, 3, Some(5), 6),
    (CswapNe, 6, 3, Some(5), 3),
    (CswapNe, 6, 3, Some(6), 6),
    (CswapLe, 6, 3, Some(6), 3),
    (CswapLe, 6, 3, Some(7), 6),
    (CswapLt, 6, 3, Some(5), 3),
    (CswapLt, 6, 3, Some(6), 6),
    (CswapGe, 6, 3, Some(6), 3),
    (CswapGe, 6, 3, Some(5), 6),
    (CswapGt, 6, 3, Some(7), 3),
    (CswapGt, 6, 3, Some(6), 6),
    (Mswap, 0b1100, 0b1010, Some(0b0110), 0b1010),
    (Mswap, 0b1100, 0b0011, Some(0b0001), 0b1101),
];

#[test]
fn every_integer_operation_on_every_integer_type_follows_the_table() {
    for dt in INTS {
        for &(op, t, s, o, want) in INT_TABLE {
            let o = o.map(|o| int(dt, o));
            let (new, old) = one(op, dt, &int(dt, t), &int(dt, s), o.as_deref());
            assert_eq!(int_value(dt, &new), want, "{op:?} {dt:?} {t} {s} {o:?}");
            assert_eq!(int_value(dt, &old), t, "{op:?} {dt:?}: fetched value");
        }
    }
    // Every operation defined on integers has a row.
    for op in AtomicOp::ALL {
        assert!(INT_TABLE.iter().any(|r| r.0 == op), "{op:?} has no row");
    }
}

#[test]
fn integers_wrap_and_compare_with_their_own_signedness() {
    for dt in INTS {
        let bits = dt.size() as u32 * 8;
        let signed = int_value(dt, &int(dt, -1)) == -1;
        let (max, min) = if signed {
            ((1i128 << (bits - 1)) - 1, -(1i128 << (bits - 1)))
        } else {
            ((1i128 << bits) - 1, 0)
        };
        let (sum, _) = one(Sum, dt, &int(dt, max), &int(dt, 1), None);
        assert_eq!(int_value(dt, &sum), min, "{dt:?}: max + 1 wraps");
        // All ones is -1 when signed (smaller than 1), the maximum when not.
        let (m, _) = one(Min, dt, &int(dt, -1), &int(dt, 1), None);
        assert_eq!(int_value(dt, &m), if signed { -1 } else { 1 }, "{dt:?} min");
        let (m, _) = one(Max, dt, &int(dt, -1), &int(dt, 1), None);
        assert_eq!(
            int_value(dt, &m),
            if signed { 1 } else { max },
            "{dt:?} max"
        );
        let (p, _) = one(Prod, dt, &int(dt, max), &int(dt, 2), None);
        assert_eq!(int_value(dt, &p), if signed { -2 } else { max - 1 });
    }
}

/// (operation, target, source, operand, expected target) for `F32`/`F64`.
const FLOAT_TABLE: &[(AtomicOp, f64, f64, Option<f64>, f64)] = &[
    (Min, 6.0, 3.5, None, 3.5),
    (Min, -1.5, 3.0, None, -1.5),
    (Max, 6.0, 3.5, None, 6.0),
    (Max, -1.5, 3.0, None, 3.0),
    (Sum, 6.0, 3.5, None, 9.5),
    (Prod, 6.0, -3.5, None, -21.0),
    (Swap, 6.0, 3.5, None, 3.5),
    (Cswap, 6.0, 3.5, Some(6.0), 3.5),
    (Cswap, 6.0, 3.5, Some(5.0), 6.0),
    (CswapNe, 6.0, 3.5, Some(5.0), 3.5),
    (CswapLe, 6.0, 3.5, Some(6.0), 3.5),
    (CswapLt, 6.0, 3.5, Some(6.0), 6.0),
    (CswapGe, 6.0, 3.5, Some(5.0), 6.0),
    (CswapGt, 6.0, 3.5, Some(7.0), 3.5),
];

#[test]
fn every_float_operation_on_f32_and_f64_follows_the_table() {
    for dt in [Datatype::F32, Datatype::F64] {
        for &(op, t, s, o, want) in FLOAT_TABLE {
            let o = o.map(|o| float(dt, o));
            let (new, old) = one(op, dt, &float(dt, t), &float(dt, s), o.as_deref());
            assert_eq!(new, float(dt, want), "{op:?} {dt:?} {t} {s}");
            assert_eq!(old, float(dt, t), "{op:?} {dt:?}: fetched value");
        }
    }
    for op in AtomicOp::ALL {
        let has_row = FLOAT_TABLE.iter().any(|r| r.0 == op);
        assert_eq!(has_row, supported(op, Datatype::F64), "{op:?}");
    }
}

/// (operation, operand, expected target).
type ComplexCase = (AtomicOp, Option<Vec<u8>>, Vec<u8>);

#[test]
fn complex_sum_product_and_swaps() {
    for dt in [Datatype::ComplexF32, Datatype::ComplexF64] {
        let (a, b) = (complex(dt, 1.0, 2.0), complex(dt, 3.0, 4.0));
        let cases: &[ComplexCase] = &[
            (Sum, None, complex(dt, 4.0, 6.0)),
            (Prod, None, complex(dt, -5.0, 10.0)),
            (Swap, None, b.clone()),
            (Cswap, Some(complex(dt, 1.0, 2.0)), b.clone()),
            (Cswap, Some(complex(dt, 1.0, 3.0)), a.clone()),
            (CswapNe, Some(complex(dt, 1.0, 3.0)), b.clone()),
            (CswapNe, Some(complex(dt, 1.0, 2.0)), a.clone()),
        ];
        for (op, o, want) in cases {
            let (new, old) = one(*op, dt, &a, &b, o.as_deref());
            assert_eq!(&new, want, "{op:?} {dt:?}");
            assert_eq!(old, a, "{op:?} {dt:?}: fetched value");
        }
    }
}

#[test]
fn many_unaligned_elements_are_applied_each() {
    // Three u32 at an odd offset of a buffer: no alignment is assumed.
    let mut buf = [0u8; 14];
    for (i, v) in [10u32, 20, 30].iter().enumerate() {
        buf[1 + 4 * i..5 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
    let mut src: Vec<u8> = [1u32, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
    apply(Sum, Datatype::U32, &mut buf[1..13], &mut src, None).expect("sum");
    let got: Vec<u32> = buf[1..13]
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    assert_eq!(got, [11, 22, 33]);
    let old: Vec<u32> = src
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    assert_eq!(old, [10, 20, 30]);
    assert_eq!((buf[0], buf[13]), (0, 0), "bytes outside untouched");
}

#[test]
fn unsupported_pairs_are_refused_and_touch_nothing() {
    let mut refused = 0;
    for op in AtomicOp::ALL {
        for dt in Datatype::ALL {
            if supported(op, dt) {
                continue;
            }
            refused += 1;
            let n = dt.size();
            let mut t = vec![0x5a; n];
            let mut s = vec![0xa5; n];
            let o = vec![0xff; n];
            let o = op.needs_operand().then_some(&o[..]);
            assert_eq!(
                apply(op, dt, &mut t, &mut s, o),
                Err(AtomicError::Unsupported { op, datatype: dt })
            );
            assert_eq!((t, s), (vec![0x5a; n], vec![0xa5; n]), "{op:?} {dt:?}");
        }
    }
    // Bitwise/logical/mask on 4 float types (7 x 4), ordering on 2 complex
    // types (6 x 2).
    assert_eq!(refused, 7 * 4 + 6 * 2);
    assert!(!supported(Bxor, Datatype::F64) && !supported(Band, Datatype::F32));
}

#[test]
fn bad_lengths_and_operands_are_refused_and_touch_nothing() {
    let dt = Datatype::I32;
    let check_untouched = |op, t: &mut [u8], s: &mut [u8], o: Option<&[u8]>| {
        let before = (t.to_vec(), s.to_vec());
        let r = apply(op, dt, t, s, o);
        assert_eq!((t.to_vec(), s.to_vec()), before, "{op:?} touched bytes");
        r
    };
    let (mut t, mut s) = ([1u8; 6], [2u8; 6]);
    assert!(matches!(
        check_untouched(Sum, &mut t, &mut s, None),
        Err(AtomicError::BadLength { length: 6, .. })
    ));
    assert!(matches!(
        check_untouched(Sum, &mut [], &mut [], None),
        Err(AtomicError::BadLength { length: 0, .. })
    ));
    let (mut t, mut s) = ([1u8; 8], [2u8; 8]);
    assert!(matches!(
        check_untouched(Cswap, &mut t, &mut s, Some(&[0; 4])),
        Err(AtomicError::BadLength { length: 8, .. })
    ));
    assert!(matches!(
        check_untouched(Sum, &mut t, &mut s[..4], None),
        Err(AtomicError::BadLength { .. })
    ));
    let (mut t, mut s) = ([1u8; 4], [2u8; 4]);
    assert!(matches!(
        check_untouched(Cswap, &mut t, &mut s, None),
        Err(AtomicError::Operand { .. })
    ));
    assert!(matches!(
        check_untouched(Cswap, &mut t, &mut s, Some(&[0; 2])),
        Err(AtomicError::Operand { .. })
    ));
    assert!(matches!(
        check_untouched(Sum, &mut t, &mut s, Some(&[0; 4])),
        Err(AtomicError::Operand { .. })
    ));
    assert_eq!(
        check(Sum, Datatype::U64, 64, 32),
        Err(AtomicError::TooLarge {
            length: 64,
            max: 32
        })
    );
    assert_eq!(check(Sum, Datatype::U64, 32, 32), Ok(()));
}

#[test]
fn codes_round_trip_and_unknown_codes_are_none() {
    for (i, op) in AtomicOp::ALL.iter().enumerate() {
        assert_eq!(*op as u8 as usize, i);
        assert_eq!(AtomicOp::from_u8(i as u8), Some(*op));
    }
    for (i, dt) in Datatype::ALL.iter().enumerate() {
        assert_eq!(*dt as u8 as usize, i);
        assert_eq!(Datatype::from_u8(i as u8), Some(*dt));
    }
    assert_eq!(AtomicOp::from_u8(18), None);
    assert_eq!(Datatype::from_u8(12), None);
}
