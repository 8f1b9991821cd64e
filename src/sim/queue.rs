//! The event queue: a binary heap ordered by `(time_us, seq)`, where `seq`
//! increases with every push. Events at the same microsecond therefore come
//! out in the order they were scheduled, which makes every run deterministic.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

struct Entry<E> {
    time: u64,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    // Reversed: BinaryHeap is a max-heap and we want the earliest first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

/// Min-queue of events keyed by time, FIFO among equal times.
pub(crate) struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    next_seq: u64,
}

impl<E> EventQueue<E> {
    pub(crate) fn new() -> Self {
        EventQueue { heap: BinaryHeap::new(), next_seq: 0 }
    }

    pub(crate) fn push(&mut self, time: u64, event: E) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Entry { time, seq, event });
    }

    pub(crate) fn peek_time(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.time)
    }

    pub(crate) fn peek(&self) -> Option<&E> {
        self.heap.peek().map(|e| &e.event)
    }

    pub(crate) fn pop(&mut self) -> Option<(u64, E)> {
        self.heap.pop().map(|e| (e.time, e.event))
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_insertion_order() {
        let mut q = EventQueue::new();
        q.push(5, 'a');
        q.push(3, 'b');
        q.push(5, 'c');
        q.push(3, 'd');
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, ['b', 'd', 'a', 'c']);
    }
}
