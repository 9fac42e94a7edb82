//! Batched datagram I/O: `recvmmsg` and `sendmmsg` on a non-blocking UDP
//! socket, so that one system call moves many datagrams.
//!
//! Both batches own their buffers and their `mmsghdr`/`iovec` arrays:
//! nothing is allocated after construction. The receive batch points its
//! headers at its buffers once, at construction, and afterwards resets only
//! the fields the kernel wrote, in the slots it filled: a waiting thread
//! calls `recv` in a loop, and re-pointing every slot each time cost more
//! than the empty `recvmmsg` itself.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// Receive slots start on page boundaries: the kernel copies a datagram
/// into user memory with `rep movsb`, which on AMD Zen 3 runs at a tenth of
/// its speed when the destination lies 1 to 31 bytes past the source
/// modulo a page (see `portals-copy`), and the payload of a large datagram
/// sits at the start of a page in the kernel. A slot of the allocator's
/// (16 bytes past a page for a large `Vec`) received a 60 KB datagram in
/// 36 µs instead of 3.
const SLOT_ALIGN: usize = 4096;

/// Datagrams received by one [`RecvBatch::recv`] call.
pub struct RecvBatch {
    cap: usize,
    /// Distance between slots: `cap` rounded up to [`SLOT_ALIGN`].
    stride: usize,
    /// Where slot 0 starts in `buf` (its first page boundary).
    first: usize,
    buf: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    lens: Vec<usize>,
    truncated: Vec<bool>,
    count: usize,
    iov: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers inside `iov` and `hdrs` point into the heap
// buffers of this struct's own vectors, which are never resized after
// construction (moving the struct does not move them); they are only
// dereferenced (by the kernel) inside `recv`, which takes `&mut self`, so
// moving the batch to another thread is harmless.
unsafe impl Send for RecvBatch {}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("slots", &self.lens.len())
            .field("cap", &self.cap)
            .field("count", &self.count)
            .finish()
    }
}

impl RecvBatch {
    /// Room for `slots` datagrams of up to `cap` bytes each (both at least 1).
    pub fn new(slots: usize, cap: usize) -> Self {
        let slots = slots.max(1);
        let cap = cap.max(1);
        let stride = cap.next_multiple_of(SLOT_ALIGN);
        let buf = vec![0; slots * stride + SLOT_ALIGN];
        let first = buf.as_ptr().align_offset(SLOT_ALIGN);
        let mut b = RecvBatch {
            cap,
            stride,
            first,
            buf,
            // SAFETY: sockaddr_storage is plain old data; all-zero is a
            // valid (AF_UNSPEC) value.
            addrs: vec![unsafe { std::mem::zeroed() }; slots],
            lens: vec![0; slots],
            truncated: vec![false; slots],
            count: 0,
            iov: Vec::with_capacity(slots),
            // SAFETY: mmsghdr is plain old data; all-zero (null pointers,
            // zero lengths) is a valid value, pointed at the buffers below.
            hdrs: vec![unsafe { std::mem::zeroed() }; slots],
        };
        let base = b.buf.as_mut_ptr();
        for i in 0..slots {
            b.iov.push(libc::iovec {
                // SAFETY: slot i (`cap` bytes from `first + i × stride`)
                // lies inside `buf`, which has `first` (< SLOT_ALIGN) +
                // slots × stride bytes and more.
                iov_base: unsafe { base.add(b.first + i * stride) }.cast(),
                iov_len: cap,
            });
        }
        let (iov, addrs) = (b.iov.as_mut_ptr(), b.addrs.as_mut_ptr());
        for (i, h) in b.hdrs.iter_mut().enumerate() {
            // SAFETY: i < slots, the length of `iov` and `addrs`.
            h.msg_hdr.msg_name = unsafe { addrs.add(i) }.cast();
            h.msg_hdr.msg_iov = unsafe { iov.add(i) };
            h.msg_hdr.msg_iovlen = 1;
            Self::reset(h);
        }
        b
    }

    /// Make a header whose slot the kernel filled ready for another call
    /// (the kernel writes the name length, the flags and the length).
    fn reset(h: &mut libc::mmsghdr) {
        h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        h.msg_hdr.msg_control = std::ptr::null_mut();
        h.msg_hdr.msg_controllen = 0;
        h.msg_hdr.msg_flags = 0;
        h.msg_len = 0;
    }

    /// Receive as many waiting datagrams as fit, without blocking. Returns
    /// how many arrived (0 when none is waiting).
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        self.recv_up_to(fd, usize::MAX)
    }

    /// Like [`recv`](Self::recv), but at most `max` datagrams (at least 1).
    /// A thread polling for one expected answer asks for one: `recvmmsg`
    /// tries a slot past the last datagram waiting before it returns, and
    /// that try costs as much as receiving one.
    pub fn recv_up_to(&mut self, fd: RawFd, max: usize) -> io::Result<usize> {
        for h in &mut self.hdrs[..self.count] {
            Self::reset(h);
        }
        self.count = 0;
        let slots = self.lens.len().min(max.max(1));
        // SAFETY: `hdrs` holds `slots` initialised headers whose name and
        // iovec pointers point into `addrs`, `iov` and `buf` (set up in
        // `new`), all live, never resized, and not otherwise borrowed while
        // `&mut self` is held.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                slots as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let n = n as usize;
        for i in 0..n {
            let h = &self.hdrs[i];
            self.lens[i] = (h.msg_len as usize).min(self.cap);
            self.truncated[i] = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        }
        self.count = n;
        Ok(n)
    }

    /// Number of datagrams from the last `recv`.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when the last `recv` got nothing.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Datagram `i` of the last `recv`: its bytes, its source address (if
    /// IPv4 or IPv6), and whether it was longer than the slot (then the
    /// bytes are only its beginning).
    pub fn get(&self, i: usize) -> Option<(&[u8], Option<SocketAddr>, bool)> {
        if i >= self.count {
            return None;
        }
        let start = self.first + i * self.stride;
        let data = &self.buf[start..start + self.lens[i]];
        Some((data, sockaddr_to_std(&self.addrs[i]), self.truncated[i]))
    }
}

/// Where one queued datagram goes.
///
/// A datagram to an address is sent with that address on the socket given
/// to [`SendBatch::flush`]. A datagram through a connected socket is sent
/// on that socket *without* an address: only then does the kernel use the
/// route it cached at `connect` instead of looking one up per datagram
/// (about 0.4 µs of each hop on loopback here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// The destination.
    pub addr: SocketAddr,
    /// A socket connected to `addr` to send through, or `None` for the
    /// flushing socket.
    pub via: Option<RawFd>,
}

impl Target {
    /// Through a socket connected to `addr`. The socket must stay open
    /// while datagrams for it are queued.
    pub fn connected(addr: SocketAddr, via: RawFd) -> Self {
        Target {
            addr,
            via: Some(via),
        }
    }
}

impl From<SocketAddr> for Target {
    fn from(addr: SocketAddr) -> Self {
        Target { addr, via: None }
    }
}

/// Datagrams queued for `sendmmsg`: one call per run of datagrams that
/// leave through the same socket.
pub struct SendBatch {
    cap: usize,
    buf: Vec<u8>,
    lens: Vec<usize>,
    targets: Vec<Target>,
    addrs: Vec<(libc::sockaddr_storage, libc::socklen_t)>,
    /// Slots `[sent, count)` are queued.
    count: usize,
    sent: usize,
    iov: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: as for `RecvBatch`: the raw pointers are rewritten before every
// call and never dereferenced in between.
unsafe impl Send for SendBatch {}

impl std::fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBatch")
            .field("slots", &self.lens.len())
            .field("cap", &self.cap)
            .field("queued", &(self.count - self.sent))
            .finish()
    }
}

/// What [`SendBatch::flush`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flushed {
    /// Datagrams the kernel took.
    pub sent: usize,
    /// Datagrams the kernel refused with an error other than "would block";
    /// they are dropped from the batch (the reliability protocol above
    /// treats them like losses).
    pub failed: usize,
    /// The socket's send buffer is full: what is left stays queued until
    /// the socket is writable.
    pub blocked: bool,
    /// A send reported an error the network sent back for an earlier
    /// datagram (ICMP unreachable); read it with [`read_error_queue`] on
    /// the socket that sent that datagram (the flushing one or a
    /// [`Target`]'s connected one).
    pub icmp: bool,
}

impl SendBatch {
    /// Room for `slots` datagrams of up to `cap` bytes each (both at least 1).
    pub fn new(slots: usize, cap: usize) -> Self {
        let slots = slots.max(1);
        let cap = cap.max(1);
        SendBatch {
            cap,
            buf: vec![0; slots * cap],
            lens: vec![0; slots],
            targets: vec![Target::from(SocketAddr::from(([0, 0, 0, 0], 0))); slots],
            // SAFETY: plain old data, all-zero is valid.
            addrs: vec![(unsafe { std::mem::zeroed() }, 0); slots],
            count: 0,
            sent: 0,
            iov: Vec::with_capacity(slots),
            // SAFETY: plain old data, overwritten before use.
            hdrs: vec![unsafe { std::mem::zeroed() }; slots],
        }
    }

    /// Bytes one slot holds.
    pub fn slot_len(&self) -> usize {
        self.cap
    }

    /// No room for another datagram until [`flush`](Self::flush).
    pub fn is_full(&self) -> bool {
        self.count == self.lens.len()
    }

    /// Nothing queued.
    pub fn is_empty(&self) -> bool {
        self.count == self.sent
    }

    /// The next free slot, to write a datagram into before
    /// [`commit`](Self::commit); `None` when full.
    pub fn slot(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        let start = self.count * self.cap;
        Some(&mut self.buf[start..start + self.cap])
    }

    /// Queue the first `len` bytes of the slot returned by
    /// [`slot`](Self::slot) for `dst`. Ignored when full.
    pub fn commit(&mut self, len: usize, dst: impl Into<Target>) {
        if self.is_full() {
            return;
        }
        let i = self.count;
        let dst = dst.into();
        self.lens[i] = len.min(self.cap);
        self.targets[i] = dst;
        if dst.via.is_none() {
            self.addrs[i] = std_to_sockaddr(dst.addr);
        }
        self.count += 1;
    }

    /// Copy `data` (truncated to a slot) into the batch for `dst`. Returns
    /// false when full.
    pub fn push(&mut self, data: &[u8], dst: impl Into<Target>) -> bool {
        let Some(slot) = self.slot() else {
            return false;
        };
        let n = data.len().min(slot.len());
        portals_copy::copy(&mut slot[..n], &data[..n]);
        self.commit(n, dst);
        true
    }

    /// Number of datagrams queued.
    pub fn queued_len(&self) -> usize {
        self.count - self.sent
    }

    /// The bytes and destination of queued datagram `i` (0 = oldest queued).
    pub fn queued(&self, i: usize) -> Option<(&[u8], Target)> {
        let k = self.sent + i;
        if k >= self.count {
            return None;
        }
        let start = k * self.cap;
        Some((&self.buf[start..start + self.lens[k]], self.targets[k]))
    }

    /// Drop the most recently queued datagram (not yet flushed).
    pub fn pop_last(&mut self) {
        if self.count > self.sent {
            self.count -= 1;
        }
    }

    /// Send what is queued without blocking: datagrams to an address on
    /// `fd`, the others through their connected socket. A socket that is
    /// full stops the flush there, keeping the order of what is left.
    pub fn flush(&mut self, fd: RawFd) -> Flushed {
        let mut out = Flushed::default();
        let mut icmp_retries = 0;
        while self.sent < self.count {
            let first = self.sent;
            let via = self.targets[first].via;
            let n = self.targets[first..self.count]
                .iter()
                .take_while(|t| t.via == via)
                .count();
            self.iov.clear();
            for k in first..first + n {
                let start = k * self.cap;
                self.iov.push(libc::iovec {
                    iov_base: self.buf[start..].as_mut_ptr().cast(),
                    iov_len: self.lens[k],
                });
            }
            for j in 0..n {
                let k = first + j;
                let h = &mut self.hdrs[j];
                // A connected socket must get no address, or the kernel
                // looks the route up again.
                (h.msg_hdr.msg_name, h.msg_hdr.msg_namelen) = match via {
                    Some(_) => (std::ptr::null_mut(), 0),
                    None => (
                        (&mut self.addrs[k].0 as *mut libc::sockaddr_storage).cast(),
                        self.addrs[k].1,
                    ),
                };
                h.msg_hdr.msg_iov = &mut self.iov[j];
                h.msg_hdr.msg_iovlen = 1;
                h.msg_hdr.msg_control = std::ptr::null_mut();
                h.msg_hdr.msg_controllen = 0;
                h.msg_hdr.msg_flags = 0;
                h.msg_len = 0;
            }
            // SAFETY: the first `n` headers are initialised and point into
            // `addrs` (or carry no address), `iov` and `buf`, live and
            // unaliased during the call. A stale descriptor in `via` makes
            // the call fail, not touch memory.
            let r = unsafe {
                libc::sendmmsg(
                    via.unwrap_or(fd),
                    self.hdrs.as_mut_ptr(),
                    n as u32,
                    libc::MSG_DONTWAIT,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => {
                        out.blocked = true;
                        return out;
                    }
                    // An error reported for an *earlier* datagram (with
                    // IP_RECVERR, the kernel fails the next call once per
                    // ICMP error); this batch was not sent. Try again.
                    _ if is_icmp_error(&e) && icmp_retries < 8 => {
                        icmp_retries += 1;
                        out.icmp = true;
                        continue;
                    }
                    // ENOBUFS and friends on loopback mean the datagram is
                    // lost, exactly like a drop on the wire; ECONNREFUSED
                    // reports an earlier datagram's ICMP error. Skip one and
                    // carry on.
                    _ => {
                        out.failed += 1;
                        self.sent += 1;
                        continue;
                    }
                }
            }
            self.sent += r as usize;
            out.sent += r as usize;
        }
        self.count = 0;
        self.sent = 0;
        out
    }
}

/// Errors the kernel reports on a UDP socket because the network answered
/// an earlier datagram with ICMP.
pub fn is_icmp_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EHOSTDOWN)
    )
}

/// Ask the kernel to queue the ICMP errors that come back for this UDP
/// socket's datagrams (`IP_RECVERR`/`IPV6_RECVERR`), with the address each
/// failed datagram was sent to, for [`read_error_queue`].
pub fn enable_error_queue(fd: RawFd, ipv6: bool) -> io::Result<()> {
    let on: libc::c_int = 1;
    let (level, opt) = if ipv6 {
        (libc::SOL_IPV6, libc::IPV6_RECVERR)
    } else {
        (libc::SOL_IP, libc::IP_RECVERR)
    };
    // SAFETY: passes a pointer to a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Drain the socket's error queue: for each queued error, the address the
/// failed datagram was sent to and the error (`ECONNREFUSED` for ICMP port
/// unreachable: no process receives at that address). Never blocks.
pub fn read_error_queue(fd: RawFd, out: &mut Vec<(SocketAddr, i32)>) -> io::Result<()> {
    // The failed datagram's own bytes come back too; its beginning is enough.
    let mut data = [0u8; 64];
    let mut control = [0u64; 64];
    for _ in 0..1024 {
        // SAFETY: plain old data, all-zero is valid.
        let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        // SAFETY: plain old data; the pointers are set below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: `msg` points at live buffers (`name`, `data` through
        // `iov`, `control`) of the sizes it states.
        let r = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(()),
                io::ErrorKind::Interrupted => continue,
                _ => Err(e),
            };
        }
        let Some(addr) = sockaddr_to_std(&name) else {
            continue;
        };
        // SAFETY: the CMSG macros walk the control buffer the kernel just
        // filled, within `msg_controllen`; each header they return points
        // inside it.
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !cmsg.is_null() {
            // SAFETY: non-null headers from CMSG_FIRSTHDR/NXTHDR are valid.
            let c = unsafe { &*cmsg };
            let ours = (c.cmsg_level == libc::SOL_IP && c.cmsg_type == libc::IP_RECVERR)
                || (c.cmsg_level == libc::SOL_IPV6 && c.cmsg_type == libc::IPV6_RECVERR);
            if ours {
                // SAFETY: IP_RECVERR control data starts with a
                // sock_extended_err; read it unaligned, as control data
                // need not be aligned for it.
                let ee = unsafe {
                    std::ptr::read_unaligned(
                        libc::CMSG_DATA(cmsg).cast::<libc::sock_extended_err>(),
                    )
                };
                out.push((addr, ee.ee_errno as i32));
            }
            // SAFETY: as above.
            cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
        }
    }
    Ok(())
}

fn sockaddr_to_std(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match s.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which
            // fits in (and is no more aligned than) sockaddr_storage.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn std_to_sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: plain old data, all-zero is valid.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_in fits in sockaddr_storage, which is at
            // least as aligned; we write through a pointer to our own local.
            let p = unsafe {
                &mut *(&mut s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            p.sin_family = libc::AF_INET as libc::sa_family_t;
            p.sin_port = v4.port().to_be();
            p.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            (
                s,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above, for sockaddr_in6.
            let p = unsafe {
                &mut *(&mut s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            p.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            p.sin6_port = v6.port().to_be();
            p.sin6_addr.s6_addr = v6.ip().octets();
            p.sin6_flowinfo = v6.flowinfo();
            p.sin6_scope_id = v6.scope_id();
            (
                s,
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    #[test]
    fn addresses_round_trip() {
        for a in [
            "127.0.0.1:4000".parse::<SocketAddr>().unwrap(),
            "[::1]:65535".parse().unwrap(),
            "10.1.2.3:1".parse().unwrap(),
        ] {
            let (s, _) = std_to_sockaddr(a);
            assert_eq!(sockaddr_to_std(&s), Some(a));
        }
    }

    /// Receive exactly `n` datagrams from `rx` (blocking, bounded), with
    /// their sources.
    fn recv_n(rx: &UdpSocket, n: usize) -> Vec<(Vec<u8>, SocketAddr)> {
        rx.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 64];
        (0..n)
            .map(|_| {
                let (len, from) = rx.recv_from(&mut buf).unwrap();
                (buf[..len].to_vec(), from)
            })
            .collect()
    }

    #[test]
    fn connected_targets_leave_through_their_socket_in_order() {
        let (a, b) = (
            UdpSocket::bind("127.0.0.1:0").unwrap(),
            UdpSocket::bind("127.0.0.1:0").unwrap(),
        );
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        let link = UdpSocket::bind("127.0.0.1:0").unwrap();
        link.connect(b.local_addr().unwrap()).unwrap();
        let (to_a, to_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let via_b = Target::connected(to_b, link.as_raw_fd());
        let mut out = SendBatch::new(8, 64);
        // Runs of both kinds, interleaved: three `sendmmsg` calls.
        assert!(out.push(b"a1", to_a));
        assert!(out.push(b"b1", via_b));
        assert!(out.push(b"b2", via_b));
        assert!(out.push(b"a2", to_a));
        assert_eq!(out.queued(1), Some((&b"b1"[..], via_b)));
        let f = out.flush(plain.as_raw_fd());
        assert_eq!(f.sent, 4, "{f:?}");
        assert!(out.is_empty());
        let from_plain = plain.local_addr().unwrap();
        let from_link = link.local_addr().unwrap();
        assert_eq!(
            recv_n(&a, 2),
            vec![(b"a1".to_vec(), from_plain), (b"a2".to_vec(), from_plain)]
        );
        assert_eq!(
            recv_n(&b, 2),
            vec![(b"b1".to_vec(), from_link), (b"b2".to_vec(), from_link)]
        );
    }

    #[test]
    fn a_connected_target_is_sent_without_an_address() {
        // The address of a connected target only labels it: the datagram
        // goes wherever its socket is connected. (Were the address passed
        // to the kernel, it would go to `decoy`.)
        let decoy = UdpSocket::bind("127.0.0.1:0").unwrap();
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        let link = UdpSocket::bind("127.0.0.1:0").unwrap();
        link.connect(peer.local_addr().unwrap()).unwrap();
        let mut out = SendBatch::new(2, 16);
        out.push(
            b"x",
            Target::connected(decoy.local_addr().unwrap(), link.as_raw_fd()),
        );
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(out.flush(plain.as_raw_fd()).sent, 1);
        assert_eq!(
            recv_n(&peer, 1),
            vec![(b"x".to_vec(), link.local_addr().unwrap())]
        );
        decoy.set_nonblocking(true).unwrap();
        assert!(decoy.recv_from(&mut [0u8; 16]).is_err());
    }

    #[test]
    fn batches_move_many_datagrams_per_call_and_flag_truncation() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dst = rx.local_addr().unwrap();
        let mut out = SendBatch::new(8, 64);
        for i in 0..5u8 {
            assert!(out.push(&[i; 10], dst));
        }
        // A datagram written in place, longer than the receiver's slots.
        let slot = out.slot().unwrap();
        slot[..40].fill(9);
        out.commit(40, dst);
        assert_eq!(
            out.queued(5).map(|(d, a)| (d.len(), a)),
            Some((40, Target::from(dst)))
        );
        let f = out.flush(tx.as_raw_fd());
        assert_eq!(
            f,
            Flushed {
                sent: 6,
                ..Flushed::default()
            }
        );
        assert!(out.is_empty());

        let mut inb = RecvBatch::new(4, 32);
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while got.len() < 6 && std::time::Instant::now() < deadline {
            let n = inb.recv(rx.as_raw_fd()).unwrap();
            assert!(n <= 4);
            for i in 0..n {
                let (d, from, trunc) = inb.get(i).unwrap();
                assert_eq!(from, Some(tx.local_addr().unwrap()));
                got.push((d.to_vec(), trunc));
            }
        }
        assert_eq!(got.len(), 6);
        for (i, (d, trunc)) in got.iter().take(5).enumerate() {
            assert_eq!(d, &vec![i as u8; 10]);
            assert!(!trunc);
        }
        assert_eq!(got[5], (vec![9u8; 32], true));
        assert_eq!(inb.recv(rx.as_raw_fd()).unwrap(), 0, "nothing left");
    }

    #[test]
    fn a_reused_slot_reports_its_new_datagram_only_even_after_a_move() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let other = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dst = rx.local_addr().unwrap();
        let recv_one = |b: &mut RecvBatch| -> (Vec<u8>, Option<SocketAddr>, bool) {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                assert!(std::time::Instant::now() < deadline, "no datagram");
                if b.recv(rx.as_raw_fd()).unwrap() == 1 {
                    let (d, from, trunc) = b.get(0).unwrap();
                    return (d.to_vec(), from, trunc);
                }
            }
        };
        let mut inb = RecvBatch::new(2, 16);
        tx.send_to(&[7; 40], dst).unwrap();
        assert_eq!(
            recv_one(&mut inb),
            (vec![7; 16], Some(tx.local_addr().unwrap()), true)
        );
        // The batch moves to another thread; slot 0 takes a short datagram
        // from another sender: not truncated, its own length and address.
        let mut inb = std::thread::spawn(move || inb).join().unwrap();
        other.send_to(&[1, 2, 3], dst).unwrap();
        assert_eq!(
            recv_one(&mut inb),
            (vec![1, 2, 3], Some(other.local_addr().unwrap()), false)
        );
        assert_eq!(inb.recv(rx.as_raw_fd()).unwrap(), 0);
        assert!(inb.get(0).is_none(), "an empty call leaves nothing to read");
    }

    #[test]
    fn recv_up_to_takes_no_more_than_asked_and_leaves_the_rest() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dst = rx.local_addr().unwrap();
        for i in 1..=3u8 {
            tx.send_to(&[i], dst).unwrap();
        }
        let mut inb = RecvBatch::new(8, 16);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut first = 0;
        while first == 0 {
            assert!(std::time::Instant::now() < deadline, "nothing arrived");
            first = inb.recv_up_to(rx.as_raw_fd(), 1).unwrap();
        }
        assert_eq!(first, 1);
        assert_eq!(inb.get(0).unwrap().0, &[1]);
        assert!(inb.get(1).is_none());
        let mut rest = Vec::new();
        while rest.len() < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "the rest did not arrive"
            );
            let n = inb.recv(rx.as_raw_fd()).unwrap();
            rest.extend((0..n).map(|k| inb.get(k).unwrap().0.to_vec()));
        }
        assert_eq!(rest, vec![vec![2], vec![3]]);
    }

    /// Every slot starts on a page, whatever the slot size, and datagrams
    /// of every slot come back whole: large ones (a 60 KB payload) are
    /// what the kernel copies slowly into a slot off a page boundary.
    #[test]
    fn every_slot_starts_on_a_page_and_holds_its_datagram() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dst = rx.local_addr().unwrap();
        let len = 61_440;
        let cap = len + 100;
        for i in 0..3u8 {
            tx.send_to(&vec![i + 1; len], dst).unwrap();
        }
        let mut inb = RecvBatch::new(3, cap);
        assert!(inb
            .iov
            .iter()
            .all(|v| v.iov_base as usize % SLOT_ALIGN == 0 && v.iov_len == cap));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut got = Vec::new();
        while got.len() < 3 {
            assert!(std::time::Instant::now() < deadline, "datagrams missing");
            let n = inb.recv(rx.as_raw_fd()).unwrap();
            for k in 0..n {
                let (d, _, truncated) = inb.get(k).unwrap();
                assert_eq!(d.as_ptr() as usize % SLOT_ALIGN, 0, "slot {k}");
                assert!(!truncated);
                got.push(d.to_vec());
            }
        }
        for (i, d) in got.iter().enumerate() {
            assert_eq!(d.len(), len);
            assert!(d.iter().all(|&b| b == i as u8 + 1), "datagram {i}");
        }
    }

    #[test]
    fn port_unreachable_comes_back_with_the_dead_address() {
        let gone = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dead = gone.local_addr().unwrap();
        drop(gone);
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_error_queue(tx.as_raw_fd(), false).unwrap();
        let mut out = SendBatch::new(4, 64);
        out.push(b"anyone?", dead);
        assert_eq!(out.flush(tx.as_raw_fd()).sent, 1);
        let mut errs = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while errs.is_empty() && std::time::Instant::now() < deadline {
            read_error_queue(tx.as_raw_fd(), &mut errs).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(errs, vec![(dead, libc::ECONNREFUSED)]);
        // The pending error is reported once more by the next send, which
        // the batch retries instead of dropping a datagram.
        let live = UdpSocket::bind("127.0.0.1:0").unwrap();
        out.push(b"hello", live.local_addr().unwrap());
        let f = out.flush(tx.as_raw_fd());
        assert_eq!((f.sent, f.failed), (1, 0), "{f:?}");
        let mut b = [0u8; 8];
        let (n, _) = live.recv_from(&mut b).unwrap();
        assert_eq!(&b[..n], b"hello");
    }
}
