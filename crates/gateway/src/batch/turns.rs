//! The fair share of a Redis server: the group-commit calls (publishes,
//! consumes, acks) that this gateway runs on one server at once are at
//! most as many as its pooled connections, and when more wait, they go in
//! turn by namespace, each namespace's share in proportion to its weight
//! (quota `weight`, 1 unless set), not in arrival order.
//!
//! Calls past the connections would wait anyway, pipelined on a connection
//! behind whatever call came before them; here they wait in the gateway,
//! where the next turn can go to the namespace that had the fewest turns
//! for its weight. A namespace that floods many queues then has as many
//! calls at the server as the others, however many it sends, and its calls
//! that wait grow their batches (a line takes what waits when its turn
//! comes), so the flood costs Redis fewer calls per job, not more.
//!
//! A server is a standalone or Sentinel shard, or one primary of a Redis
//! Cluster shard, so that the calls that hang on a dead or paused primary
//! hold up only that primary's turns.
//!
//! The order is stride scheduling: each namespace has a pass that a turn
//! moves on by `STRIDE / weight`, and the next turn goes to the waiting
//! namespace with the lowest pass. A namespace that comes back after an
//! idle time starts from the pass of the last turn given, so that it cannot
//! save turns up while idle.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
};

use sundial_core::{Shard, keys::SlotKeys};
use tokio::sync::oneshot;

/// What a turn moves a namespace of weight 1 on by.
const STRIDE: u64 = 1 << 20;
/// Idle namespaces a server remembers before it forgets those that are
/// behind the last turn given (and so have nothing to be remembered by).
const REMEMBERED: usize = 64;

/// Every server's turns, for one gateway. Cheap to share.
#[derive(Debug, Default)]
pub struct Turns {
    /// Per server (the shard's name and connections, and a cluster
    /// primary's address).
    servers: Mutex<HashMap<String, Arc<Server>>>,
}

/// The right to run one call on a server: given back when dropped.
#[derive(Debug)]
pub struct Turn {
    server: Arc<Server>,
    ns: Box<str>,
}

impl Turn {
    /// Gives the turn back unused (the call it was for found nothing to
    /// do): its namespace's pass goes back to where it was.
    pub fn unused(self) {
        let mut st = lock(&self.server.state);
        if let Some(n) = st.namespaces.get_mut(&*self.ns) {
            n.pass = n.pass.saturating_sub(n.stride);
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.server.give_back();
    }
}

#[derive(Debug)]
struct Server {
    /// Calls at once at most.
    in_flight: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    running: usize,
    /// The pass of the last turn given: where a namespace that comes back
    /// starts.
    clock: u64,
    namespaces: HashMap<String, Namespace>,
    /// Calls waiting, all namespaces.
    waiting: usize,
    /// Calls that came, to break ties between passes by age.
    arrivals: u64,
}

#[derive(Debug, Default)]
struct Namespace {
    pass: u64,
    /// What its next turn moves its pass on by.
    stride: u64,
    /// Its calls that wait: arrival number, and where to say go.
    waiting: VecDeque<(u64, oneshot::Sender<()>)>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Turns {
    /// Waits for a turn to run a call of namespace `ns`, of `weight`, for
    /// `slot` on `shard`. `replicated`: a publish, which on a shard that
    /// waits for replicas runs on connections of its own (and holds its
    /// turn through its `WAIT`), so it takes turns of its own there, and
    /// does not hold up consumes and acks.
    pub async fn take(
        &self,
        shard: &Shard,
        slot: u32,
        ns: &str,
        weight: u64,
        replicated: bool,
    ) -> Turn {
        let wait = replicated && shard.conn().wait_replicas().is_some();
        self.server(shard, slot, wait).take(ns, weight).await
    }

    fn server(&self, shard: &Shard, slot: u32, wait: bool) -> Arc<Server> {
        let conn = shard.conn();
        // With the connections: a reload that changes them makes another
        // server's turns (the old one's calls end on their own).
        let mut key = format!("{} {}", shard.name(), conn.pooled_connections());
        if wait {
            key.push_str(" wait");
        }
        if conn.is_cluster()
            && let Some(primary) = conn.cluster_node_of(&SlotKeys::new(slot).jobs())
        {
            key.push(' ');
            key.push_str(&primary);
        }
        let mut servers = lock(&self.servers);
        if let Some(s) = servers.get(&key) {
            return s.clone();
        }
        // Servers a reload or a failover replaced, with no call running or
        // waiting, go.
        if servers.len() >= REMEMBERED {
            servers.retain(|_, s| Arc::strong_count(s) > 1);
        }
        let server = Arc::new(Server::new(conn.pooled_connections()));
        servers.insert(key, server.clone());
        server
    }
}

impl Server {
    fn new(in_flight: usize) -> Self {
        Self {
            in_flight: in_flight.max(1),
            state: Mutex::default(),
        }
    }

    async fn take(self: Arc<Self>, ns: &str, weight: u64) -> Turn {
        let stride = STRIDE / weight.clamp(1, STRIDE);
        let (tx, rx) = oneshot::channel();
        {
            let mut st = lock(&self.state);
            let clock = st.clock;
            st.arrivals += 1;
            let arrival = st.arrivals;
            if st.namespaces.len() > REMEMBERED {
                st.namespaces
                    .retain(|_, n| !n.waiting.is_empty() || n.pass > clock);
            }
            let n = st.namespaces.entry(ns.to_owned()).or_default();
            n.stride = stride;
            if n.waiting.is_empty() {
                n.pass = n.pass.max(clock);
            }
            n.waiting.push_back((arrival, tx));
            st.waiting += 1;
            self.dispatch(&mut st);
        }
        let mut given = Given {
            rx,
            server: self.clone(),
            taken: false,
        };
        // A turn given after this future went away fails to send and goes
        // to the next; one given before is given back by `Given`'s drop.
        if (&mut given.rx).await.is_err() {
            // Not reached: the server holds every sender until it sends.
            // Counted as given, so that the turn's drop balances it.
            lock(&self.state).running += 1;
        }
        given.taken = true;
        Turn {
            server: self,
            ns: ns.into(),
        }
    }

    /// A call ended: its turn goes to whoever is next.
    fn give_back(&self) {
        let mut st = lock(&self.state);
        st.running -= 1;
        self.dispatch(&mut st);
    }

    /// Gives free turns to the waiting namespaces with the lowest passes.
    fn dispatch(&self, st: &mut State) {
        while st.running < self.in_flight && st.waiting > 0 {
            let Some(n) = st
                .namespaces
                .values_mut()
                .filter_map(|n| Some(((n.pass, n.waiting.front()?.0), n)))
                .min_by_key(|(key, _)| *key)
                .map(|(_, n)| n)
            else {
                break;
            };
            let (_, tx) = n.waiting.pop_front().expect("not empty");
            let pass = n.pass;
            let sent = tx.send(()).is_ok();
            if sent {
                n.pass += n.stride;
            }
            st.waiting -= 1;
            if sent {
                st.clock = st.clock.max(pass);
                st.running += 1;
            }
        }
    }
}

/// A turn asked for: if it was given and not taken (the future that waited
/// went away in between), it is given back.
struct Given {
    rx: oneshot::Receiver<()>,
    server: Arc<Server>,
    /// Whether the turn became a [`Turn`] (which gives it back itself).
    taken: bool,
}

impl Drop for Given {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        // Closed first, so that no turn can be sent between the look and
        // the drop: one sent before is here to give back.
        self.rx.close();
        if self.rx.try_recv().is_ok() {
            self.server.give_back();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sundial_core::ShardOptions;
    use tokio::sync::mpsc;

    use super::*;

    /// A shard of `connections` pooled connections that is never used,
    /// only named (nothing listens on port 1).
    fn shard(connections: usize) -> Shard {
        let mut opts = ShardOptions::new("redis://127.0.0.1:1/");
        opts.connections = connections;
        Shard::connect("s", &opts).expect("shard")
    }

    type Order = mpsc::UnboundedSender<(&'static str, Turn)>;

    /// Starts a call of `ns` that waits for its turn and hands it over on
    /// `order` (the test ends it by dropping it).
    fn call(turns: &Arc<Turns>, shard: &Shard, ns: &'static str, weight: u64, order: &Order) {
        let (turns, shard, order) = (turns.clone(), shard.clone(), order.clone());
        tokio::spawn(async move {
            let turn = turns.take(&shard, 0, ns, weight, false).await;
            let _ = order.send((ns, turn));
        });
    }

    /// The namespaces of the next `n` turns, each ended before the next.
    async fn turns_in_order(
        seen: &mut mpsc::UnboundedReceiver<(&'static str, Turn)>,
        n: usize,
    ) -> Vec<&'static str> {
        let mut got = Vec::new();
        for _ in 0..n {
            let (ns, turn) = seen.recv().await.expect("a turn");
            got.push(ns);
            drop(turn);
        }
        got
    }

    /// Lets the spawned tasks run until they wait.
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    #[tokio::test]
    async fn turns_up_to_the_connections_are_given_at_once() {
        let turns = Arc::new(Turns::default());
        let shard = shard(3);
        let mut held = Vec::new();
        for _ in 0..3 {
            let t =
                tokio::time::timeout(Duration::from_secs(1), turns.take(&shard, 0, "a", 1, false));
            held.push(t.await.expect("a free turn is given at once"));
        }
        let fourth = tokio::time::timeout(
            Duration::from_millis(50),
            turns.take(&shard, 0, "a", 1, false),
        );
        assert!(fourth.await.is_err(), "a fourth call waits");
        drop(held.pop());
        let fourth =
            tokio::time::timeout(Duration::from_secs(1), turns.take(&shard, 0, "a", 1, false));
        fourth.await.expect("a turn given back goes to the next");
    }

    #[tokio::test]
    async fn waiting_calls_go_by_weight_not_by_arrival() {
        let turns = Arc::new(Turns::default());
        let shard = shard(1);
        let (order, mut seen) = mpsc::unbounded_channel();
        let first = turns.take(&shard, 0, "a", 1, false).await;
        // A floods first: six calls; then B, of weight 2, four.
        for _ in 0..6 {
            call(&turns, &shard, "a", 1, &order);
            settle().await;
        }
        for _ in 0..4 {
            call(&turns, &shard, "b", 2, &order);
            settle().await;
        }
        drop(first);
        // a's first call, given at once, moved a's pass on by a stride: b
        // twice for each of a's turns while both wait (a first on a tie,
        // its call being older), then a's that are left.
        let got = turns_in_order(&mut seen, 10).await;
        assert_eq!(got, ["b", "b", "a", "b", "b", "a", "a", "a", "a", "a"]);
    }

    #[tokio::test]
    async fn a_turn_given_back_unused_costs_its_namespace_nothing() {
        let turns = Arc::new(Turns::default());
        let shard = shard(1);
        let (order, mut seen) = mpsc::unbounded_channel();
        drop(turns.take(&shard, 0, "b", 1, false).await);
        // a's calls found nothing to do three times (the line's other call
        // had taken what waited).
        for _ in 0..3 {
            turns.take(&shard, 0, "a", 1, false).await.unused();
        }
        let first = turns.take(&shard, 0, "x", 1, false).await;
        call(&turns, &shard, "b", 1, &order);
        settle().await;
        call(&turns, &shard, "a", 1, &order);
        settle().await;
        drop(first);
        // b had a real turn and a none: a goes first, though it came later.
        assert_eq!(turns_in_order(&mut seen, 2).await, ["a", "b"]);
    }

    #[tokio::test]
    async fn a_call_that_went_away_while_waiting_keeps_no_turn() {
        let turns = Arc::new(Turns::default());
        let shard = shard(1);
        let first = turns.take(&shard, 0, "a", 1, false).await;
        let gone = tokio::time::timeout(
            Duration::from_millis(20),
            turns.take(&shard, 0, "b", 1, false),
        );
        assert!(gone.await.is_err(), "it waited, then went away");
        drop(first);
        let next =
            tokio::time::timeout(Duration::from_secs(1), turns.take(&shard, 0, "c", 1, false));
        next.await
            .expect("the turn did not go to the call that went away");
    }

    #[tokio::test]
    async fn a_namespace_back_from_idle_has_saved_no_turns() {
        let turns = Arc::new(Turns::default());
        let shard = shard(1);
        let (order, mut seen) = mpsc::unbounded_channel();
        // b runs alone for a while: its pass moves on.
        for _ in 0..5 {
            drop(turns.take(&shard, 0, "b", 1, false).await);
        }
        // a, new (or idle), starts from the last turn's pass, not from 0:
        // it does not get five turns in a row against b.
        let first = turns.take(&shard, 0, "x", 1, false).await;
        for ns in ["a", "a", "a", "b", "b", "b"] {
            call(&turns, &shard, ns, 1, &order);
            settle().await;
        }
        drop(first);
        // a starts from the pass of the last turn given (x's), one stride
        // behind b (which had the turn before): one turn ahead, then the
        // two alternate, the older call first on a tie. Had a started from
        // 0, its three would all go first.
        let got = turns_in_order(&mut seen, 6).await;
        assert_eq!(got, ["a", "a", "b", "a", "b", "b"]);
    }
}
