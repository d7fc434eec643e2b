//! The ledger's accounts as the database has them: a key's or group's figures loaded on
//! first use or read again after another process's change (on the writer thread, between
//! two commits, so no committed settle is missing from them), changed after a committed
//! admin write, or forgotten to be read again on next use.

use super::{Account, Books, GroupAccount, Hold, Ledger};
use crate::store::embedded::counters::Counters;
use crate::store::embedded::figures::{DurableHold, Figures, GroupFigures};
use crate::store::{KeyRecord, Micros};
use std::collections::HashMap;
use std::sync::atomic::Ordering;

impl Ledger {
    pub fn is_loaded(&self, key_id: &str) -> bool {
        self.books.lock().accounts.contains_key(key_id)
    }

    pub fn is_group_loaded(&self, group_id: &str) -> bool {
        self.books.lock().groups.contains_key(group_id)
    }

    /// The group a loaded key's record names.
    pub fn group_of(&self, key_id: &str) -> Option<String> {
        self.books
            .lock()
            .accounts
            .get(key_id)
            .and_then(|a| a.figures.group.clone())
    }

    /// Puts a key's account in memory, with its settled period spend and its durable
    /// holds (on the writer thread, between commits; the groups those holds are on are
    /// loaded first). An account already there is kept: it is at least as new.
    pub fn load(
        &self,
        key_id: &str,
        figures: Figures,
        periods: Vec<(String, i64, Micros)>,
        durable_holds: Vec<DurableHold>,
    ) {
        let now = self.clock.now();
        let mut guard = self.books.lock();
        let b = &mut *guard;
        if b.accounts.contains_key(key_id) {
            return;
        }
        let mut c = Counters::new(periods);
        let mut holds = HashMap::with_capacity(durable_holds.len());
        for d in durable_holds {
            let on = d.detail.on.map(Box::new);
            let h = Hold {
                amount: d.amount,
                expires: d.expires,
                tokens: d.detail.tokens,
                minute: d.detail.minute,
                on,
                // Only task holds are durable, and a task is a request in flight.
                counted: true,
            };
            let key_on = h.on.as_deref().map_or(&[][..], |o| &o.key[..]);
            c.hold(key_on, h.amount, now, h.counted);
            c.add_tokens(h.minute, h.tokens);
            if let Some(on) = h.on.as_deref() {
                if let Some(g) = on.group.as_ref().and_then(|g| b.groups.get_mut(g)) {
                    g.c.hold(&on.group_periods, h.amount, now, h.counted);
                    g.c.add_tokens(h.minute, h.tokens);
                }
            }
            b.next_expiry = b.next_expiry.min(h.expires);
            holds.insert(d.id, h);
        }
        self.live.fetch_add(holds.len(), Ordering::Relaxed);
        b.accounts.insert(
            key_id.to_string(),
            Account {
                figures,
                c,
                holds,
                lapsed: HashMap::new(),
            },
        );
    }

    /// Puts a group's account in memory (`None`: no such group), with its settled period
    /// spend. One already there is kept.
    pub fn load_group(
        &self,
        group_id: &str,
        figures: Option<GroupFigures>,
        periods: Vec<(String, i64, Micros)>,
    ) {
        let mut b = self.books.lock();
        if b.groups.contains_key(group_id) {
            return;
        }
        b.groups.insert(
            group_id.to_string(),
            GroupAccount {
                figures,
                c: Counters::new(periods),
            },
        );
    }

    /// The keys whose accounts are in memory.
    pub fn loaded(&self) -> Vec<String> {
        self.books.lock().accounts.keys().cloned().collect()
    }

    /// The groups whose accounts are in memory.
    pub fn loaded_groups(&self) -> Vec<String> {
        self.books.lock().groups.keys().cloned().collect()
    }

    /// Replaces a loaded account's figures by what the database says now (after another
    /// process changed it), or drops the account when the key is gone. On the writer
    /// thread between commits: the database then holds every settle applied here.
    pub fn reload(&self, key_id: &str, figures: Option<Figures>) {
        let mut b = self.books.lock();
        match figures {
            Some(f) => {
                if let Some(a) = b.accounts.get_mut(key_id) {
                    a.figures = f;
                }
            }
            None => {
                let n = b.drop_account(key_id);
                self.gone(n);
            }
        }
    }

    /// As [`Ledger::reload`], for a group (`None`: it is gone).
    pub fn reload_group(&self, group_id: &str, figures: Option<GroupFigures>) {
        if let Some(g) = self.books.lock().groups.get_mut(group_id) {
            g.figures = figures;
        }
    }

    /// Applies a committed change of a key's record (admin update).
    pub fn update(&self, rec: &KeyRecord) {
        if let Some(a) = self.books.lock().accounts.get_mut(&rec.id) {
            let f = &mut a.figures;
            f.status = rec.status;
            f.expires_at = rec.expires_at;
            f.limit = rec.quota_limit;
            f.group.clone_from(&rec.group);
            f.policy.clone_from(&rec.policy);
        }
    }

    /// Applies a committed group creation or change: its spend in memory stays (a
    /// created group's is what its record says).
    pub fn group_changed(&self, group_id: &str, figures: GroupFigures) {
        if let Some(g) = self.books.lock().groups.get_mut(group_id) {
            g.figures = Some(match g.figures.take() {
                Some(old) => GroupFigures {
                    used: old.used,
                    ..figures
                },
                None => figures,
            });
        }
    }

    /// Applies a committed deletion of a group: it refuses reserves, and its settled
    /// spend is gone with its rows (holds still in flight stay counted until settled).
    pub fn group_deleted(&self, group_id: &str) {
        if let Some(g) = self.books.lock().groups.get_mut(group_id) {
            g.figures = None;
            for s in g.c.periods.values_mut() {
                s.settled = 0;
            }
        }
    }

    /// Forgets every account and group (read again from the database on their next use).
    pub fn clear(&self) {
        let mut b = self.books.lock();
        let settled = std::mem::take(&mut b.settled);
        *b = Books {
            settled,
            ..Books::default()
        };
        self.live.store(0, Ordering::Relaxed);
    }

    /// Forgets a key (deleted, or created anew: read again on its next reserve).
    pub fn forget(&self, key_id: &str) {
        let n = self.books.lock().drop_account(key_id);
        self.gone(n);
    }
}
