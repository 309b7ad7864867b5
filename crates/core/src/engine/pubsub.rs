//! Subscriber connections to a shard.

use fred::clients::SubscriberClient;

use crate::{EngineError, Shard};

impl Shard {
    /// A new subscriber connection to this shard (it reconnects and
    /// resubscribes by itself).
    pub fn subscriber(&self) -> Result<SubscriberClient, EngineError> {
        self.builder()
            .build_subscriber_client()
            .map_err(|e| self.err(e))
    }
}
