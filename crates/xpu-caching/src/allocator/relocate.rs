//! Relocation before a growth ([`Relocation::Merge`](crate::config::Relocation::Merge)):
//! live blocks move into idle free blocks of the stream's other segments so that a request
//! is served, or idle segments are merged, without new reserved bytes.
//!
//! A move rewrites where a block lives and copies nothing, so the allocator relocates only
//! over a source that holds no memory ([`SegmentSource::holds_no_memory`], a simulated
//! device); the runtime over OpenCL buffers never moves a block. The stages that make moves
//! real (pins, stream-ordered copies) are planned in docs/relocation.md.
//!
//! What moves: a live block with no recorded stream uses (`record_stream`) and no pending
//! markers, inside its own stream's shard and pool. A moved block keeps its slab index (the
//! two places trade indices), so its [`Allocation`](super::Allocation)'s free finds it at
//! its new place. In the statistics a move counts as one hand-out (the new place) and one
//! free (the old place); the history records both.
//!
//! [`SegmentSource::holds_no_memory`]: crate::SegmentSource::holds_no_memory

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::block::{Block, NIL};
use super::stats_cell::StatsWriter;
use super::stream_state::{Handed, Pooled, Request, ShardState};
use crate::backend::Backend;
use crate::config::AllocConfig;
use crate::size::{self, PoolKind};

/// What relocation did in one allocator since it was made (xpu's own figures, beyond
/// PyTorch's statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelocationStats {
    /// Requests served from a run of one segment cleared by moving its live blocks.
    pub relocations: u64,
    /// Live blocks moved, for either purpose.
    pub moves: u64,
    /// Bytes of the live blocks moved (their rounded block sizes).
    pub moved_bytes: u64,
    /// Segments emptied so that the release policy's consolidation merges them instead of
    /// growing (their moves are counted in `moves` and `moved_bytes`).
    pub emptied_segments: u64,
    /// Bytes of the segments emptied.
    pub emptied_bytes: u64,
}

/// [`RelocationStats`] as the allocator updates them (under a shard's lock; read
/// without one).
#[derive(Debug, Default)]
pub(crate) struct RelocationCounters {
    relocations: AtomicU64,
    moves: AtomicU64,
    moved_bytes: AtomicU64,
    emptied_segments: AtomicU64,
    emptied_bytes: AtomicU64,
}

impl RelocationCounters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn note_relocation(&self, moves: u64, bytes: u64) {
        Self::add(&self.relocations, 1);
        Self::add(&self.moves, moves);
        Self::add(&self.moved_bytes, bytes);
    }

    fn note_emptied(&self, segments: u64, segment_bytes: u64, moves: u64, bytes: u64) {
        Self::add(&self.emptied_segments, segments);
        Self::add(&self.emptied_bytes, segment_bytes);
        Self::add(&self.moves, moves);
        Self::add(&self.moved_bytes, bytes);
    }

    /// The figures so far (each read on its own: a read concurrent with a relocation may
    /// see part of it).
    pub(crate) fn read(&self) -> RelocationStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RelocationStats {
            relocations: get(&self.relocations),
            moves: get(&self.moves),
            moved_bytes: get(&self.moved_bytes),
            emptied_segments: get(&self.emptied_segments),
            emptied_bytes: get(&self.emptied_bytes),
        }
    }
}

/// A run of neighbouring blocks of one segment that spans the request.
struct Window {
    /// Live bytes to move.
    cost: u64,
    segment: u32,
    /// Lowest address of the run (a tie-break that does not depend on slab indices).
    addr: u64,
    /// The live blocks to move.
    live: Vec<u32>,
}

/// Whether a live block may move: no recorded use on another stream and no pending marker
/// (every command that used it was on its allocation stream).
fn movable<B: Backend>(b: &Block<B>) -> bool {
    b.allocated && b.stream_uses.is_empty() && b.event_count == 0
}

/// Whether a free block of `target` bytes can take a moved block of `size` bytes and leave
/// it exactly that size (a split, or an exact fit): the handle's recorded size stays true.
fn fits(kind: PoolKind, target: u64, size: u64, config: &AllocConfig) -> bool {
    target == size || (target > size && size::should_split(kind, target, size, config))
}

/// Serves `req` by moving live blocks, or prepares the release policy's consolidation by
/// emptying segments; `None` when the request must grow (the policy then sizes the growth,
/// and merges what was emptied). `raises`: the growth would raise the device's reserved
/// high-water mark (only then are segments emptied).
pub(crate) fn relocate_for<B: Backend>(
    state: &mut ShardState<B>,
    req: &Request,
    st: &mut StatsWriter<'_>,
    counters: &RelocationCounters,
    raises: bool,
) -> Option<Handed> {
    let kind = req.pool;
    // The blocks of every segment of the request's pool, in address order.
    let mut by_segment: HashMap<u32, Vec<(u64, u32)>> = HashMap::new();
    for (index, b) in state.blocks.iter() {
        if b.pool == kind {
            by_segment
                .entry(b.segment)
                .or_default()
                .push((b.addr, index));
        }
    }
    let mut windows: Vec<Window> = Vec::new();
    for (&segment, blocks) in &mut by_segment {
        blocks.sort_unstable();
        for i in 0..blocks.len() {
            let (mut span, mut cost) = (0u64, 0u64);
            let mut live = Vec::new();
            for &(_, index) in &blocks[i..] {
                let b = &state.blocks[index];
                if !(movable(b) || b.is_idle()) {
                    break;
                }
                span += b.size;
                if b.allocated {
                    cost += b.size;
                    live.push(index);
                }
                if span >= req.rounded {
                    if size::oversize_allows(req.rounded, span, &state.config) && cost > 0 {
                        windows.push(Window {
                            cost,
                            segment,
                            addr: blocks[i].0,
                            live,
                        });
                    }
                    break;
                }
            }
        }
    }
    windows.sort_unstable_by_key(|w| (w.cost, w.live.len(), w.addr));
    let config = state.config.clone();
    for w in windows {
        let excluded = [w.segment];
        let mut free = free_sizes(state, kind, &excluded);
        let mut live: Vec<(u64, u32)> = w.live.iter().map(|&b| (state.blocks[b].size, b)).collect();
        live.sort_unstable_by(|a, b| b.cmp(a));
        let sizes: Vec<u64> = live.iter().map(|&(s, _)| s).collect();
        if !pack(kind, &mut free, &sizes, &config) {
            continue;
        }
        let (mut moves, mut bytes) = (0u64, 0u64);
        for &(s, l) in &live {
            // The plan packed every block: a move cannot fail (checked in debug builds).
            let moved = move_block(state, l, s, &excluded, st);
            debug_assert!(moved, "a planned move found no target");
            if !moved {
                return None;
            }
            moves += 1;
            bytes += s;
        }
        let found = state.search(req, false)?;
        counters.note_relocation(moves, bytes);
        let handed = state.alloc_pooled(found, req, st);
        debug_assert!(consistent(state), "relocation broke the shard's layout");
        return Some(handed);
    }
    if raises {
        empty_segments(state, req, &by_segment, st, counters);
    }
    None
}

/// The idle free block sizes of `kind` outside the segments `excluded`, sorted.
fn free_sizes<B: Backend>(state: &ShardState<B>, kind: PoolKind, excluded: &[u32]) -> Vec<u64> {
    let mut free: Vec<u64> = state
        .pool(kind)
        .iter()
        .filter(|&(_, _, b)| !excluded.contains(&state.blocks[b].segment))
        .map(|(s, _, _)| s)
        .collect();
    free.sort_unstable();
    free
}

/// The shard's layout invariants after a relocation: every segment's blocks tile it in
/// address order with matching neighbour links, and every pool entry is an idle free block
/// of its size and address.
fn consistent<B: Backend>(state: &ShardState<B>) -> bool {
    let mut by_segment: HashMap<u32, Vec<(u64, u32)>> = HashMap::new();
    for (index, b) in state.blocks.iter() {
        by_segment
            .entry(b.segment)
            .or_default()
            .push((b.addr, index));
    }
    for (segment, seg) in state.segments.iter() {
        let Some(blocks) = by_segment.get_mut(&segment) else {
            return false;
        };
        blocks.sort_unstable();
        let mut at = seg.source.address;
        let mut prev = NIL;
        for (k, &(addr, index)) in blocks.iter().enumerate() {
            let b = &state.blocks[index];
            let next = blocks.get(k + 1).map_or(NIL, |&(_, n)| n);
            if addr != at || b.prev != prev || b.next != next || b.pool != seg.pool {
                return false;
            }
            at += b.size;
            prev = index;
        }
        if at != seg.source.address + seg.source.size {
            return false;
        }
    }
    if by_segment.len() != state.segments.iter().count() {
        return false;
    }
    [PoolKind::Small, PoolKind::Large].into_iter().all(|kind| {
        state.pool(kind).iter().all(|(size, addr, index)| {
            state
                .blocks
                .get(index)
                .is_some_and(|b| b.size == size && b.addr == addr && b.is_idle() && b.pool == kind)
        })
    })
}

/// Packs `live` block sizes (largest first, best fit, [`fits`]) into the free block sizes
/// `free` (sorted), updating `free`; false when one does not fit.
fn pack(kind: PoolKind, free: &mut Vec<u64>, live: &[u64], config: &AllocConfig) -> bool {
    let mut live = live.to_vec();
    live.sort_unstable_by(|a, b| b.cmp(a));
    live.iter().all(|&s| {
        let at = free.partition_point(|&f| f < s);
        let Some(pos) = (at..free.len()).find(|&p| fits(kind, free[p], s, config)) else {
            return false;
        };
        let rest = free.remove(pos) - s;
        if rest > 0 {
            let at = free.partition_point(|&f| f < rest);
            free.insert(at, rest);
        }
        true
    })
}

/// Empties whole segments of the request's pool (fewest live bytes first) into idle free
/// blocks of the segments that stay, until the idle whole segments add up to the request's
/// segment, so that the release policy's consolidation merges them; nothing moves when
/// they cannot.
fn empty_segments<B: Backend>(
    state: &mut ShardState<B>,
    req: &Request,
    by_segment: &HashMap<u32, Vec<(u64, u32)>>,
    st: &mut StatsWriter<'_>,
    counters: &RelocationCounters,
) {
    let kind = req.pool;
    let idle = state.whole_free(kind);
    let mut total: u64 = idle.iter().map(|w| w.0).sum();
    if total >= req.segment_size {
        return;
    }
    // The idle whole segments count towards the merge: nothing moves into them.
    let idle: Vec<u32> = idle
        .iter()
        .map(|&(_, _, b)| state.blocks[b].segment)
        .collect();
    // Segments whose live blocks can all move: (live bytes, address, segment, sizes).
    let mut candidates: Vec<(u64, u64, u32, Vec<u64>)> = Vec::new();
    for (&segment, blocks) in by_segment {
        let mut live = Vec::new();
        let mut all_movable = true;
        for &(_, index) in blocks {
            let b = &state.blocks[index];
            if movable(b) {
                live.push(b.size);
            } else if !b.is_idle() {
                all_movable = false;
                break;
            }
        }
        if all_movable && !live.is_empty() {
            let addr = state.segments[segment].source.address;
            candidates.push((live.iter().sum(), addr, segment, live));
        }
    }
    candidates.sort_unstable();
    let config = state.config.clone();
    let mut chosen: Vec<u32> = idle.clone();
    let mut chosen_live: Vec<u64> = Vec::new();
    for (_, _, segment, live) in &candidates {
        let mut trial = chosen.clone();
        trial.push(*segment);
        let mut free = free_sizes(state, kind, &trial);
        let mut all = chosen_live.clone();
        all.extend_from_slice(live);
        if pack(kind, &mut free, &all, &config) {
            chosen = trial;
            chosen_live = all;
            total += state.segments[*segment].source.size;
            if total >= req.segment_size {
                break;
            }
        }
    }
    if total < req.segment_size || chosen.len() == idle.len() {
        return;
    }
    // Every live block of the chosen segments, largest first (the order planned).
    let mut moving: Vec<(u64, u32)> = chosen
        .iter()
        .flat_map(|s| by_segment.get(s).into_iter().flatten().map(|&(_, i)| i))
        .filter(|&i| state.blocks[i].allocated)
        .map(|i| (state.blocks[i].size, i))
        .collect();
    moving.sort_unstable_by(|a, b| b.cmp(a));
    let (mut moves, mut bytes) = (0u64, 0u64);
    for &(s, l) in &moving {
        let moved = move_block(state, l, s, &chosen, st);
        debug_assert!(moved, "a planned move found no target");
        if !moved {
            return;
        }
        moves += 1;
        bytes += s;
    }
    let segment_bytes = chosen[idle.len()..]
        .iter()
        .map(|&s| state.segments[s].source.size)
        .sum();
    counters.note_emptied(
        (chosen.len() - idle.len()) as u64,
        segment_bytes,
        moves,
        bytes,
    );
    debug_assert!(consistent(state), "relocation broke the shard's layout");
}

/// Moves the live block `l` (`size` bytes) into the best-fitting idle free block outside
/// the segments `excluded`: a new block is handed out there, the two blocks trade places in
/// the slab (the live handle's index now names the new place) and the old place is freed.
/// False (nothing changed) when no free block fits.
fn move_block<B: Backend>(
    state: &mut ShardState<B>,
    l: u32,
    size: u64,
    excluded: &[u32],
    st: &mut StatsWriter<'_>,
) -> bool {
    let kind = state.blocks[l].pool;
    let target = state.pool(kind).iter_from(size).find(|&(f, _, b)| {
        !excluded.contains(&state.blocks[b].segment) && fits(kind, f, size, &state.config)
    });
    let Some((f, addr, block)) = target else {
        return false;
    };
    let req = Request {
        size: state.blocks[l].requested,
        rounded: size,
        pool: kind,
        segment_size: 0,
    };
    let handed = state.alloc_pooled(
        Pooled {
            block,
            size: f,
            addr,
            hint: None,
        },
        &req,
        st,
    );
    let t = handed.block;
    debug_assert_eq!(state.blocks[t].size, size);
    state.blocks.swap(l, t);
    // `l` is now the new place, `t` the old one (different segments): their neighbours
    // point the other way.
    for (me, other) in [(l, t), (t, l)] {
        let (prev, next) = (state.blocks[me].prev, state.blocks[me].next);
        if prev != NIL && state.blocks[prev].next == other {
            state.blocks[prev].next = me;
        }
        if next != NIL && state.blocks[next].prev == other {
            state.blocks[next].prev = me;
        }
    }
    state.free(t, st);
    true
}
