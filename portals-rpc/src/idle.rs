//! Idle service threads: a thread that just finished a request waits for
//! the next one in the network interface (it is running already, and its
//! spin there catches its client's next request); of the threads that
//! found nothing, only one stays in the interface and the others park on
//! the service's own condition variable until a thread takes work and
//! nobody is left waiting for the next request.
//!
//! Every idle thread blocking in the interface made each event of the
//! interface (a bulk chunk's reply, a reply's send) wake all of them, and
//! each request's arrival sent all of them through the interface's spin
//! window, only for one to find the request: on a 2-core host those spins
//! took the core the executing thread needed.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

#[derive(Default)]
struct State {
    /// Threads waiting in the interface.
    waiting: usize,
    /// Threads parked here.
    parked: usize,
}

/// The idle threads of one service.
#[derive(Default)]
pub(crate) struct Idle {
    st: Mutex<State>,
    cv: Condvar,
}

impl Idle {
    fn state(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A thread found no work. With `hot` (it just finished a request) or
    /// when no thread waits in the interface, it waits there (`wait`
    /// runs); else it parks until a thread takes work with nobody left
    /// waiting, or `nap` passes. Either way the caller looks for work
    /// again afterwards.
    pub(crate) fn wait<E>(
        &self,
        hot: bool,
        nap: Duration,
        wait: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        let mut st = self.state();
        if hot || st.waiting == 0 {
            st.waiting += 1;
            drop(st);
            let r = wait();
            self.state().waiting -= 1;
            return r;
        }
        st.parked += 1;
        let mut st = self
            .cv
            .wait_timeout(st, nap)
            .unwrap_or_else(|p| p.into_inner())
            .0;
        st.parked -= 1;
        Ok(())
    }

    /// A thread took work: if nobody waits in the interface now, wake one
    /// parked thread to wait (or take the next request) in its place.
    pub(crate) fn took_work(&self) {
        let st = self.state();
        if st.waiting == 0 && st.parked > 0 {
            self.cv.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Instant;

    const LONG: Duration = Duration::from_secs(30);

    #[test]
    fn only_one_thread_waits_in_the_interface_the_others_park() {
        let idle = Idle::default();
        let inside = AtomicUsize::new(0);
        let (entered, entered_rx) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let (idle, inside) = (&idle, &inside);
        std::thread::scope(|s| {
            let waiter = s.spawn(move || {
                idle.wait(false, LONG, || {
                    inside.fetch_add(1, Ordering::SeqCst);
                    entered.send(()).ok();
                    release_rx.recv_timeout(LONG).ok();
                    Ok::<(), ()>(())
                })
            });
            entered_rx.recv_timeout(LONG).expect("first thread waits");
            // Three more idle threads: none of them may enter the
            // interface while the first waits; each parks until woken.
            let parkers: Vec<_> = (0..3)
                .map(|_| {
                    s.spawn(|| {
                        idle.wait(false, LONG, || {
                            inside.fetch_add(1, Ordering::SeqCst);
                            Ok::<(), ()>(())
                        })
                    })
                })
                .collect();
            let t0 = Instant::now();
            while idle.state().parked < 3 {
                assert!(t0.elapsed() < LONG, "threads did not park");
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(inside.load(Ordering::SeqCst), 1);
            // The waiter returns and takes work: exactly one parked thread
            // is woken to take the wait over.
            release.send(()).ok();
            waiter.join().expect("waiter").expect("wait");
            idle.took_work();
            let t0 = Instant::now();
            while idle.state().parked > 2 {
                assert!(t0.elapsed() < LONG, "no parked thread woken");
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(idle.state().parked, 2, "took_work woke more than one");
            // The rest leave by being woken one by one.
            for _ in 0..2 {
                idle.took_work();
                std::thread::sleep(Duration::from_millis(5));
            }
            for p in parkers {
                p.join().expect("parker").expect("wait");
            }
        });
        assert_eq!(idle.state().parked, 0);
        assert_eq!(idle.state().waiting, 0);
    }

    #[test]
    fn a_thread_that_just_finished_a_request_waits_in_the_interface_beside_another() {
        let idle = Idle::default();
        let (entered, entered_rx) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let idle = &idle;
        std::thread::scope(|s| {
            let cold = s.spawn(move || {
                idle.wait(false, LONG, || {
                    entered.send(()).ok();
                    release_rx.recv_timeout(LONG).ok();
                    Ok::<(), ()>(())
                })
            });
            entered_rx.recv_timeout(LONG).expect("first thread waits");
            let mut ran = false;
            idle.wait(true, LONG, || {
                ran = true;
                Ok::<(), ()>(())
            })
            .expect("wait");
            assert!(ran, "a hot thread parked instead of waiting");
            assert_eq!(idle.state().parked, 0);
            release.send(()).ok();
            cold.join().expect("cold").expect("wait");
        });
    }

    #[test]
    fn a_freed_slot_is_taken_by_the_next_idle_thread() {
        let idle = Idle::default();
        let mut ran = 0;
        for _ in 0..3 {
            idle.wait(false, LONG, || {
                ran += 1;
                Ok::<(), ()>(())
            })
            .expect("wait");
        }
        assert_eq!(ran, 3, "a thread alone always waits in the interface");
        let failed = idle.wait(false, LONG, || Err::<(), _>("interface failed"));
        assert_eq!(failed, Err("interface failed"));
        assert_eq!(idle.state().waiting, 0, "a failed wait frees the slot");
    }
}
