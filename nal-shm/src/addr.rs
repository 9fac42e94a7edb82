//! What a peer needs to reach an endpoint: its operating-system pid and a
//! random nonce, which together with the job key name its inbox.

use std::fmt;
use std::str::FromStr;

/// The address of a shared-memory endpoint. Text form
/// `shm:<pid>:<nonce as 32 hex digits>`, e.g.
/// `shm:4242:0123456789abcdef0123456789abcdef` (no whitespace or commas, so
/// it fits in any key-value store a launcher offers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShmAddr {
    /// The process's operating-system pid.
    pub pid: u32,
    /// A random number drawn by [`crate::ShmEndpoint::bind`]; unguessable,
    /// so that no process outside the job can name the inbox.
    pub nonce: u128,
}

/// Why a text is not a [`ShmAddr`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    /// It does not start with `shm:`.
    #[error("a shared-memory address starts with \"shm:\"")]
    Prefix,
    /// The pid is missing, not a decimal number, or 0.
    #[error("bad pid in a shared-memory address")]
    Pid,
    /// The nonce is not exactly 32 hex digits.
    #[error("bad nonce in a shared-memory address (32 hex digits)")]
    Nonce,
}

impl fmt::Display for ShmAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shm:{}:{:032x}", self.pid, self.nonce)
    }
}

impl FromStr for ShmAddr {
    type Err = AddrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s.strip_prefix("shm:").ok_or(AddrError::Prefix)?;
        let (pid, nonce) = rest.split_once(':').ok_or(AddrError::Pid)?;
        if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AddrError::Pid);
        }
        let pid: u32 = pid.parse().map_err(|_| AddrError::Pid)?;
        if pid == 0 {
            return Err(AddrError::Pid);
        }
        if nonce.len() != 32 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(AddrError::Nonce);
        }
        let nonce = u128::from_str_radix(nonce, 16).map_err(|_| AddrError::Nonce)?;
        Ok(ShmAddr { pid, nonce })
    }
}

/// 128 random bits from the kernel.
pub(crate) fn random_nonce() -> std::io::Result<u128> {
    let mut b = [0u8; 16];
    let mut got = 0;
    while got < b.len() {
        // SAFETY: writes at most the rest of `b`.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), b.len() - got, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += n as usize;
    }
    Ok(u128::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_round_trips() {
        for a in [
            ShmAddr { pid: 1, nonce: 0 },
            ShmAddr {
                pid: u32::MAX,
                nonce: u128::MAX,
            },
            ShmAddr {
                pid: 4242,
                nonce: random_nonce().unwrap(),
            },
        ] {
            let s = a.to_string();
            assert!(!s.contains([' ', ',', '\n']), "{s}");
            assert_eq!(s.parse::<ShmAddr>(), Ok(a), "{s}");
        }
        assert_eq!(
            "shm:12:0123456789abcdef0123456789ABCDEF".parse::<ShmAddr>(),
            Ok(ShmAddr {
                pid: 12,
                nonce: 0x0123456789abcdef0123456789abcdef
            })
        );
    }

    #[test]
    fn malformed_text_is_a_typed_error() {
        let zeros = "0".repeat(32);
        for (s, e) in [
            ("".to_string(), AddrError::Prefix),
            ("tcp:1:00".to_string(), AddrError::Prefix),
            ("shm:".to_string(), AddrError::Pid),
            (format!("shm::{zeros}"), AddrError::Pid),
            (format!("shm:+1:{zeros}"), AddrError::Pid),
            (format!("shm:0:{zeros}"), AddrError::Pid),
            (format!("shm:99999999999:{zeros}"), AddrError::Pid),
            ("shm:1:abc".to_string(), AddrError::Nonce),
            (format!("shm:1:{zeros}0"), AddrError::Nonce),
            (format!("shm:1:{}g", "0".repeat(31)), AddrError::Nonce),
            (format!("shm:1:{zeros}:x"), AddrError::Nonce),
            (format!("shm:1: {}", "0".repeat(31)), AddrError::Nonce),
        ] {
            assert_eq!(s.parse::<ShmAddr>(), Err(e), "{s:?}");
        }
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(random_nonce().unwrap(), random_nonce().unwrap());
    }
}
