//! Which namespaces the reconciler plans next, and when (pure: the caller
//! passes the clock, so the rules are unit tests).
//!
//! A namespace waits in a queue until a job may start for it, one job per
//! namespace at a time: a namespace marked while its job runs waits for that
//! job to end. Namespaces marked by a change (a watch event, a backoff that
//! is over, a job that ran out of its share) come before those of the
//! resync sweep. A job counts against [`Limits::fast`] only for its first
//! [`Limits::slow_after`]: a namespace whose writes hang (an admission
//! webhook there that never answers, each write waiting for its timeout)
//! keeps its job, not a slot, so it holds back no other namespace (a
//! step-aside among them). [`Limits::total`] bounds all jobs at once. A
//! namespace's next job waits [`Limits::restart_after`] after its last one
//! ended, for the watch events of that job's last writes (planned from a
//! cache without them, they would be written again, and refused). A sweep
//! entry still waiting at the next sweep joins the marked ones, so a steady
//! stream of changes never holds the resync (an orphan PDB's grace) back.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Jobs younger than `slow_after` running at once.
    pub fast: usize,
    /// Jobs running at once, slow ones included.
    pub total: usize,
    /// Age after which a job no longer holds a slot of `fast`.
    pub slow_after: Duration,
    /// Time between the end of a namespace's job and the start of its next.
    pub restart_after: Duration,
}

/// Where a queued namespace came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A change: served first.
    Marked,
    /// The resync sweep.
    Sweep,
}

#[derive(Debug)]
pub struct Schedule {
    limits: Limits,
    marked: VecDeque<String>,
    /// May hold names no longer queued as [`Origin::Sweep`] (marked since,
    /// or started): skipped when reached.
    sweep: VecDeque<String>,
    queued: HashMap<String, Origin>,
    /// Namespace → when its job started.
    running: HashMap<String, Instant>,
    /// Namespace → when its last job ended (kept for `restart_after`).
    ended: HashMap<String, Instant>,
}

impl Schedule {
    pub fn new(limits: Limits) -> Self {
        Schedule {
            limits,
            marked: VecDeque::new(),
            sweep: VecDeque::new(),
            queued: HashMap::new(),
            running: HashMap::new(),
            ended: HashMap::new(),
        }
    }

    /// `ns` changed: queued among the marked (moved there from the sweep).
    pub fn mark(&mut self, ns: &str) {
        match self.queued.get(ns) {
            Some(Origin::Marked) => {}
            _ => {
                self.queued.insert(ns.to_string(), Origin::Marked);
                self.marked.push_back(ns.to_string());
            }
        }
    }

    /// The resync: every namespace of `all` not queued yet, after the
    /// marked; one the last sweep queued that still waits joins the marked.
    pub fn sweep<'a>(&mut self, all: impl IntoIterator<Item = &'a str>) {
        let late: Vec<String> = self
            .sweep
            .iter()
            .filter(|n| self.queued.get(*n) == Some(&Origin::Sweep))
            .cloned()
            .collect();
        for ns in &late {
            self.mark(ns);
        }
        // Without the entries left behind by marks and starts.
        self.sweep.clear();
        for ns in all {
            if !self.queued.contains_key(ns) {
                self.queued.insert(ns.to_string(), Origin::Sweep);
                self.sweep.push_back(ns.to_string());
            }
        }
    }

    /// Whether `ns` may not start at `now`: its job runs, or ended less than
    /// `restart_after` ago.
    fn waits(&self, ns: &str, now: Instant) -> bool {
        self.running.contains_key(ns)
            || self
                .ended
                .get(ns)
                .is_some_and(|t| now.saturating_duration_since(*t) < self.limits.restart_after)
    }

    fn fast_running(&self, now: Instant) -> usize {
        self.running
            .values()
            .filter(|t| now.saturating_duration_since(**t) < self.limits.slow_after)
            .count()
    }

    fn has_room(&self, now: Instant) -> bool {
        self.fast_running(now) < self.limits.fast && self.running.len() < self.limits.total
    }

    /// Whether [`Schedule::start`] would start a job at `now`.
    #[cfg(test)]
    pub fn startable(&self, now: Instant) -> bool {
        self.has_room(now) && self.queued.keys().any(|ns| !self.waits(ns, now))
    }

    /// Takes the namespaces whose job starts at `now` (with where each came
    /// from), as many as the limits leave room for, in queue order. A
    /// namespace whose job still runs (or just ended) stays queued, in its
    /// place.
    pub fn start(&mut self, now: Instant) -> Vec<(String, Origin)> {
        let gap = self.limits.restart_after;
        self.ended
            .retain(|_, t| now.saturating_duration_since(*t) < gap);
        let mut out = Vec::new();
        let mut fast = self.fast_running(now);
        for origin in [Origin::Marked, Origin::Sweep] {
            let mut kept = VecDeque::new();
            loop {
                if fast >= self.limits.fast || self.running.len() >= self.limits.total {
                    break;
                }
                let queue = match origin {
                    Origin::Marked => &mut self.marked,
                    Origin::Sweep => &mut self.sweep,
                };
                let Some(ns) = queue.pop_front() else {
                    break;
                };
                if self.queued.get(&ns) != Some(&origin) {
                    continue; // a stale sweep entry: marked since, or started
                }
                if self.waits(&ns, now) {
                    kept.push_back(ns);
                    continue;
                }
                self.queued.remove(&ns);
                self.running.insert(ns.clone(), now);
                fast += 1;
                out.push((ns, origin));
            }
            let queue = match origin {
                Origin::Marked => &mut self.marked,
                Origin::Sweep => &mut self.sweep,
            };
            while let Some(ns) = kept.pop_back() {
                queue.push_front(ns);
            }
        }
        out
    }

    /// The job of `ns` ended at `now`.
    pub fn finished(&mut self, ns: &str, now: Instant) {
        self.running.remove(ns);
        self.ended.insert(ns.to_string(), now);
    }

    /// When something may start without a job ending, after `now`: a queued
    /// namespace's `restart_after` is over, or (a queued namespace waiting
    /// for a slot) the first of the full slots turns slow.
    pub fn next_wake(&self, now: Instant) -> Option<Instant> {
        let restart = self
            .queued
            .keys()
            .filter(|ns| !self.running.contains_key(*ns))
            .filter_map(|ns| self.ended.get(ns))
            .map(|t| *t + self.limits.restart_after)
            .filter(|at| *at > now)
            .min();
        let waiting = self.queued.keys().any(|ns| !self.running.contains_key(ns));
        let slot = if !waiting || self.running.len() >= self.limits.total || self.has_room(now) {
            None
        } else {
            self.running
                .values()
                .filter(|t| now.saturating_duration_since(**t) < self.limits.slow_after)
                .map(|t| *t + self.limits.slow_after)
                .min()
        };
        restart.into_iter().chain(slot).min()
    }

    #[cfg(test)]
    pub fn is_running(&self, ns: &str) -> bool {
        self.running.contains_key(ns)
    }

    /// Namespaces queued (their job not started).
    #[cfg(test)]
    pub fn queued(&self) -> usize {
        self.queued.len()
    }

    /// Leadership lost: nothing queued, no job (the caller drops them).
    pub fn clear(&mut self) {
        self.marked.clear();
        self.sweep.clear();
        self.queued.clear();
        self.running.clear();
        self.ended.clear();
    }
}

/// The namespaces a resync may leave out: each one's last job found nothing
/// to write or report and nothing waiting on the clock (an orphan PDB's
/// grace), and nothing marked it since. The resync is the safety net for a
/// change no watch event said, and a settled namespace's next change marks
/// it; planning every settled namespace again every resync was the bulk of
/// an idle reconciler's CPU. One resync in `full_every` still plans them all.
#[derive(Debug)]
pub struct Settled {
    set: HashSet<String>,
    resyncs: u32,
    full_every: u32,
}

impl Settled {
    pub fn new(full_every: u32) -> Self {
        Settled {
            set: HashSet::new(),
            resyncs: 0,
            full_every: full_every.max(1),
        }
    }

    /// `ns` was marked: planned, it is settled again only by that job.
    pub fn changed(&mut self, ns: &str) {
        self.set.remove(ns);
    }

    /// Everything was marked (a lead taken, a store's list done again).
    pub fn all_changed(&mut self) {
        self.set.clear();
    }

    /// A job of `ns` ended; `settled` as above. A job that ended before a
    /// mark taken since is followed by that mark's job, which says again.
    pub fn finished(&mut self, ns: &str, settled: bool) {
        if settled {
            self.set.insert(ns.to_string());
        } else {
            self.set.remove(ns);
        }
    }

    /// A resync over the namespaces `existing`: those it plans, all of them
    /// every `full_every` resyncs. Namespaces gone are forgotten.
    pub fn resync<'a>(&mut self, existing: &'a HashSet<String>) -> Vec<&'a str> {
        self.resyncs = self.resyncs.wrapping_add(1);
        if self.resyncs % self.full_every == 0 {
            self.set.clear();
        }
        self.set.retain(|ns| existing.contains(ns));
        let mut out: Vec<&str> = existing
            .iter()
            .map(String::as_str)
            .filter(|ns| !self.set.contains(*ns))
            .collect();
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn existing(names: &[&str]) -> HashSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_resync_leaves_out_settled_namespaces_until_they_change_or_a_full_one_comes() {
        let mut s = Settled::new(3);
        let all = existing(&["a", "b", "c"]);
        assert_eq!(s.resync(&all), ["a", "b", "c"], "nothing settled yet");
        s.finished("a", true);
        s.finished("b", true);
        s.finished("c", false);
        assert_eq!(s.resync(&all), ["c"]);
        s.changed("a");
        assert_eq!(s.resync(&all), ["a", "b", "c"], "the third: a full one");
        s.finished("a", true);
        s.finished("b", true);
        s.finished("c", true);
        assert_eq!(s.resync(&all), Vec::<&str>::new());
        // A settled namespace whose next job finds work is not settled.
        s.finished("b", false);
        assert_eq!(s.resync(&all), ["b"]);
        s.finished("b", true);
        s.all_changed();
        assert_eq!(
            s.resync(&all),
            ["a", "b", "c"],
            "the sixth, and all changed"
        );
    }

    #[test]
    fn namespaces_gone_are_forgotten_and_one_made_again_is_planned() {
        let mut s = Settled::new(100);
        let all = existing(&["a", "b"]);
        s.finished("a", true);
        s.finished("b", true);
        assert_eq!(s.resync(&existing(&["b"])), Vec::<&str>::new());
        assert_eq!(s.set.len(), 1, "a forgotten");
        assert_eq!(s.resync(&all), ["a"], "a made again under its name");
    }

    const LIMITS: Limits = Limits {
        fast: 2,
        total: 3,
        slow_after: Duration::from_secs(2),
        restart_after: Duration::ZERO,
    };

    fn names(started: &[(String, Origin)]) -> Vec<&str> {
        started.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn marked_namespaces_go_before_the_sweep_and_each_is_queued_once() {
        let mut s = Schedule::new(Limits { fast: 10, ..LIMITS });
        let t = Instant::now();
        s.sweep(["a", "b", "c"]);
        s.mark("c");
        s.mark("d");
        s.mark("d");
        assert_eq!(s.queued(), 4);
        let started = s.start(t);
        assert_eq!(names(&started), ["c", "d", "a"], "the limit of 3 jobs");
        let origins: Vec<Origin> = started.iter().map(|(_, o)| *o).collect();
        assert_eq!(origins, [Origin::Marked, Origin::Marked, Origin::Sweep]);
        s.finished("c", t);
        s.finished("d", t);
        s.sweep(["a", "b", "d", "e"]);
        assert_eq!(s.queued(), 4, "b queued once; a (running), d and e swept");
        let started = s.start(t);
        assert_eq!(names(&started), ["b", "d"]);
        assert_eq!(started[0].1, Origin::Marked, "b waited a whole sweep");
        s.finished("a", t);
        s.finished("b", t);
        s.finished("d", t);
        assert_eq!(
            names(&s.start(t)),
            ["a", "e"],
            "a after its job, in its place"
        );
        assert!(s.start(t).is_empty() && s.queued() == 0);
    }

    #[test]
    fn a_namespace_marked_while_its_job_runs_waits_for_it_in_its_place() {
        let mut s = Schedule::new(LIMITS);
        let t = Instant::now();
        s.mark("a");
        assert_eq!(names(&s.start(t)), ["a"]);
        s.mark("a");
        s.mark("b");
        assert!(s.is_running("a"));
        assert_eq!(names(&s.start(t)), ["b"], "a waits for its job");
        assert!(!s.startable(t), "b started, a still runs");
        s.finished("a", t);
        assert!(s.startable(t));
        assert_eq!(names(&s.start(t)), ["a"]);
        assert_eq!(s.queued(), 0);
    }

    #[test]
    fn a_slow_job_frees_its_slot_but_counts_in_the_total() {
        let mut s = Schedule::new(LIMITS);
        let t = Instant::now();
        for ns in ["hung-1", "hung-2", "ok", "late"] {
            s.mark(ns);
        }
        assert_eq!(names(&s.start(t)), ["hung-1", "hung-2"]);
        assert!(!s.startable(t + Duration::from_secs(1)));
        assert_eq!(
            s.next_wake(t + Duration::from_secs(1)),
            Some(t + LIMITS.slow_after),
            "woken when the first full slot turns slow"
        );
        let later = t + LIMITS.slow_after;
        assert_eq!(names(&s.start(later)), ["ok"], "the total of 3 jobs");
        assert_eq!(
            s.next_wake(later),
            None,
            "the total is full: a job's end frees room"
        );
        s.finished("ok", later);
        assert_eq!(names(&s.start(later)), ["late"]);
    }

    #[test]
    fn nothing_to_wake_for_with_room_or_nothing_queued() {
        let mut s = Schedule::new(LIMITS);
        let t = Instant::now();
        assert_eq!(s.next_wake(t), None);
        s.mark("a");
        assert_eq!(s.next_wake(t), None, "room now: start, no wait");
        s.start(t);
        s.mark("a");
        assert_eq!(s.next_wake(t), None, "only a, which waits for its own job");
    }

    #[test]
    fn clear_forgets_queue_and_jobs() {
        let mut s = Schedule::new(LIMITS);
        let t = Instant::now();
        s.sweep(["a", "b"]);
        s.mark("c");
        s.start(t);
        s.clear();
        assert!(!s.is_running("c") && s.queued() == 0 && s.start(t).is_empty());
        s.sweep(["a"]);
        assert_eq!(names(&s.start(t)), ["a"]);
    }

    #[test]
    fn a_namespace_starts_again_only_after_its_pause() {
        let gap = Duration::from_millis(500);
        let mut s = Schedule::new(Limits {
            restart_after: gap,
            ..LIMITS
        });
        let t = Instant::now();
        s.mark("a");
        s.start(t);
        s.mark("a");
        s.mark("b");
        let end = t + Duration::from_millis(100);
        s.finished("a", end);
        assert_eq!(names(&s.start(end)), ["b"], "a waits for its pause");
        assert!(!s.startable(end));
        assert_eq!(s.next_wake(end), Some(end + gap), "woken when it is over");
        assert_eq!(names(&s.start(end + gap)), ["a"]);
        assert_eq!(s.next_wake(end + gap), None);
    }

    #[test]
    fn a_sweep_entry_still_waiting_at_the_next_sweep_joins_the_marked() {
        let mut s = Schedule::new(Limits {
            fast: 1,
            total: 1,
            ..LIMITS
        });
        let t = Instant::now();
        s.sweep(["old"]);
        s.mark("busy-1");
        assert_eq!(names(&s.start(t)), ["busy-1"]);
        s.mark("busy-2");
        s.sweep(["old", "new"]);
        s.mark("busy-3");
        s.finished("busy-1", t);
        let mut order = Vec::new();
        for _ in 0..4 {
            let started = s.start(t);
            order.extend(started.iter().map(|(n, o)| (n.clone(), *o)));
            for (n, _) in started {
                s.finished(&n, t);
            }
        }
        let names: Vec<&str> = order.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["busy-2", "old", "busy-3", "new"]);
        assert_eq!(order[1].1, Origin::Marked, "old waited a whole sweep");
        assert_eq!(s.queued(), 0);
    }
}
