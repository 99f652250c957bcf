//! Relocation before a growth ([`Relocation::Merge`](crate::config::Relocation::Merge)):
//! live blocks move into idle free blocks of the stream's other segments so that a request
//! is served, or idle segments are merged, without new reserved bytes.
//!
//! What moves: a live block handed out under a relocating configuration, with no recorded
//! stream uses (`record_stream`) and no pending markers, whose place cell
//! ([`super::place_cell`]) the relocator can claim: no pin held, its place never observed,
//! never used on another stream through a view, not freed by its owner. A block in a
//! thread's freed-block cache (`free_cache`) is allocated here but freed to its owner (its
//! cell is `FREEING` from before it enters the cache until the cache hands it out again and
//! resets the cell), so it never moves while cached. Moves stay inside the block's own stream's
//! shard and pool. A moved block keeps its slab index (the two places trade indices), so its
//! [`Allocation`](super::Allocation)'s free finds it at its new place.
//!
//! In the statistics a move counts nothing but the pools' structure (splits and merges): the
//! allocation keeps what its hand-out counted. In the history (docs/relocation.md, stage 6)
//! a move is a `move_from` at the old place then a `move_to` at the new one
//! ([`History::record_move`](crate::History::record_move)), traced at the commit under the
//! stream's lock. A relocating block's `alloc` is traced while it cannot move: under that
//! lock at the shard's hand-out, or before a thread cache's hand-out resets its cell. Its
//! `free_requested` is traced once it can move no more (its cell `FREEING`), at its current
//! place. So the history is a consistent trace: no `alloc` overlaps a live block, and a
//! moved block's later entries name its new place. A block whose owner dropped it during
//! the move gets its `free_requested` from the mover, after the move.
//!
//! How a plan runs, all under the stream's lock (the move lock of `place_cell`: a pinner
//! that finds a block `MOVING` waits on that lock), with no driver wait:
//! 1. claim every block of the plan (a refused claim drops the plan: nothing moved);
//! 2. hand out each block's target and enqueue the copy of its bytes on the allocation
//!    stream ([`Backend::enqueue_copy`]): the in-order stream runs it after every command
//!    that used the block (all were on that stream, or the block would not be movable);
//! 3. record a marker after the copies. It stays with the bytes the copies wrote and read
//!    (`Block::moved`, kept through frees, merges and splits): a later command on another
//!    stream through a moved block, or through a block handed out of a vacated place, waits
//!    for it ([`PlacePin::prepare_use_on`](super::PlacePin::prepare_use_on)), and an
//!    observation waits for it on the host;
//! 4. commit: each block takes its target's place (a new generation in its cell, so cached
//!    places are refreshed) and its move is traced, its old place is freed (reused on this
//!    stream only after the copies, by stream order), and a block whose owner dropped it
//!    meanwhile is freed.
//!
//! A failed copy or marker rolls the plan back, and so does a marker recorded after a failed
//! wait of the stream ([`Backend::marker_follows_failed_wait`]: the stream's order, which
//! steps 2-4 rely on, may not hold): the targets are freed (those whose copies
//! were enqueued with a marker recorded after them, or kept out of the pool when none can
//! be: `roll_back`), the claims aborted, every block stays where it was; the request then
//! grows as without relocation.

use std::collections::HashMap;

use std::sync::Arc;

use super::block::{Block, NIL};
use super::place_cell::{Generation, MoveEnd, PlaceArena};
use super::relocation_stats::RelocationCounters;
use super::stats_cell::StatsWriter;
use super::stream_state::{Handed, Pooled, Request, ShardState};
use crate::backend::Backend;
use crate::config::AllocConfig;
use crate::size::{self, PoolKind};

/// What the planner reads of one block of the request's pool.
#[derive(Clone, Copy)]
struct Rec {
    addr: u64,
    size: u64,
    /// Slab index.
    index: u32,
    /// Handed out (its bytes are live).
    allocated: bool,
    /// Free with no pending use: reusable.
    idle: bool,
    /// Live and may move ([`movable`]).
    movable: bool,
}

impl Rec {
    /// Its live bytes (none when free).
    fn live(&self) -> u64 {
        if self.allocated {
            self.size
        } else {
            0
        }
    }
}

/// The blocks of every segment of one pool, each segment's in address order, grouped by
/// segment (in slab index order). Read in one pass over the shard's blocks, in slab order:
/// the plan then reads these records only.
struct BySegment {
    recs: Vec<Rec>,
    /// (segment, start, end) into `recs`, by segment.
    groups: Vec<(u32, usize, usize)>,
}

impl BySegment {
    /// The blocks of `kind`'s segments.
    fn of<B: Backend>(state: &ShardState<B>, kind: PoolKind) -> Self {
        let mut all: Vec<(u32, Rec)> = Vec::with_capacity(state.blocks.slots());
        all.extend(
            state
                .blocks
                .iter()
                .filter(|(_, b)| b.pool == kind)
                .map(|(index, b)| {
                    let rec = Rec {
                        addr: b.addr,
                        size: b.size,
                        index,
                        allocated: b.allocated,
                        idle: b.is_idle(),
                        movable: movable(state, b, index),
                    };
                    (b.segment, rec)
                }),
        );
        // Grouped by segment with one counting pass (segments are slab indices), then
        // each segment's few blocks sorted by address.
        let slots = state.segments.slots();
        let mut starts = vec![0usize; slots + 1];
        for &(segment, _) in &all {
            starts[segment as usize + 1] += 1;
        }
        for k in 0..slots {
            starts[k + 1] += starts[k];
        }
        let mut fill = starts.clone();
        let placeholder = Rec {
            addr: 0,
            size: 0,
            index: NIL,
            allocated: false,
            idle: false,
            movable: false,
        };
        let mut recs = vec![placeholder; all.len()];
        for &(segment, rec) in &all {
            recs[fill[segment as usize]] = rec;
            fill[segment as usize] += 1;
        }
        let mut groups: Vec<(u32, usize, usize)> = Vec::new();
        for k in 0..slots {
            let (start, end) = (starts[k], starts[k + 1]);
            if start < end {
                recs[start..end].sort_unstable_by_key(|r| r.addr);
                // `k < slots`, which came from `u32` segment indices.
                groups.push((k as u32, start, end));
            }
        }
        Self { recs, groups }
    }

    /// Each segment with its blocks, in address order.
    fn iter(&self) -> impl Iterator<Item = (u32, &[Rec])> {
        self.groups
            .iter()
            .map(|&(segment, start, end)| (segment, &self.recs[start..end]))
    }

    /// The blocks of `segment`, in address order (none for a segment of another pool).
    fn get(&self, segment: u32) -> &[Rec] {
        match self.groups.binary_search_by_key(&segment, |g| g.0) {
            Ok(at) => &self.recs[self.groups[at].1..self.groups[at].2],
            Err(_) => &[],
        }
    }

    /// Every live block of `segments` as (size, block), largest first (the order a plan
    /// places them in).
    fn live_largest_first(&self, segments: &[u32]) -> Vec<(u64, u32)> {
        let mut live: Vec<(u64, u32)> = segments
            .iter()
            .flat_map(|&s| self.get(s).iter())
            .filter(|r| r.allocated)
            .map(|r| (r.size, r.index))
            .collect();
        live.sort_unstable_by(|a, b| b.cmp(a));
        live
    }
}

/// The idle free blocks of one pool, read once for both plans.
struct PoolFree {
    /// (size, segment) of each, by size (the pool's order).
    by_size: Vec<(u64, u32)>,
    /// The free bytes inside each segment, by slab index (every segment of the shard).
    in_segment: Vec<u64>,
    /// Their sum.
    total: u64,
}

impl PoolFree {
    fn of<B: Backend>(state: &ShardState<B>, kind: PoolKind) -> Self {
        let pool = state.pool(kind);
        let by_size: Vec<(u64, u32)> = pool
            .iter()
            .map(|(size, _, b)| (size, state.blocks[b].segment))
            .collect();
        let mut in_segment = vec![0u64; state.segments.slots()];
        let mut total = 0u64;
        for &(size, at) in &by_size {
            in_segment[at as usize] += size;
            total += size;
        }
        Self {
            by_size,
            in_segment,
            total,
        }
    }
}

/// A run of neighbouring blocks of one segment that spans the request.
#[derive(Clone, Copy)]
struct Window {
    /// Live bytes to move.
    cost: u64,
    /// How many live blocks.
    count: usize,
    /// Lowest address of the run (a tie-break that does not depend on slab indices).
    addr: u64,
    segment: u32,
    /// The run: `start..end` of its segment's blocks ([`BySegment::get`]).
    start: usize,
    end: usize,
}

/// Whether the live block `b` (slab index `index`) may move: handed out under a relocating configuration, no
/// recorded use on another stream and no pending marker (every command that used it was on
/// its allocation stream), and a claimable cell now (the claim itself may still fail: pins
/// are taken without the lock).
fn movable<B: Backend>(state: &ShardState<B>, b: &Block<B>, index: u32) -> bool {
    b.allocated
        && b.relocating
        && b.stream_uses.is_empty()
        && b.event_count == 0
        && state.cells.get(index).is_some_and(|cell| {
            let c = cell.state();
            c.pins == 0
                && !(c.sticky || c.off_stream || c.moving || c.freeing)
                && c.generation < Generation::MAX
        })
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
    // Both plans need the pool's idle free blocks to add up to the request. A cleared run
    // holds its own free blocks, and its live ones move into free blocks outside it. The
    // segments emptied for a merge (all their blocks idle or movable) add up to at most
    // the free bytes outside the idle whole segments, since their live bytes move there;
    // with those idle segments they must reach the request's segment.
    let free_total: u64 = state.pool(kind).iter().map(|(size, _, _)| size).sum();
    if free_total < req.rounded {
        return None;
    }
    // A run spans the request only in a segment at least the request's size.
    let clearable = state
        .segments
        .iter()
        .any(|(_, s)| s.pool == kind && s.source.size >= req.rounded);
    let emptiable = raises && free_total >= req.segment_size;
    if !clearable && !emptiable {
        return None;
    }
    let by_segment = BySegment::of(state, kind);
    let free = PoolFree::of(state, kind);
    let pool_free = &free.by_size;
    // The largest free block, and the largest outside its segment.
    let first = pool_free.iter().max_by_key(|f| f.0).copied();
    let second = first.map_or(0, |(_, at)| {
        pool_free
            .iter()
            .filter(|f| f.1 != at)
            .map(|f| f.0)
            .max()
            .unwrap_or(0)
    });
    let mut windows: Vec<Window> = Vec::new();
    // (size, live bytes, may be in a window) of each block of a segment, in address order.
    let mut runs: Vec<(u64, u64, bool)> = Vec::new();
    for (segment, blocks) in by_segment.iter() {
        // No run of a segment smaller than the request spans it.
        if !clearable || state.segments[segment].source.size < req.rounded {
            continue;
        }
        // A window's live blocks move into free blocks outside its segment: its live bytes
        // fit in their sum, and each of its live blocks in the largest of them. A live block
        // larger than that bounds every window (none that holds it is ever cleared).
        let outside = free_total - free.in_segment[segment as usize];
        let largest_outside = match first {
            Some((_, at)) if at == segment => second,
            Some((size, _)) => size,
            None => 0,
        };
        runs.clear();
        runs.extend(blocks.iter().map(|r| {
            let may = r.idle || (r.movable && r.size <= largest_outside);
            (r.size, r.live(), may)
        }));
        // The shortest run from each block `i` that spans the request, `i..j` (two
        // pointers: a later start's shortest run never ends before an earlier one's).
        let (mut j, mut span, mut cost, mut count) = (0usize, 0u64, 0u64, 0usize);
        for i in 0..runs.len() {
            if j < i {
                (j, span, cost, count) = (i, 0, 0, 0);
            }
            while j < runs.len() && span < req.rounded && runs[j].2 {
                span += runs[j].0;
                cost += runs[j].1;
                count += usize::from(runs[j].1 > 0);
                j += 1;
            }
            if span >= req.rounded
                && cost > 0
                && cost <= outside
                && size::oversize_allows(req.rounded, span, &state.config)
            {
                windows.push(Window {
                    cost,
                    count,
                    addr: blocks[i].addr,
                    segment,
                    start: i,
                    end: j,
                });
            }
            if j > i {
                span -= runs[i].0;
                cost -= runs[i].1;
                count -= usize::from(runs[i].1 > 0);
            }
        }
    }
    windows.sort_unstable_by_key(|w| (w.cost, w.count, w.addr));
    let mut live: Vec<(u64, u32)> = Vec::new();
    let mut sizes: Vec<u64> = Vec::new();
    let mut targets: Vec<u64> = Vec::new();
    for w in windows {
        let run = &by_segment.get(w.segment)[w.start..w.end];
        live.clear();
        live.extend(
            run.iter()
                .filter(|r| r.allocated)
                .map(|r| (r.size, r.index)),
        );
        targets.clear();
        targets.extend(pool_free.iter().filter(|f| f.1 != w.segment).map(|f| f.0));
        live.sort_unstable_by(|a, b| b.cmp(a));
        sizes.clear();
        sizes.extend(live.iter().map(|&(s, _)| s));
        if !pack(kind, &mut targets, &mut sizes, &state.config) {
            continue;
        }
        let (moves, bytes) = execute(state, &live, |s| s != w.segment, st)?;
        let found = state.search(req, false)?;
        counters.note_relocation(moves, bytes);
        let handed = state.alloc_pooled(found, req, st);
        debug_assert!(consistent(state), "relocation broke the shard's layout");
        return Some(handed);
    }
    if emptiable {
        empty_segments(state, req, &by_segment, &free, st, counters);
    }
    None
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
/// `free` (sorted), updating `free`; false when one does not fit. Sorts `live` from the
/// largest.
fn pack(kind: PoolKind, free: &mut Vec<u64>, live: &mut [u64], config: &AllocConfig) -> bool {
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

/// A segment whose blocks are all idle or may move (so that moving its live blocks empties
/// it): its live bytes, its largest live block and its idle free bytes.
struct Emptiable {
    live: u64,
    largest: u64,
    free: u64,
}

impl Emptiable {
    /// The figures of the segment of `blocks`; `None` when one of them may not move (or is
    /// free with a pending use).
    fn of(blocks: &[Rec]) -> Option<Self> {
        let mut e = Emptiable {
            live: 0,
            largest: 0,
            free: 0,
        };
        for r in blocks {
            if r.movable {
                e.live += r.size;
                e.largest = e.largest.max(r.size);
            } else if r.idle {
                e.free += r.size;
            } else {
                return None;
            }
        }
        Some(e)
    }
}

/// What [`empty_segments`]'s trials read: the pool's idle free blocks and the segments'.
struct Plan<'a, F> {
    kind: PoolKind,
    config: &'a AllocConfig,
    /// (size, segment) of every idle free block, by size.
    pool_free: &'a [(u64, u32)],
    /// Idle free bytes per segment.
    free_in: &'a [u64],
    /// Idle free bytes of the pool.
    free_all: u64,
    by_segment: &'a BySegment,
    segment_size: F,
}

impl<F: Fn(u32) -> u64> Plan<'_, F> {
    /// The largest idle free block outside the `excluded` segments and `segment` (the pool's
    /// blocks come by size: the first from the largest that qualifies).
    fn largest_outside(&self, excluded: &[bool], segment: u32) -> u64 {
        self.pool_free
            .iter()
            .rev()
            .find(|&&(_, at)| !excluded[at as usize] && at != segment)
            .map_or(0, |f| f.0)
    }

    /// Chooses segments from `order` ((live bytes, address, segment, largest live block)),
    /// each one whose live blocks, with those of the segments chosen before, pack into the
    /// idle free blocks outside every chosen segment, until the chosen and `idle` segments
    /// add up to `target` bytes (from `total`, the idle ones'). Returns the `idle` segments
    /// then the chosen ones, or `None` when `target` is not reached.
    fn greedy(
        &self,
        order: impl Iterator<Item = (u64, u64, u32, u64)>,
        idle: &[u32],
        mut excluded: Vec<bool>,
        mut excluded_free: u64,
        mut total: u64,
        target: u64,
    ) -> Option<Vec<u32>> {
        let mut chosen: Vec<u32> = idle.to_vec();
        let mut chosen_live: Vec<u64> = Vec::new();
        let (mut chosen_sum, mut chosen_max) = (0u64, 0u64);
        let mut targets: Vec<u64> = Vec::new();
        let mut all: Vec<u64> = Vec::new();
        for (live_sum, _, segment, live_max) in order {
            // Necessary for a packing: the bytes, and the largest block, fit outside.
            let outside = self.free_all - excluded_free - self.free_in[segment as usize];
            let live_max = live_max.max(chosen_max);
            if chosen_sum + live_sum > outside
                || live_max > self.largest_outside(&excluded, segment)
            {
                continue;
            }
            targets.clear();
            targets.extend(
                self.pool_free
                    .iter()
                    .filter(|&&(_, at)| !excluded[at as usize] && at != segment)
                    .map(|&(size, _)| size),
            );
            all.clear();
            all.extend_from_slice(&chosen_live);
            all.extend(
                self.by_segment
                    .get(segment)
                    .iter()
                    .filter(|r| r.allocated)
                    .map(|r| r.size),
            );
            if pack(self.kind, &mut targets, &mut all, self.config) {
                excluded[segment as usize] = true;
                excluded_free += self.free_in[segment as usize];
                chosen.push(segment);
                std::mem::swap(&mut chosen_live, &mut all);
                chosen_sum += live_sum;
                chosen_max = live_max;
                total += (self.segment_size)(segment);
                if total >= target {
                    return Some(chosen);
                }
            }
        }
        None
    }
}

/// Empties whole segments of the request's pool (fewest live bytes first) into idle free
/// blocks of the segments that stay, until the idle whole segments add up to the request's
/// segment, so that the release policy's consolidation merges them; nothing moves when
/// they cannot.
fn empty_segments<B: Backend>(
    state: &mut ShardState<B>,
    req: &Request,
    by_segment: &BySegment,
    free: &PoolFree,
    st: &mut StatsWriter<'_>,
    counters: &RelocationCounters,
) {
    let kind = req.pool;
    let idle = state.whole_free(kind);
    let total: u64 = idle.iter().map(|w| w.0).sum();
    if total >= req.segment_size {
        return;
    }
    // The idle whole segments count towards the merge: nothing moves into them.
    let idle: Vec<u32> = idle
        .iter()
        .map(|&(_, _, b)| state.blocks[b].segment)
        .collect();
    // A trial packs into the pool's idle free blocks outside the segments chosen so far and
    // its own (the pool does not change while planning).
    let (pool_free, free_in, free_all) = (&free.by_size, &free.in_segment, free.total);
    let mut excluded = vec![false; free_in.len()];
    for &segment in &idle {
        excluded[segment as usize] = true;
    }
    // The free bytes of the segments excluded so far (the idle whole ones, to begin with).
    let excluded_free: u64 = idle.iter().map(|&s| free_in[s as usize]).sum();
    let plan = Plan {
        kind,
        config: &state.config,
        pool_free,
        free_in,
        free_all,
        by_segment,
        segment_size: |s: u32| state.segments[s].source.size,
    };
    // Segments whose live blocks can all move: (live bytes, address, segment, largest live
    // block). A segment is left out when its live bytes, or its largest live block, cannot
    // fit in the free blocks outside it and the idle whole segments: no trial below would
    // take it, since the free blocks outside only shrink as segments are chosen.
    let mut candidates: Vec<(u64, u64, u32, u64)> = Vec::new();
    for (segment, blocks) in by_segment.iter() {
        let Some(Emptiable {
            live: live_sum,
            largest: live_max,
            ..
        }) = Emptiable::of(blocks).filter(|e| e.live > 0)
        else {
            continue;
        };
        let outside = free_all - excluded_free - free_in[segment as usize];
        if live_sum > outside || live_max > plan.largest_outside(&excluded, segment) {
            continue;
        }
        let addr = state.segments[segment].source.address;
        candidates.push((live_sum, addr, segment, live_max));
    }
    // Even every candidate emptied would not add up to the new segment: nothing to try.
    let reachable = candidates.iter().fold(total, |t, c| {
        t.saturating_add(state.segments[c.2].source.size)
    });
    if reachable < req.segment_size {
        return;
    }
    candidates.sort_unstable();
    // Greedy from each start in turn: the candidate `first`, then the others by live bytes;
    // the first start whose greedy reaches the request's segment is kept. The first start
    // is the one greedy order (fewest live bytes first); alone, it could take small segments
    // that leave no room for the one that reaches the request (a 20 MiB segment with 6 live
    // MiB, then a 94 MiB one whose 32 live MiB no longer pack: a trace that grew 166 MiB
    // where releasing an idle 142 MiB segment and the emptied 94 MiB one served it).
    let found = (0..candidates.len()).find_map(|first| {
        let order = std::iter::once(first).chain((0..candidates.len()).filter(|&i| i != first));
        plan.greedy(
            order.map(|i| candidates[i]),
            &idle,
            excluded.clone(),
            excluded_free,
            total,
            req.segment_size,
        )
    });
    let Some(chosen) = found else {
        return;
    };
    if chosen.len() == idle.len() {
        return;
    }
    let moving = by_segment.live_largest_first(&chosen);
    let Some((moves, bytes)) = execute(state, &moving, |s| !chosen.contains(&s), st) else {
        return;
    };
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

/// Segments of `req`'s pool that hold live blocks, all of which may move, chosen to join a
/// consolidation whose idle whole segments (`idle` bytes) fall short of the request's
/// segment ([`AllocConfig::consolidate_live`]): their live blocks are to move into the
/// merged segment once it is allocated, and they are released after. Chosen by free bytes,
/// most first, until the merged segment (the idle bytes and the chosen segments') holds the
/// request and the live blocks; the chosen segments must add up to less than the request's
/// segment, so that reserved bytes, which hold the merged segment and the chosen ones for a
/// moment, stay below a plain growth's. Returns (segment, segment address) of each, and
/// their bytes; `None` when no such choice exists.
pub(crate) fn occupied_for_merge<B: Backend>(
    state: &ShardState<B>,
    req: &Request,
    idle: u64,
) -> Option<(Vec<(u32, u64)>, u64)> {
    let kind = req.pool;
    let by_segment = BySegment::of(state, kind);
    // (free bytes, address, segment, live bytes) of each segment whose live blocks all move.
    let mut candidates: Vec<(u64, u64, u32, u64)> = Vec::new();
    for (segment, blocks) in by_segment.iter() {
        if let Some(e) = Emptiable::of(blocks).filter(|e| e.live > 0 && e.free > 0) {
            let addr = state.segments[segment].source.address;
            candidates.push((e.free, addr, segment, e.live));
        }
    }
    candidates.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let (mut bytes, mut live, mut free) = (0u64, 0u64, idle);
    let mut chosen: Vec<(u32, u64)> = Vec::new();
    for (f, addr, segment, l) in candidates {
        let size = state.segments[segment].source.size;
        if bytes + size >= req.segment_size {
            continue;
        }
        bytes += size;
        live += l;
        free += f;
        chosen.push((segment, addr));
        if free >= req.segment_size {
            break;
        }
    }
    if free < req.segment_size {
        return None;
    }
    // The live blocks must pack into what the merged segment keeps beside the request.
    let merged = idle
        .saturating_add(bytes)
        .div_ceil(size::ROUND_LARGE)
        .saturating_mul(size::ROUND_LARGE);
    let ids: Vec<u32> = chosen.iter().map(|&(s, _)| s).collect();
    let mut sizes: Vec<u64> = by_segment
        .live_largest_first(&ids)
        .iter()
        .map(|m| m.0)
        .collect();
    let mut rest = vec![merged.saturating_sub(req.rounded)];
    debug_assert_eq!(sizes.iter().sum::<u64>(), live);
    pack(kind, &mut rest, &mut sizes, &state.config).then_some((chosen, bytes))
}

/// Moves the live blocks of `segments` (chosen by [`occupied_for_merge`]; one whose
/// address changed, or that holds a block that may no longer move, is left) into idle free
/// blocks of the segment `into` (the consolidation's new segment), and returns the whole
/// free blocks of the segments so emptied, for release. Nothing moves when the blocks do
/// not all fit there (the stream's lock was released since the choice).
pub(crate) fn evacuate_into<B: Backend>(
    state: &mut ShardState<B>,
    into: u32,
    kind: PoolKind,
    segments: &[(u32, u64)],
    st: &mut StatsWriter<'_>,
    counters: &RelocationCounters,
) -> Vec<u32> {
    let by_segment = BySegment::of(state, kind);
    let chosen: Vec<u32> = segments
        .iter()
        .filter(|&&(s, addr)| {
            s != into
                && state
                    .segments
                    .get(s)
                    .is_some_and(|seg| seg.source.address == addr && seg.pool == kind)
                && Emptiable::of(by_segment.get(s)).is_some()
        })
        .map(|&(s, _)| s)
        .collect();
    let moving = by_segment.live_largest_first(&chosen);
    let mut targets: Vec<u64> = state
        .pool(kind)
        .iter()
        .filter(|&(_, _, b)| state.blocks[b].segment == into)
        .map(|(size, _, _)| size)
        .collect();
    targets.sort_unstable();
    let mut sizes: Vec<u64> = moving.iter().map(|m| m.0).collect();
    if chosen.is_empty() || !pack(kind, &mut targets, &mut sizes, &state.config) {
        return Vec::new();
    }
    let Some((moves, bytes)) = execute(state, &moving, |s| s == into, st) else {
        return Vec::new();
    };
    let emptied: Vec<u32> = state
        .whole_free(kind)
        .into_iter()
        .filter(|&(_, _, b)| chosen.contains(&state.blocks[b].segment))
        .map(|(_, _, b)| b)
        .collect();
    let segment_bytes = emptied.iter().map(|&b| state.blocks[b].size).sum();
    counters.note_emptied(emptied.len() as u64, segment_bytes, moves, bytes);
    debug_assert!(consistent(state), "relocation broke the shard's layout");
    emptied
}

/// Runs a plan: moves every block of `moving` ((size, live block), largest first) into the
/// best-fitting idle free blocks of the segments that `into` accepts (see the module docs
/// for the steps). Returns (moves, moved bytes), or `None` when the plan was dropped or
/// rolled back (every block stays where it was).
fn execute<B: Backend>(
    state: &mut ShardState<B>,
    moving: &[(u64, u32)],
    into: impl Fn(u32) -> bool,
    st: &mut StatsWriter<'_>,
) -> Option<(u64, u64)> {
    let cells = Arc::clone(&state.cells);
    // 1. Claims.
    let mut claimed: Vec<u32> = Vec::with_capacity(moving.len());
    for &(_, l) in moving {
        if cells.get(l).is_some_and(|c| c.try_claim_for_move().is_ok()) {
            claimed.push(l);
        } else {
            roll_back(state, &cells, &claimed, &[], 0, st);
            return None;
        }
    }
    // 2. Targets and copies.
    let mut placed: Vec<(u32, u32)> = Vec::with_capacity(moving.len());
    for &(size, l) in moving {
        let Some(t) = take_target(state, l, size, &into, st) else {
            debug_assert!(false, "a planned move found no target");
            roll_back(state, &cells, &claimed, &placed, placed.len(), st);
            return None;
        };
        placed.push((l, t));
        if let Err(e) = copy_block(state, l, t) {
            tracing::warn!(error = %e, "a relocation's copy failed: the blocks stay in place");
            // This copy was refused; the ones before it are enqueued.
            roll_back(state, &cells, &claimed, &placed, placed.len() - 1, st);
            return None;
        }
    }
    // 3. The marker after the copies.
    let marker = match B::record_marker(&state.stream) {
        Ok(marker) => {
            state.moves_recorded += 1;
            (state.moves_recorded, Arc::new(marker))
        }
        Err(e) => {
            tracing::warn!(error = %e, "a relocation's marker failed: the blocks stay in place");
            roll_back(state, &cells, &claimed, &placed, placed.len(), st);
            return None;
        }
    };
    // The copies and the marker are in the stream's order only while no wait enqueued on it
    // before them failed (status queries, no wait). After a failed one, a driver may run the
    // copies at once while the owners' earlier commands stay queued (PoCL does): a copy would
    // read its block before those wrote it, those would land in the vacated place, and the
    // marker (which other streams' users of these bytes wait for, `PlacePin::prepare_use_on`,
    // `PendingMove::order`) would complete ahead of them. So such a move is rolled back (the
    // blocks stay where they are, the targets' bytes go with a marker after the copies) and
    // the request grows (review h34). A wait still pending may fail later; that case is open
    // (the copies enqueued behind it then fail: docs/performance.md).
    if B::marker_follows_failed_wait(&marker.1) {
        tracing::debug!("a relocation after a failed wait of its stream: rolled back");
        roll_back(state, &cells, &claimed, &placed, placed.len(), st);
        return None;
    }
    // 4. Commit.
    let (mut moves, mut bytes) = (0u64, 0u64);
    for (&(size, _), &(l, t)) in moving.iter().zip(&placed) {
        trade_places(state, l, t);
        // Traced before the cell's commit makes the new place visible, under the lock that
        // also orders the block's later `free_requested` (`trace_free_requested`).
        state.trace_move(t, l);
        state.forget_place(l);
        // The copy wrote the new place and reads the old one until the marker: both carry
        // it, and so does every block later handed out of the old place's bytes.
        state.blocks[l].moved = Some(marker.clone());
        state.blocks[t].moved = Some(marker.clone());
        // The allocation keeps what its hand-out counted; the move itself counts nothing.
        state.blocks[l].oversize = state.blocks[t].oversize;
        state.blocks[l].slot = state.blocks[t].slot;
        state.free_moved_out(t, st);
        if let Some(Ok(MoveEnd::FreeNow)) = cells.get(l).map(|c| c.commit_move()) {
            // The owner's drop left the free to this mover: its request is traced here, at
            // the new place, after the move.
            state.trace_free_requested(l);
            state.free(l, st);
        }
        moves += 1;
        bytes += size;
    }
    Some((moves, bytes))
}

/// Undoes a plan before its commit: frees the targets handed out (`placed`: (block, target))
/// and aborts the claims, freeing a block whose owner dropped it meanwhile.
///
/// The first `copied` targets had their copies enqueued, and those still write the targets'
/// bytes on the allocation stream. A marker recorded after them goes with those bytes
/// (`Block::moved`), as a move's does: a later owner of such a place that uses it on another
/// stream waits for it ([`PlacePin::prepare_use_on`](super::PlacePin::prepare_use_on)), and
/// so does an observation of it. When no marker can be recorded either, nothing orders a use
/// of those places elsewhere after the copies: they stay out of the pool for good (never
/// reused, merged or released), as a block whose free marker failed.
fn roll_back<B: Backend>(
    state: &mut ShardState<B>,
    cells: &PlaceArena,
    claimed: &[u32],
    placed: &[(u32, u32)],
    copied: usize,
    st: &mut StatsWriter<'_>,
) {
    let (written, untouched) = placed.split_at(copied.min(placed.len()));
    if !written.is_empty() {
        match B::record_marker(&state.stream) {
            Ok(marker) => {
                state.moves_recorded += 1;
                let marker = (state.moves_recorded, Arc::new(marker));
                for &(_, t) in written {
                    state.blocks[t].moved = Some(marker.clone());
                    state.free_moved_out(t, st);
                }
            }
            Err(e) => tracing::error!(
                error = %e,
                places = written.len(),
                "no marker after a rolled-back relocation's copies: their targets are kept out of the pool"
            ),
        }
    }
    for &(_, t) in untouched {
        state.free_moved_out(t, st);
    }
    for &l in claimed {
        if let Some(Ok(MoveEnd::FreeNow)) = cells.get(l).map(|c| c.abort_move()) {
            state.trace_free_requested(l);
            state.free(l, st);
        }
    }
}

/// Hands out the best-fitting idle free block of a segment that `into` accepts that takes
/// `size` bytes exactly (split, or an exact fit) as the target of the live block `l`.
fn take_target<B: Backend>(
    state: &mut ShardState<B>,
    l: u32,
    size: u64,
    into: &impl Fn(u32) -> bool,
    st: &mut StatsWriter<'_>,
) -> Option<u32> {
    let kind = state.blocks[l].pool;
    let (f, addr, block) = state
        .pool(kind)
        .iter_from(size)
        .find(|&(f, _, b)| into(state.blocks[b].segment) && fits(kind, f, size, &state.config))?;
    let req = Request {
        size: state.blocks[l].requested,
        rounded: size,
        pool: kind,
        segment_size: 0,
    };
    let handed = state.alloc_pooled_for_move(
        Pooled {
            block,
            size: f,
            addr,
            hint: None,
        },
        &req,
        st,
    );
    debug_assert_eq!(state.blocks[handed.block].size, size);
    Some(handed.block)
}

/// Enqueues the copy of the live block `l`'s requested bytes to its target `t` on the
/// allocation stream.
fn copy_block<B: Backend>(
    state: &ShardState<B>,
    l: u32,
    t: u32,
) -> Result<(), crate::error::CopyError> {
    let (from, to) = (&state.blocks[l], &state.blocks[t]);
    let src = &state.segments[from.segment].source;
    let dst = &state.segments[to.segment].source;
    B::enqueue_copy(
        &state.stream,
        &src.memory,
        from.addr - src.address,
        &dst.memory,
        to.addr - dst.address,
        from.requested,
    )
}

/// The live block `l` takes the place of its target `t` (another segment): the two trade
/// slab indices, so `l` names the new place (and keeps its cell) and `t` the old one, to
/// be freed.
fn trade_places<B: Backend>(state: &mut ShardState<B>, l: u32, t: u32) {
    state.blocks.swap(l, t);
    for (me, other) in [(l, t), (t, l)] {
        let (prev, next) = (state.blocks[me].prev, state.blocks[me].next);
        if prev != NIL && state.blocks[prev].next == other {
            state.blocks[prev].next = me;
        }
        if next != NIL && state.blocks[next].prev == other {
            state.blocks[next].prev = me;
        }
    }
}
