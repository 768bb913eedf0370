//! The TSC's reads off x86_64 Linux (`mod arch` there): nothing says that `Instant` is read
//! from the TSC, so the estimate is never on (`usable` sees no invariant TSC) and these
//! reads are never made.

pub(crate) fn read() -> u64 {
    0
}

pub(crate) fn read_after() -> u64 {
    0
}

pub(crate) fn read_before() -> u64 {
    0
}

pub(crate) fn raw() -> Option<u64> {
    None
}

pub(crate) fn cpu_has_invariant_tsc() -> bool {
    false
}
