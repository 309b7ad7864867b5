//! What a slot holds of its page of the book: at the slot's place for
//! writes, each schedule of the page, applied over an older revision; a
//! schedule new there takes over the state it left where it lived before
//! a move (its cursor, so that no fire is doubled or lost), once that
//! place parked it; elsewhere (a slot that drains, a namespace that moved
//! to another pool) the schedules are parked, their state kept for the
//! place they moved to, which removes them once it holds them. A schedule
//! gone from the table is removed.

use std::{collections::HashMap, sync::Arc};

use sundial_core::{EngineError, FireDef, FireState, Shard};

use super::{
    book::{Book, Page},
    keeper::{Fenced, Known, SlotSchedules},
};

/// The most schedules one write call carries.
const BATCH: usize = 100;

/// Other places' schedules, read once per keep: `None` for a place that
/// could not be read.
type Elsewhere = HashMap<(String, u32), Option<HashMap<String, FireState>>>;

/// The writes that make a slot hold its page.
#[derive(Default)]
struct Writes {
    apply: Vec<(String, FireDef, Option<FireState>)>,
    park: Vec<String>,
    remove: Vec<(String, u64)>,
    /// Parked copies at other places, obsolete once this slot holds them.
    cleanup: Vec<(Shard, u32, String, u64)>,
    /// Schedules that wait for the place they move from to park them.
    waiting: usize,
}

impl SlotSchedules {
    /// Makes the slot hold its page of the book, when it may differ.
    /// Returns whether it wrote anything.
    pub(crate) async fn keep(
        &mut self,
        shard: &Shard,
    ) -> Result<Result<bool, Fenced>, EngineError> {
        let home = self.places.home();
        if home != self.was_home {
            self.was_home = home;
            self.stale = true;
        }
        if !self.stale {
            return Ok(Ok(false));
        }
        let book = self.book.borrow_and_update().clone();
        let Some(page) = book.page(&self.pool, self.slot) else {
            return Ok(Ok(false));
        };
        let mut known = match self.known.take() {
            Some(known) => known,
            None => read(shard, self.slot).await?,
        };
        let w = self.plan_writes(shard, &book, &page, home, &known).await?;
        let Ok(all_applied) = self.write(shard, &w).await? else {
            return Ok(Err(Fenced));
        };
        note(&mut known, &w, &page);
        cleanup(&w).await;
        // A definition the slot refused holds a newer revision than this
        // process's copy: what the slot holds is read again next time.
        self.known = all_applied.then_some(known);
        self.stale = w.waiting > 0;
        self.waiting = w.waiting > 0;
        Ok(Ok(!w.apply.is_empty()
            || !w.park.is_empty()
            || !w.remove.is_empty()))
    }

    /// What to write so that the slot holds `page` (none of it unless
    /// `home`).
    async fn plan_writes(
        &self,
        shard: &Shard,
        book: &Book,
        page: &Page,
        home: bool,
        known: &HashMap<String, Known>,
    ) -> Result<Writes, EngineError> {
        let mut w = Writes::default();
        let mut elsewhere: Elsewhere = HashMap::new();
        for (m, entry) in page.iter().filter(|_| home) {
            let def = &entry.def;
            match known.get(m) {
                Some(k) if !k.parked => {
                    let stale = match &k.def {
                        Some(had) => !Arc::ptr_eq(had, def) && had != def,
                        None => k.rev <= def.rev,
                    };
                    if stale {
                        w.apply.push((m.clone(), FireDef::clone(def), None));
                    }
                }
                own => {
                    let own = match own {
                        Some(_) => shard.fires().state(self.slot, m).await?,
                        None => None,
                    };
                    let others = self.places.others(entry.also.as_ref());
                    self.take_over(m, def, own, &others, &mut elsewhere, &mut w)
                        .await;
                }
            }
        }
        for (m, k) in known {
            if home && page.contains_key(m) {
                continue;
            }
            if !book.exists(m) {
                w.remove.push((m.clone(), k.rev));
            } else if !k.parked {
                w.park.push(m.clone());
            }
        }
        Ok(w)
    }

    /// Schedule `m`, new here or parked here (`own`): applied with the
    /// latest state it left parked at one of `others` (read into
    /// `elsewhere`), or its own, or afresh; or left waiting while another
    /// place still fires it (or cannot be read).
    async fn take_over(
        &self,
        m: &str,
        def: &Arc<FireDef>,
        own: Option<FireState>,
        others: &[(Shard, u32)],
        elsewhere: &mut Elsewhere,
        w: &mut Writes,
    ) {
        let mut parked = Vec::new();
        for (other, slot) in others {
            let key = (other.name().to_owned(), *slot);
            if !elsewhere.contains_key(&key) {
                let read = match other.fires().states(*slot).await {
                    Ok(states) => Some(states.into_iter().collect()),
                    Err(e) => {
                        tracing::warn!(shard = other.name(), slot, error = %e, "where schedules lived cannot be read; they wait");
                        None
                    }
                };
                elsewhere.insert(key.clone(), read);
            }
            let Some(states) = &elsewhere[&key] else {
                w.waiting += 1;
                return;
            };
            match states.get(m) {
                Some(st) if !st.parked => {
                    w.waiting += 1;
                    return;
                }
                Some(st) => parked.push((st.clone(), other.clone(), *slot)),
                None => {}
            }
        }
        for (st, other, slot) in &parked {
            w.cleanup.push((other.clone(), *slot, m.to_owned(), st.rev));
        }
        let latest = parked.into_iter().max_by_key(|(st, ..)| st.cursor_ms);
        let adopt = match (own, latest) {
            (Some(own), Some((st, ..))) if st.cursor_ms <= own.cursor_ms => None,
            (_, latest) => latest.map(|(st, ..)| st),
        };
        w.apply.push((m.to_owned(), FireDef::clone(def), adopt));
    }

    /// Makes `w`'s writes to the slot, each fenced by its lease. Returns
    /// whether every definition was applied.
    async fn write(&self, shard: &Shard, w: &Writes) -> Result<Result<bool, Fenced>, EngineError> {
        let (f, slot, owner) = (shard.fires(), self.slot, Some(self.owner.as_str()));
        let mut all = true;
        for part in w.apply.chunks(BATCH) {
            match f.apply(slot, owner, part).await? {
                None => return Ok(Err(Fenced)),
                Some(done) => all &= done.iter().all(|d| *d),
            }
        }
        for part in w.park.chunks(BATCH) {
            if f.park(slot, owner, part).await?.is_none() {
                return Ok(Err(Fenced));
            }
        }
        for part in w.remove.chunks(BATCH) {
            if f.remove(slot, owner, part).await?.is_none() {
                return Ok(Err(Fenced));
            }
        }
        Ok(Ok(all))
    }
}

/// Notes in `known` what `w` wrote.
fn note(known: &mut HashMap<String, Known>, w: &Writes, page: &Page) {
    for (m, _, _) in &w.apply {
        let def = page.get(m).map(|e| e.def.clone());
        let rev = def.as_ref().map_or(0, |d| d.rev);
        // A definition read at this revision was held already: it
        // keeps the state read (an ended schedule stays ended).
        let ended = known
            .get(m)
            .is_some_and(|k| k.def.is_none() && !k.parked && k.rev == rev && k.ended);
        let k = Known {
            rev,
            parked: false,
            ended,
            def,
        };
        known.insert(m.clone(), k);
    }
    for m in &w.park {
        if let Some(k) = known.get_mut(m) {
            k.parked = true;
        }
    }
    for (m, _) in &w.remove {
        known.remove(m);
    }
}

/// Removes the parked copies that `w` took over from their old places,
/// each only while still parked (unfenced: a parked copy fires nothing,
/// and its place's lease may be another process's); a copy left behind
/// is logged.
async fn cleanup(w: &Writes) {
    for (other, slot, m, rev) in &w.cleanup {
        let gone = [(m.clone(), *rev)];
        if let Err(e) = other.fires().drop_parked(*slot, &gone).await {
            tracing::warn!(schedule = m, shard = other.name(), slot, error = %e, "a parked schedule left behind");
        }
    }
}

/// What `slot` holds, read.
async fn read(shard: &Shard, slot: u32) -> Result<HashMap<String, Known>, EngineError> {
    Ok(shard
        .fires()
        .states(slot)
        .await?
        .into_iter()
        .map(|(m, st)| {
            let k = Known {
                rev: st.rev,
                parked: st.parked,
                ended: st.ended,
                def: None,
            };
            (m, k)
        })
        .collect())
}
