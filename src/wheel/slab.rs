//! The wheel's storage: a slab of nodes, each on exactly one intrusive doubly linked list.
//!
//! Indices instead of pointers keep the wheel free of `unsafe`: a node is a `u32` key into
//! a `Vec`, freed nodes form a free list through `next`, and in steady state (as many arms
//! as expiries and cancels) nothing is allocated. Every operation is O(1).

/// "No node": the end of a list, an empty head.
pub(super) const NIL: u32 = u32::MAX;

/// Which list a node is on. Level slots are `level * 64 + slot`; the rest follow.
pub(super) type ListId = u16;

#[derive(Debug)]
pub(super) struct Node<T> {
    /// `None` exactly when the node is free.
    pub(super) value: Option<T>,
    pub(super) list: ListId,
    pub(super) prev: u32,
    pub(super) next: u32,
}

/// Head and tail of one list; FIFO: push at the tail, pop at the head.
#[derive(Clone, Copy, Debug)]
pub(super) struct List {
    pub(super) head: u32,
    pub(super) tail: u32,
}

impl List {
    pub(super) const EMPTY: List = List { head: NIL, tail: NIL };

    pub(super) fn is_empty(&self) -> bool {
        self.head == NIL
    }
}

#[derive(Debug)]
pub(super) struct Slab<T> {
    nodes: Vec<Node<T>>,
    free: u32,
    len: usize,
}

impl<T> Slab<T> {
    pub(super) fn new() -> Slab<T> {
        Slab { nodes: Vec::new(), free: NIL, len: 0 }
    }

    #[cfg(test)]
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

    /// Stores a value on no list yet; returns its key.
    pub(super) fn alloc(&mut self, value: T) -> u32 {
        self.len += 1;
        let node = Node { value: Some(value), list: 0, prev: NIL, next: NIL };
        if self.free != NIL {
            let key = self.free;
            self.free = self.nodes[key as usize].next;
            self.nodes[key as usize] = node;
            key
        } else {
            let key = u32::try_from(self.nodes.len()).expect("a shard holds fewer than 2^32 - 1 timeouts");
            assert!(key != NIL, "a shard holds fewer than 2^32 - 1 timeouts");
            self.nodes.push(node);
            key
        }
    }

    /// Frees a node that is on no list; returns its value.
    pub(super) fn release(&mut self, key: u32) -> T {
        let node = &mut self.nodes[key as usize];
        let value = node.value.take().expect("released a free node");
        node.next = self.free;
        self.free = key;
        self.len -= 1;
        value
    }

    pub(super) fn push_back(&mut self, list: &mut List, id: ListId, key: u32) {
        let node = &mut self.nodes[key as usize];
        node.list = id;
        node.prev = list.tail;
        node.next = NIL;
        if list.tail == NIL {
            list.head = key;
        } else {
            self.nodes[list.tail as usize].next = key;
        }
        list.tail = key;
    }

    pub(super) fn pop_front(&mut self, list: &mut List) -> Option<u32> {
        let key = list.head;
        if key == NIL {
            return None;
        }
        self.unlink(list, key);
        Some(key)
    }

    /// Takes `key` off `list`, which must be the list it is on.
    pub(super) fn unlink(&mut self, list: &mut List, key: u32) {
        let (prev, next) = {
            let node = &self.nodes[key as usize];
            (node.prev, node.next)
        };
        match prev {
            NIL => list.head = next,
            p => self.nodes[p as usize].next = next,
        }
        match next {
            NIL => list.tail = prev,
            n => self.nodes[n as usize].prev = prev,
        }
    }

    /// Takes every value out, in no particular order, and empties the slab.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.free = NIL;
        self.len = 0;
        self.nodes.drain(..).filter_map(|n| n.value)
    }
}
