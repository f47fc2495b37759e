//! Which namespaces changed since a controller last looked. Watch events
//! mark the namespace of the object they carry; a relist (or anything whose
//! effect cannot be pinned to one namespace) marks everything. The
//! reconciler then plans only the marked namespaces instead of the whole
//! cluster on every pod update.

use std::collections::BTreeSet;
use std::sync::Mutex;

use tokio::sync::watch;

/// What changed: every namespace, or just these.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Marks {
    pub all: bool,
    pub namespaces: BTreeSet<String>,
}

impl Marks {
    pub fn is_empty(&self) -> bool {
        !self.all && self.namespaces.is_empty()
    }

    /// Whether namespace `ns` is to be planned.
    pub fn covers(&self, ns: &str) -> bool {
        self.all || self.namespaces.contains(ns)
    }
}

/// A set of marks shared by the watch tasks (writers) and one controller
/// (the reader, which takes them). Marking wakes the reader.
pub struct Dirty {
    marks: Mutex<Marks>,
    wake: watch::Sender<u64>,
}

impl Default for Dirty {
    /// Starts with everything marked: the first pass plans the whole cluster.
    fn default() -> Self {
        let (wake, _) = watch::channel(0);
        Dirty {
            marks: Mutex::new(Marks {
                all: true,
                namespaces: BTreeSet::new(),
            }),
            wake,
        }
    }
}

impl Dirty {
    pub fn mark(&self, ns: &str) {
        if let Ok(mut m) = self.marks.lock() {
            if m.all || !m.namespaces.insert(ns.to_string()) {
                return; // already marked: no need to wake anyone again
            }
        }
        self.wake.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub fn mark_all(&self) {
        if let Ok(mut m) = self.marks.lock() {
            m.all = true;
            m.namespaces.clear();
        }
        self.wake.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The marks so far, leaving none behind.
    pub fn take(&self) -> Marks {
        match self.marks.lock() {
            Ok(mut m) => std::mem::take(&mut *m),
            // A poisoned lock loses nothing worse than a full pass.
            Err(_) => Marks {
                all: true,
                namespaces: BTreeSet::new(),
            },
        }
    }

    /// Marks `ns` once `delay` has passed: for a change no watch event will
    /// announce (a deleted StatefulSet pod stops counting as leaving after
    /// `cache::LEAVING_FOR`). Outside a tokio runtime (unit tests) it does
    /// nothing; the reconciler's resync still covers it.
    pub fn mark_after(self: &std::sync::Arc<Self>, ns: &str, delay: std::time::Duration) {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let dirty = std::sync::Arc::downgrade(self);
            let ns = ns.to_string();
            rt.spawn(async move {
                tokio::time::sleep(delay).await;
                if let Some(d) = dirty.upgrade() {
                    d.mark(&ns);
                }
            });
        }
    }

    /// Changes whenever something is marked.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.wake.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_accumulate_until_taken_and_a_full_mark_covers_all() {
        let d = Dirty::default();
        assert!(d.take().all, "the first pass plans everything");
        assert!(d.take().is_empty());
        let rx = d.subscribe();
        d.mark("a");
        d.mark("b");
        assert!(rx.has_changed().unwrap());
        let m = d.take();
        assert!(!m.all && m.covers("a") && m.covers("b") && !m.covers("c"));
        assert!(d.take().is_empty(), "taken marks are gone");
        d.mark("a");
        d.mark_all();
        let m = d.take();
        assert!(m.all && m.covers("zzz"));
    }

    #[test]
    fn marking_a_marked_namespace_does_not_wake_again() {
        let d = Dirty::default();
        let _ = d.take();
        let mut rx = d.subscribe();
        d.mark("a");
        rx.borrow_and_update();
        d.mark("a");
        assert!(!rx.has_changed().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_mark_comes_after_its_delay() {
        let d = std::sync::Arc::new(Dirty::default());
        let _ = d.take();
        d.mark_after("a", std::time::Duration::from_secs(15));
        tokio::time::sleep(std::time::Duration::from_secs(14)).await;
        assert!(d.take().is_empty(), "not before its delay");
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let m = d.take();
        assert!(!m.all && m.covers("a"));
    }
}
