//! A page's block straight from the kernel: an anonymous mapping of its own, so that a block
//! given back leaves the process's RSS at once, whatever the allocator does. Through the
//! allocator it need not: glibc maps a 256 KiB aligned block on its own only while its
//! *dynamic* mmap threshold is below the request (`malloc(3)`, `M_MMAP_THRESHOLD`): freeing a
//! mapped chunk raises the threshold to that chunk's size (up to 32 MiB), so after the first
//! page went back, or after the program freed any large buffer, later pages came from a
//! malloc arena, where a freed block in the middle stays resident (an arena is trimmed only at
//! its top) and RSS stayed at the burst's peak (`tests/pool_burst.rs`).
//!
//! Linux, Android, Apple's systems and FreeBSD (the `libc` crate's bindings checked for each);
//! elsewhere, and under Miri and loom, the allocator (`std::alloc`).
//!
//! Each page is a mapping of the kernel's (a VMA on Linux): trimmed to its alignment, a page
//! rarely sits next to another, so they do not merge, and Linux's default limit of 65,530
//! mappings a process (`vm.max_map_count`) holds some 65 k pages, 16 GiB of cells, less the
//! process's other mappings. Past it `mmap` fails and a cell is boxed on its own (`map`'s
//! `None`), as on any failed allocation. Mapping pages in runs (several aligned pages from
//! one larger mapping) would lift that; not done.

use super::page::PAGE_BYTES;
#[cfg(not(all(
    not(loom),
    not(miri),
    any(target_os = "linux", target_os = "android", target_vendor = "apple", target_os = "freebsd")
)))]
pub(super) use allocated::{map, unmap};
#[cfg(all(
    not(loom),
    not(miri),
    any(target_os = "linux", target_os = "android", target_vendor = "apple", target_os = "freebsd")
))]
pub(super) use mapped::{map, unmap};

#[cfg(all(
    not(loom),
    not(miri),
    any(target_os = "linux", target_os = "android", target_vendor = "apple", target_os = "freebsd")
))]
mod mapped {
    use super::PAGE_BYTES;
    use std::ptr::{self, NonNull};

    /// A fresh block of `PAGE_BYTES`, aligned to them; `None` if the kernel has no memory
    /// for it (`mmap` fails: the caller then boxes its cell, as after a failed allocation).
    ///
    /// Maps twice the size, which holds one aligned block wherever the kernel puts it, and
    /// unmaps the ends: two or three system calls per page (a page serves thousands of arms).
    pub(in crate::entry::pool) fn map() -> Option<NonNull<u8>> {
        let len = 2 * PAGE_BYTES;
        // SAFETY: a new private anonymous mapping at an address the kernel chooses: it
        // touches no memory the program has.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let base = base.cast::<u8>();
        // The kernel's pages (4–64 KiB) divide `PAGE_BYTES`, so `head` and `tail` are whole
        // pages of the kernel's, and neither is more than `PAGE_BYTES`.
        let head = base.addr().next_multiple_of(PAGE_BYTES) - base.addr();
        let tail = len - head - PAGE_BYTES;
        // SAFETY: `head + PAGE_BYTES <= len`: the block lies inside the mapping.
        let block = unsafe { base.add(head) };
        // SAFETY: the two ends lie inside the mapping just made and outside the block, and
        // nothing refers to them. A failure (only past the kernel's limit of mappings, where
        // a split would make one more) leaves them mapped and untouched: address space, not
        // memory.
        unsafe {
            if head > 0 {
                libc::munmap(base.cast(), head);
            }
            if tail > 0 {
                libc::munmap(block.add(PAGE_BYTES).cast(), tail);
            }
        }
        NonNull::new(block)
    }

    /// Gives a block back to the kernel.
    ///
    /// # Safety
    /// `block` came from [`map`] and nothing refers to it any more.
    pub(in crate::entry::pool) unsafe fn unmap(block: NonNull<u8>) {
        // SAFETY: by the contract, a mapping of ours of `PAGE_BYTES` that nothing uses. It
        // fails only where unmapping would split a mapping past the kernel's limit of
        // mappings (`vm.max_map_count`, after the kernel merged neighbouring blocks): the
        // block then stays mapped, lost to the pool but never reused, so nothing is unsound.
        unsafe { libc::munmap(block.as_ptr().cast(), PAGE_BYTES) };
    }

    #[cfg(test)]
    mod tests {
        use super::{PAGE_BYTES, map, unmap};

        /// The process's mapped address space, in bytes (`VmSize`, the sum of its mappings),
        /// read into `buf` (allocated beforehand, so that reading allocates nothing).
        fn mapped_bytes(buf: &mut Vec<u8>) -> usize {
            use std::io::Read;
            buf.clear();
            std::fs::File::open("/proc/self/status").unwrap().read_to_end(buf).unwrap();
            let text = std::str::from_utf8(buf).unwrap();
            let line = text.lines().find(|l| l.starts_with("VmSize:")).expect("a VmSize line");
            let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
            kib * 1024
        }

        /// `map` leaves exactly the block mapped, both ends of its double-size mapping
        /// given back, and `unmap` gives the block back: the address space grows by
        /// `PAGE_BYTES` a page and shrinks by as much, page after page, wherever the kernel
        /// put each mapping (a head or a tail left mapped would be address space lost a
        /// page, and a step towards the kernel's limit of mappings). Run in a process of its
        /// own (the test binary again, this test alone): any other thread's mapping would
        /// move `VmSize` under it.
        #[test]
        fn map_keeps_only_the_block_and_unmap_gives_it_back() {
            const CHILD: &str = "SHARDWHEEL_TEST_ALONE";
            let name = concat!(module_path!(), "::map_keeps_only_the_block_and_unmap_gives_it_back");
            let name = name.split_once("::").unwrap().1;
            if std::env::var_os(CHILD).is_none() {
                let out = std::process::Command::new(std::env::current_exe().unwrap())
                    .args([name, "--exact", "--test-threads=1", "--nocapture"])
                    .env(CHILD, "1")
                    .output()
                    .unwrap();
                let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
                assert!(out.status.success() && text.contains("1 passed"), "the test in its own process:\n{text}");
                return;
            }
            let mut buf = Vec::with_capacity(1 << 16);
            let before = mapped_bytes(&mut buf);
            let mut blocks = Vec::new();
            for i in 1..=8 {
                blocks.push(map().expect("memory for a page"));
                assert_eq!(mapped_bytes(&mut buf) - before, i * PAGE_BYTES, "page {i}: only the block stays mapped");
            }
            for (i, block) in blocks.into_iter().enumerate().rev() {
                // SAFETY: from `map`, and nothing refers to it.
                unsafe { unmap(block) };
                assert_eq!(mapped_bytes(&mut buf) - before, i * PAGE_BYTES, "the block is given back");
            }
        }
    }
}

/// A page's block from the allocator, where the pool does not map its own: under Miri (which sees each block as an allocation of its own), under loom, and on
/// systems without the mapping above.
#[cfg(not(all(
    not(loom),
    not(miri),
    any(target_os = "linux", target_os = "android", target_vendor = "apple", target_os = "freebsd")
)))]
mod allocated {
    use super::PAGE_BYTES;
    use std::alloc::Layout;
    use std::ptr::NonNull;

    fn layout() -> Layout {
        // `PAGE_BYTES` is a power of two, and a valid size for its own alignment.
        Layout::from_size_align(PAGE_BYTES, PAGE_BYTES).expect("a valid page layout")
    }

    /// A fresh block of `PAGE_BYTES`, aligned to them; `None` if the allocator has no memory.
    pub(in crate::entry::pool) fn map() -> Option<NonNull<u8>> {
        // SAFETY: the layout's size is not zero.
        NonNull::new(unsafe { std::alloc::alloc(layout()) })
    }

    /// Gives a block back to the allocator.
    ///
    /// # Safety
    /// `block` came from [`map`] and nothing refers to it any more.
    pub(in crate::entry::pool) unsafe fn unmap(block: NonNull<u8>) {
        // SAFETY: by the contract, from `std::alloc::alloc` with this layout, and unused.
        unsafe { std::alloc::dealloc(block.as_ptr(), layout()) };
    }
}
