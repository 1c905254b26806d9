//! A guest's memory and instance limits, held in total.
//!
//! # Rules
//!
//! 1. `memory_mb` covers the sum of every linear memory and every table a
//!    guest creates, at creation and at each growth. A component instantiates
//!    several core modules, each with memories and tables of its own; a core
//!    module may declare many memories (multi-memory). None of them gets a
//!    limit of its own: a guest of `memory_mb: 64` holds 64 MiB at most,
//!    however it spreads them.
//! 2. A guest instantiates at most [`MAX_INSTANCES`] core instances and
//!    creates at most [`MAX_MEMORIES`] memories and [`MAX_TABLES`] tables
//!    (wasmtime allows 10 000 of each by default, and every memory reserves
//!    gigabytes of address space). A program that declares more is refused
//!    when it is loaded, naming the cap (`check_declared`); the store
//!    enforces the same caps while it runs.
//! 3. A growth past the limit fails as the guest sees it (`memory.grow`
//!    returns -1); the guest's end then says it ran out of memory, naming the
//!    limit. A growth past the guest's own declared maximum fails too, but
//!    that is its own rule: it charges nothing and is not reported as ours.

use wasmtime::{ResourceLimiter, ResourcesRequired};

/// The most core instances one guest may create.
pub const MAX_INSTANCES: usize = 100;
/// The most linear memories one guest may create.
pub const MAX_MEMORIES: usize = 16;
/// The most tables one guest may create.
pub const MAX_TABLES: usize = 100;

/// Bytes charged per table element: wasmtime stores one pointer per element.
const TABLE_ELEMENT_BYTES: usize = std::mem::size_of::<usize>();

/// Charges every memory and table of a store against one budget, and
/// remembers whether the budget refused something.
#[derive(Debug)]
pub(crate) struct Limiter {
    max_bytes: usize,
    used: usize,
    hit: bool,
}

impl Limiter {
    /// A budget of `max_bytes` across all memories and tables.
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            used: 0,
            hit: false,
        }
    }

    /// Whether a creation or growth was refused for the budget.
    pub(crate) fn hit(&self) -> bool {
        self.hit
    }

    /// Moves one memory or table from `current` to `desired` bytes, if the
    /// total stays within the budget. Memories and tables never shrink and
    /// live as long as the store, so a running sum is the exact total (a
    /// growth that fails after being allowed stays charged: the error is on
    /// the safe side).
    fn charge(&mut self, current: usize, desired: usize) -> bool {
        let used = self.used.saturating_sub(current).saturating_add(desired);
        if used > self.max_bytes {
            self.hit = true;
            return false;
        }
        self.used = used;
        true
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        Ok(self.charge(current, desired))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        Ok(self.charge(
            current.saturating_mul(TABLE_ELEMENT_BYTES),
            desired.saturating_mul(TABLE_ELEMENT_BYTES),
        ))
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }
}

/// Refuses a program whose declared memories or tables exceed the caps.
/// `None` (a component that instantiates modules it imports) cannot be
/// counted ahead; the store's caps still hold while it runs.
///
/// # Errors
///
/// A phrase naming what it declares and the cap.
pub(crate) fn check_declared(required: Option<&ResourcesRequired>) -> Result<(), String> {
    let Some(required) = required else {
        return Ok(());
    };
    let memories = usize::try_from(required.num_memories).unwrap_or(usize::MAX);
    if memories > MAX_MEMORIES {
        return Err(format!(
            "it defines {memories} linear memories; a guest may have at most {MAX_MEMORIES} \
             (its `memory_mb` covers all of them together)"
        ));
    }
    let tables = usize::try_from(required.num_tables).unwrap_or(usize::MAX);
    if tables > MAX_TABLES {
        return Err(format!(
            "it defines {tables} tables; a guest may have at most {MAX_TABLES}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn memories_and_tables_share_one_budget() {
        // (what grows: memory or table, current, desired, its maximum, allowed)
        let steps: &[(&str, usize, usize, Option<usize>, bool)] = &[
            // A first memory of 40 MiB fits a 64 MiB budget.
            ("memory", 0, 40 * MIB, None, true),
            // A second one of 40 MiB does not: the budget is the total.
            ("memory", 0, 40 * MIB, None, false),
            // Growing the first by 20 MiB still fits (60 MiB in all).
            ("memory", 40 * MIB, 60 * MIB, None, true),
            // A table of a million elements (8 MiB) would pass 64 MiB.
            ("table", 0, 1_000_000, None, false),
            // A small table fits beside it.
            ("table", 0, 1024, None, true),
            // Growth past the memory's own maximum fails without counting…
            ("memory", 0, 2 * MIB, Some(MIB), false),
            // …so a 3 MiB memory still fits (60 + 8 KiB + 3 MiB < 64 MiB).
            ("memory", 0, 3 * MIB, None, true),
        ];
        let mut limiter = Limiter::new(64 * MIB);
        for (index, &(what, current, desired, maximum, allowed)) in steps.iter().enumerate() {
            let answer = match what {
                "memory" => limiter.memory_growing(current, desired, maximum),
                _ => limiter.table_growing(current, desired, maximum),
            };
            assert_eq!(
                answer.unwrap_or_else(|e| panic!("{e}")),
                allowed,
                "step {index}"
            );
        }
        assert!(limiter.hit());
        assert_eq!(limiter.used, 63 * MIB + 1024 * TABLE_ELEMENT_BYTES);
    }

    #[test]
    fn a_growth_past_the_guests_own_maximum_is_not_reported_as_ours() {
        let mut limiter = Limiter::new(64 * MIB);
        let answer = limiter.memory_growing(MIB, 2 * MIB, Some(MIB));
        assert!(!answer.unwrap_or(true));
        assert!(!limiter.hit());
    }

    #[test]
    fn programs_declaring_more_than_the_caps_are_refused() {
        let required = |memories: u32, tables: u32| ResourcesRequired {
            num_memories: memories,
            max_initial_memory_size: None,
            num_tables: tables,
            max_initial_table_size: None,
        };
        let cases = [
            (required(1, 1), Ok(())),
            (required(16, 100), Ok(())),
            (
                required(40, 1),
                Err(
                    "it defines 40 linear memories; a guest may have at most 16 \
                     (its `memory_mb` covers all of them together)"
                        .to_owned(),
                ),
            ),
            (
                required(1, 101),
                Err("it defines 101 tables; a guest may have at most 100".to_owned()),
            ),
        ];
        for (required, expected) in cases {
            assert_eq!(check_declared(Some(&required)), expected);
        }
        assert_eq!(check_declared(None), Ok(()));
    }
}
