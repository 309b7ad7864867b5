//! What this gateway announces in its view (see [`crate::view`]), renewed
//! in every shard of every pool at each round of the drain loop.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::{
    Layout, Pool,
    admin::homes::{Home, MoveState},
    view::{self, MoveEntry, ViewEntry, WRITE_GRACE},
};

/// How long an announced view lives unless renewed: this, or three rounds
/// of announcements if that is longer.
const VIEW_TTL: Duration = Duration::from_secs(20);

/// This gateway's announcements: the layouts it may write to and knows,
/// and the namespace moves it knows.
#[derive(Debug)]
pub(crate) struct Announcer {
    /// How long an announcement lives unless renewed.
    ttl: Duration,
    /// Per pool: the layout written to, and the previous one with when it
    /// stopped being written to.
    layouts: HashMap<String, (Layout, Option<(Layout, Instant)>)>,
}

impl Announcer {
    /// An announcer renewed every `every`.
    pub(crate) fn new(every: Duration) -> Self {
        Self {
            ttl: VIEW_TTL.max(every * 3),
            layouts: HashMap::new(),
        }
    }

    /// Announces in every shard of `pool` the layouts this gateway may
    /// write to (the one it writes to, the current one, and the one it
    /// wrote to before for [`WRITE_GRACE`]), those it knows, and the moves
    /// of namespaces out of or into the pool that are not over (`homes`:
    /// (pool, namespace, home), those this gateway may announce).
    pub(crate) async fn announce(&mut self, pool: &Pool, homes: &[(String, String, Home)]) {
        let mut mine: Vec<ViewEntry> = self
            .writable(pool)
            .into_iter()
            .map(ViewEntry::Writes)
            .collect();
        mine.extend(pool.layouts().cloned().map(ViewEntry::Knows));
        // A gateway that serves either pool holds a move until it knows it.
        mine.extend(
            homes
                .iter()
                .filter(|(_, _, h)| h.from == pool.name() || h.to == pool.name())
                .filter(|(_, _, h)| h.state != MoveState::Moved)
                .map(|(p, ns, h)| {
                    ViewEntry::Move(MoveEntry {
                        pool: p.clone(),
                        ns: ns.clone(),
                        to: h.to.clone(),
                        state: Ok(h.state),
                    })
                }),
        );
        let mine = view::Rendered::new(&mine);
        for shard in pool.shards() {
            if let Err(e) = view::announce(shard, &mine, self.ttl).await {
                tracing::warn!(shard = shard.name(), error = %e, "cannot announce this gateway's layouts");
            }
        }
    }

    /// The layouts of `pool` this gateway may write to: the one it writes
    /// to, the current one, and for [`WRITE_GRACE`] after a change the one
    /// it wrote to before.
    fn writable(&mut self, pool: &Pool) -> Vec<Layout> {
        let writes = pool.write_layout();
        let entry = self
            .layouts
            .entry(pool.name().to_owned())
            .or_insert_with(|| (writes.clone(), None));
        if entry.0 != *writes {
            let previous = std::mem::replace(&mut entry.0, writes.clone());
            entry.1 = Some((previous, Instant::now()));
        }
        let mut mine = vec![entry.0.clone()];
        if *pool.layout() != entry.0 {
            mine.push(pool.layout().clone());
        }
        if let Some((prev, since)) = &entry.1
            && since.elapsed() < WRITE_GRACE
            && !mine.contains(prev)
        {
            mine.push(prev.clone());
        }
        mine
    }
}
