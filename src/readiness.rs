//! Whether the process can do its job: a set of named conditions, each kept by what owns it
//! (the responder keeps one per served device: open and its port ACTIVE). `/readyz` answers 200
//! when every condition holds and 503 naming those that do not (docs/architecture.md,
//! "Responder admission").
//!
//! A process with no condition registered yet is not ready: it is still starting (its devices
//! are being opened), and a rollout should wait for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// What `/readyz` reports; cheap to clone (every clone sees the same conditions).
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    conditions: Arc<Mutex<Vec<ReadinessCondition>>>,
}

/// One condition of a [`Readiness`], held by what it describes. It starts false; cloning gives
/// another handle on the same condition.
#[derive(Debug, Clone)]
pub struct ReadinessCondition {
    name: Arc<str>,
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    ready: AtomicBool,
    /// Why it is false, when its owner said (e.g. "port is down").
    why: Mutex<Option<String>>,
}

/// What [`Readiness::not_ready`] says when nothing has registered a condition yet.
pub const STARTING: &str = "starting: nothing has registered a readiness condition yet";

impl Readiness {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a condition named `name` (e.g. "device rxe0 port 1"), false until its handle
    /// says otherwise. The name is what `/readyz` lists while the condition is false.
    pub fn condition(&self, name: impl Into<String>) -> ReadinessCondition {
        let condition = ReadinessCondition {
            name: Arc::from(name.into()),
            state: Arc::default(),
        };
        lock(&self.conditions).push(condition.clone());
        condition
    }

    /// Every registered condition holds, and there is at least one.
    pub fn is_ready(&self) -> bool {
        let conditions = lock(&self.conditions);
        !conditions.is_empty() && conditions.iter().all(ReadinessCondition::is_set)
    }

    /// What is not ready, one entry per false condition in registration order: its name, and
    /// after a colon why, when its owner said. Empty exactly when [`Self::is_ready`]; with no
    /// condition registered, one entry saying so ([`STARTING`]).
    pub fn not_ready(&self) -> Vec<String> {
        let conditions = lock(&self.conditions);
        if conditions.is_empty() {
            return vec![STARTING.to_owned()];
        }
        conditions
            .iter()
            .filter(|c| !c.is_set())
            .map(ReadinessCondition::describe)
            .collect()
    }
}

impl ReadinessCondition {
    /// The name it was registered with.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn set(&self, ready: bool) {
        *lock(&self.state.why) = None;
        self.state.ready.store(ready, Ordering::Release);
    }

    /// Sets the condition false and says why (listed after its name).
    pub fn set_not_ready(&self, why: impl Into<String>) {
        *lock(&self.state.why) = Some(why.into());
        self.state.ready.store(false, Ordering::Release);
    }

    pub fn is_set(&self) -> bool {
        self.state.ready.load(Ordering::Acquire)
    }

    fn describe(&self) -> String {
        match lock(&self.state.why).as_deref() {
            Some(why) => format!("{}: {why}", self.name),
            None => format!("{}: not ready", self.name),
        }
    }
}

/// A lock whose holder panicked still guards consistent data here (a `Vec` push, an `Option`
/// store), so a poisoned lock is used as it is rather than spreading the panic to `/readyz`.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_registered_is_not_ready() {
        let readiness = Readiness::new();
        assert!(!readiness.is_ready());
        assert_eq!(readiness.not_ready(), vec![STARTING.to_owned()]);
    }

    #[test]
    fn ready_when_every_condition_holds() {
        let readiness = Readiness::new();
        let a = readiness.condition("device rxe0 port 1");
        let b = readiness.clone().condition("device rxe1 port 1");
        assert_eq!(a.name(), "device rxe0 port 1");
        assert!(!readiness.is_ready(), "conditions start false");
        a.set(true);
        assert!(!readiness.is_ready());
        assert_eq!(readiness.not_ready(), vec!["device rxe1 port 1: not ready"]);
        b.clone().set(true);
        assert!(readiness.is_ready());
        assert!(readiness.not_ready().is_empty());
        b.set_not_ready("port is down");
        assert!(!readiness.is_ready());
        assert_eq!(
            readiness.not_ready(),
            vec!["device rxe1 port 1: port is down"]
        );
        // Setting it again forgets the old reason.
        b.set(false);
        assert_eq!(readiness.not_ready(), vec!["device rxe1 port 1: not ready"]);
    }
}
