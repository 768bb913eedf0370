//! The wheel's storage: a slab of nodes, each on at most one intrusive, circular, doubly
//! linked list.
//!
//! Indices instead of pointers keep the wheel free of `unsafe`: a node is a `u32` key into
//! a `Vec`, freed nodes form a free list through `next`, and in steady state (as many arms
//! as expiries and cancels) nothing is allocated. Every operation is O(1).
//!
//! Each list has a *sentinel*: a node of its own at a fixed index below [`Slab::lists`],
//! which never holds a value. A list is the ring sentinel → head → … → tail → sentinel, so
//! unlinking a node needs only its two neighbours, never the list it is on: a node carries
//! no list id (16 bytes for a pointer-sized value, not 24), and a list that an unlink
//! empties is recognised by the sentinel left pointing at itself.

/// "No node": the end of the free list.
pub(super) const NIL: u32 = u32::MAX;

/// Which list: the index of its sentinel node.
pub(super) type ListId = u32;

#[derive(Debug)]
pub(super) struct Node<T> {
    /// `None` exactly when the node is free or a sentinel.
    pub(super) value: Option<T>,
    pub(super) prev: u32,
    pub(super) next: u32,
}

#[derive(Debug)]
pub(super) struct Slab<T> {
    nodes: Vec<Node<T>>,
    /// Sentinels: indices `0..lists`.
    lists: u32,
    free: u32,
    len: usize,
    /// The most values it holds: [`Slab::alloc`] refuses one more (a key is a `u32`, and
    /// [`NIL`] is none). Below that only in unit tests, which cannot reach 2³² values.
    limit: usize,
}

/// The most values a slab can hold: one key per value, below [`NIL`], after the sentinels.
pub(super) fn max_values(lists: u32) -> usize {
    (NIL - lists) as usize
}

impl<T> Slab<T> {
    /// A slab with `lists` empty lists and room for `capacity` values before it allocates.
    pub(super) fn with_capacity(lists: u32, capacity: usize) -> Slab<T> {
        let mut nodes = Vec::with_capacity(lists as usize + capacity);
        nodes.extend((0..lists).map(|i| Node { value: None, prev: i, next: i }));
        Slab { nodes, lists, free: NIL, len: 0, limit: max_values(lists) }
    }

    /// Holds at most `limit` values (no more than [`max_values`]): for tests of what is
    /// done at the limit, which the real one puts out of a test's reach.
    #[cfg(any(test, loom))]
    pub(super) fn set_limit(&mut self, limit: usize) {
        self.limit = limit.min(max_values(self.lists));
    }

    /// The most values it holds.
    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    /// Values held.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn node(&self, key: u32) -> &Node<T> {
        &self.nodes[key as usize]
    }

    /// The node at `key` if `key` names an occupied node.
    pub(super) fn get(&self, key: u32) -> Option<&Node<T>> {
        self.nodes.get(key as usize).filter(|n| n.value.is_some())
    }

    /// The value at `key` if `key` names an occupied node.
    pub(super) fn get_mut(&mut self, key: u32) -> Option<&mut T> {
        self.nodes.get_mut(key as usize).and_then(|n| n.value.as_mut())
    }

    /// Stores a value on no list yet; returns its key, or hands the value back if the slab
    /// holds its [limit](Slab::limit) already.
    #[inline]
    pub(super) fn alloc(&mut self, value: T) -> Result<u32, T> {
        if self.free != NIL {
            self.len += 1;
            let key = self.free;
            let node = &mut self.nodes[key as usize];
            self.free = node.next;
            *node = Node { value: Some(value), prev: key, next: key };
            Ok(key)
        } else {
            self.push_new(value)
        }
    }

    /// [`Slab::alloc`] with no free node: a new one at the end, unless the slab is at its
    /// limit (in values, or in keys: retired nodes hold keys and no value). Out of line (a
    /// slab at its size reuses freed nodes), so that the inlined `alloc` stays small.
    #[cold]
    #[inline(never)]
    fn push_new(&mut self, value: T) -> Result<u32, T> {
        let key = match u32::try_from(self.nodes.len()) {
            Ok(key) if key != NIL && self.len < self.limit => key,
            _ => return Err(value),
        };
        self.len += 1;
        if self.nodes.len() == self.nodes.capacity() {
            // Grow by an eighth, not by the doubling `Vec` would do: at most one node in
            // nine lies unused (a doubled `Vec` can leave half), still amortised O(1).
            self.nodes.reserve_exact((self.nodes.len() / 8).max(64));
        }
        self.nodes.push(Node { value: Some(value), prev: key, next: key });
        Ok(key)
    }

    /// Frees a node that is on no list; returns its value.
    #[inline]
    pub(super) fn release(&mut self, key: u32) -> T {
        let node = &mut self.nodes[key as usize];
        let value = node.value.take().expect("released a free node");
        node.next = self.free;
        self.free = key;
        self.len -= 1;
        value
    }

    /// Takes the node `key`, just freed by [`Slab::release`], off the free list for good: it
    /// is never handed out again. For a slot whose generation has gone all the way round
    /// (`local/`): 24 bytes lost once per 2³² reuses of one slot.
    pub(super) fn retire(&mut self, key: u32) {
        if self.free == key {
            self.free = self.nodes[key as usize].next;
            self.nodes[key as usize].next = NIL;
        }
    }

    pub(super) fn is_empty(&self, list: ListId) -> bool {
        self.nodes[list as usize].next == list
    }

    #[inline]
    pub(super) fn push_back(&mut self, list: ListId, key: u32) {
        let tail = self.nodes[list as usize].prev;
        let node = &mut self.nodes[key as usize];
        node.prev = tail;
        node.next = list;
        self.nodes[tail as usize].next = key;
        self.nodes[list as usize].prev = key;
    }

    /// The first node of `list`, left on it.
    #[inline]
    pub(super) fn front(&self, list: ListId) -> Option<u32> {
        let key = self.nodes[list as usize].next;
        (key != list).then_some(key)
    }

    #[inline]
    pub(super) fn pop_front(&mut self, list: ListId) -> Option<u32> {
        let key = self.nodes[list as usize].next;
        if key == list {
            return None;
        }
        // `unlink`, knowing the node's predecessor is the sentinel.
        let node = &mut self.nodes[key as usize];
        let next = node.next;
        node.prev = key;
        node.next = key;
        self.nodes[list as usize].next = next;
        self.nodes[next as usize].prev = list;
        Some(key)
    }

    /// Moves every node of list `from` to the tail of list `to`, in order, in O(1).
    pub(super) fn splice(&mut self, from: ListId, to: ListId) {
        let (first, last) = (self.nodes[from as usize].next, self.nodes[from as usize].prev);
        if first == from {
            return;
        }
        let tail = self.nodes[to as usize].prev;
        self.nodes[tail as usize].next = first;
        self.nodes[first as usize].prev = tail;
        self.nodes[last as usize].next = to;
        self.nodes[to as usize].prev = last;
        let sentinel = &mut self.nodes[from as usize];
        sentinel.next = from;
        sentinel.prev = from;
    }

    /// Takes `key` off the list it is on (a node on none is left alone). Returns the list,
    /// if this emptied it.
    #[inline]
    pub(super) fn unlink(&mut self, key: u32) -> Option<ListId> {
        let (prev, next) = {
            let node = &self.nodes[key as usize];
            (node.prev, node.next)
        };
        self.nodes[prev as usize].next = next;
        self.nodes[next as usize].prev = prev;
        let node = &mut self.nodes[key as usize];
        node.prev = key;
        node.next = key;
        (prev == next && prev < self.lists && prev != key).then_some(prev)
    }

    /// Takes every value out, in no particular order, and empties every list.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.free = NIL;
        self.len = 0;
        for (i, sentinel) in self.nodes.iter_mut().take(self.lists as usize).enumerate() {
            sentinel.prev = i as u32;
            sentinel.next = i as u32;
        }
        self.nodes.drain(self.lists as usize..).filter_map(|n| n.value)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A slab's limit is every key after its sentinels and below `NIL`: the last value it
    /// takes has key `NIL - 1` (a wheel cannot be filled in a test, 2³² values).
    #[test]
    fn a_slab_holds_a_value_for_every_key_below_nil() {
        for lists in [0, 1, 449, NIL - 1] {
            let last_key = lists as usize + max_values(lists) - 1;
            assert_eq!(last_key, NIL as usize - 1, "{lists} lists");
        }
        let slab = Slab::<u32>::with_capacity(449, 0);
        assert_eq!(slab.limit, max_values(449));
    }

    /// The slab grows by an eighth of its nodes (64 at least), not by the doubling `Vec`
    /// would do, nor by less: after every value at most an eighth of its nodes (or 64) lie
    /// unused, and each growth, only when it is full, adds at least that much (so growing
    /// stays amortised O(1)).
    #[test]
    fn the_slab_grows_by_an_eighth_of_its_nodes() {
        let mut slab = Slab::with_capacity(1, 0);
        let mut grew = 0;
        for i in 0..20_000u32 {
            let (before, full) = (slab.nodes.capacity(), slab.nodes.len() == slab.nodes.capacity());
            assert!(slab.alloc(i).is_ok());
            let (len, capacity) = (slab.nodes.len(), slab.nodes.capacity());
            assert!(capacity <= len + (len / 8).max(64), "{capacity} nodes for {len}");
            if capacity != before {
                grew += 1;
                assert!(full, "grew at {before} nodes, {} of them used", len - 1);
                let least = (before / 8).max(64);
                assert!(capacity - before >= least, "grew by {} at {before} nodes, not {least}", capacity - before);
            }
        }
        // Growth by an eighth from 64 to 20,000: about 45 times.
        assert!((30..=60).contains(&grew), "grew {grew} times");
    }
}
