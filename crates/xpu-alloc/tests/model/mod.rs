//! A naive reference model of the caching allocator: plain vectors, linear scans, no
//! sharding machinery. It applies the same rules (reference §4 plus the documented
//! beyond-PyTorch policy) and predicts addresses, snapshots and every statistic.

#![allow(dead_code)]

use std::collections::VecDeque;

use xpu_alloc::size::{self, PoolKind, ROUND_LARGE, SMALL_BUFFER};
use xpu_alloc::{AllocConfig, BlockState, MemoryStats, ReleasePolicy, StatArray};

const BASE_ADDRESS: u64 = 0x7f00_0000_0000;
const SEGMENT_ALIGN: u64 = 2 << 20;
const SMALL_SEGMENT_MAX: u64 = 4 << 20;

/// Gates that must all be open.
type Marker = Vec<usize>;

#[derive(Clone, Debug)]
enum State {
    Free,
    Alloc {
        id: u64,
        requested: u64,
        uses: Vec<usize>,
    },
    Pending {
        id: u64,
        count: u32,
        requested: u64,
    },
}

#[derive(Clone, Debug)]
struct Block {
    addr: u64,
    size: u64,
    state: State,
    /// Whether its hand-out counted it as an oversize allocation (the configuration then).
    oversize: bool,
}

#[derive(Clone, Debug)]
struct Segment {
    addr: u64,
    size: u64,
    pool: PoolKind,
    blocks: Vec<Block>,
    /// Whether it was counted as an oversize segment when obtained.
    oversize: bool,
}

impl Segment {
    fn is_whole_free(&self) -> bool {
        self.blocks.len() == 1 && matches!(self.blocks[0].state, State::Free)
    }
}

#[derive(Default, Debug)]
struct Shard {
    stream: usize,
    segments: Vec<Segment>,
    fifos: Vec<(usize, VecDeque<(Marker, u64)>)>,
    /// Sizes released by consolidations and not regrown since (before_grow).
    released: Vec<u64>,
    /// Sizes of unsplit segments released before growing (before_grow, unsplit).
    unsplit_released: std::collections::BTreeSet<u64>,
}

#[derive(Default, Debug, Clone)]
struct Stream {
    gate: Option<usize>,
    deps: Vec<Marker>,
}

/// A block as the snapshot shows it: (address, size, requested, state).
pub type BlockView = (u64, u64, u64, BlockState);
/// A segment as the snapshot shows it: (stream, address, size, blocks).
pub type SegmentView = (usize, u64, u64, Vec<BlockView>);

pub struct Model {
    pub config: AllocConfig,
    capacity: u64,
    max_alloc: u64,
    used: u64,
    next_address: u64,
    high_water: u64,
    shards: Vec<Shard>,
    streams: Vec<Stream>,
    gates: Vec<bool>,
    pub stats: MemoryStats,
    next_id: u64,
}

/// Outcome of an allocation in the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelAlloc {
    /// (allocation id, address, block size)
    Ok(u64, u64, u64),
    TooLarge,
    OutOfMemory,
}

fn inc(a: &mut StatArray, pool: PoolKind, n: u64) {
    a.increase(pool, n);
}
fn dec(a: &mut StatArray, pool: PoolKind, n: u64) {
    a.decrease(pool, n);
}

impl Model {
    pub fn new(config: AllocConfig, capacity: u64, max_alloc: u64, streams: usize) -> Self {
        let stats = MemoryStats {
            max_split_size: i64::try_from(config.max_split_size).unwrap_or(-1),
            ..MemoryStats::default()
        };
        Self {
            config,
            capacity,
            max_alloc,
            used: 0,
            next_address: BASE_ADDRESS,
            high_water: 0,
            shards: Vec::new(),
            streams: vec![Stream::default(); streams],
            gates: Vec::new(),
            stats,
            next_id: 1,
        }
    }

    // ---- streams and markers ----

    pub fn close_gate(&mut self, stream: usize) {
        self.gates.push(false);
        self.streams[stream].gate = Some(self.gates.len() - 1);
    }

    pub fn open_gate(&mut self, stream: usize) {
        if let Some(g) = self.streams[stream].gate.take() {
            self.gates[g] = true;
        }
    }

    fn complete(&self, m: &Marker) -> bool {
        m.iter().all(|&g| self.gates[g])
    }

    fn record(&mut self, stream: usize) -> Marker {
        let deps: Vec<Marker> = self.streams[stream]
            .deps
            .iter()
            .filter(|d| !self.complete(d))
            .cloned()
            .collect();
        self.streams[stream].deps = deps.clone();
        let mut m: Marker = self.streams[stream].gate.into_iter().collect();
        for d in deps {
            m.extend(d);
        }
        m
    }

    fn wait(&mut self, m: &Marker) {
        for &g in m {
            self.gates[g] = true;
        }
    }

    fn stream_wait(&mut self, stream: usize, m: Marker) {
        if !self.complete(&m) {
            self.streams[stream].deps.push(m);
        }
    }

    // ---- shards ----

    fn shard_index(&mut self, stream: usize) -> usize {
        if let Some(i) = self.shards.iter().position(|s| s.stream == stream) {
            return i;
        }
        self.shards.push(Shard {
            stream,
            ..Shard::default()
        });
        self.shards.len() - 1
    }

    fn find_block(&self, id: u64) -> Option<(usize, usize, usize)> {
        for (si, shard) in self.shards.iter().enumerate() {
            for (gi, seg) in shard.segments.iter().enumerate() {
                for (bi, b) in seg.blocks.iter().enumerate() {
                    let bid = match b.state {
                        State::Alloc { id, .. } | State::Pending { id, .. } => id,
                        State::Free => continue,
                    };
                    if bid == id {
                        return Some((si, gi, bi));
                    }
                }
            }
        }
        None
    }

    // ---- the rules ----

    fn free_block(&mut self, si: usize, gi: usize, bi: usize) {
        let seg = &mut self.shards[si].segments[gi];
        let pool = seg.pool;
        let original = seg.blocks[bi].size;
        let oversize = seg.blocks[bi].oversize;
        let requested = match seg.blocks[bi].state {
            State::Alloc { requested, .. } | State::Pending { requested, .. } => requested,
            State::Free => 0,
        };
        seg.blocks[bi].state = State::Free;
        let mut net_blocks: i64 = 0;
        let mut net_bytes: i64 = 0;
        let mut bi = bi;
        if bi > 0 && matches!(seg.blocks[bi - 1].state, State::Free) {
            let prev = seg.blocks.remove(bi - 1);
            bi -= 1;
            seg.blocks[bi].addr = prev.addr;
            seg.blocks[bi].size += prev.size;
            net_blocks -= 1;
            net_bytes -= prev.size as i64;
        }
        if bi + 1 < seg.blocks.len() && matches!(seg.blocks[bi + 1].state, State::Free) {
            let next = seg.blocks.remove(bi + 1);
            seg.blocks[bi].size += next.size;
            net_blocks -= 1;
            net_bytes -= next.size as i64;
        }
        if seg.blocks.len() > 1 {
            net_blocks += 1;
            net_bytes += seg.blocks[bi].size as i64;
        }
        let st = &mut self.stats;
        for (arr, net) in [
            (&mut st.inactive_split, net_blocks),
            (&mut st.inactive_split_bytes, net_bytes),
        ] {
            if net > 0 {
                inc(arr, pool, net as u64);
            } else if net < 0 {
                dec(arr, pool, (-net) as u64);
            }
        }
        dec(&mut st.active, pool, 1);
        dec(&mut st.active_bytes, pool, original);
        dec(&mut st.requested_bytes, pool, requested);
        if oversize {
            st.oversize_allocations.decrease(1);
        }
    }

    fn marker_done(&mut self, id: u64) {
        let Some((si, gi, bi)) = self.find_block(id) else {
            panic!("model: pending block {id} missing")
        };
        let done = match &mut self.shards[si].segments[gi].blocks[bi].state {
            State::Pending { count, .. } => {
                *count -= 1;
                *count == 0
            }
            other => panic!("model: block {id} not pending: {other:?}"),
        };
        if done {
            self.free_block(si, gi, bi);
        }
    }

    fn process_events(&mut self, si: usize) {
        let mut done = Vec::new();
        let mut fifos = std::mem::take(&mut self.shards[si].fifos);
        for (_, fifo) in &mut fifos {
            while fifo.front().is_some_and(|(m, _)| self.complete(m)) {
                done.push(fifo.pop_front().unwrap().1);
            }
        }
        fifos.retain(|(_, f)| !f.is_empty());
        self.shards[si].fifos = fifos;
        for id in done {
            self.marker_done(id);
        }
    }

    /// Waits for every pending marker (the allocator does it without its locks); the
    /// following `process_events` frees their blocks. Returns whether there was any.
    fn wait_pending(&mut self) -> bool {
        let markers: Vec<Marker> = self
            .shards
            .iter()
            .flat_map(|s| {
                s.fifos
                    .iter()
                    .flat_map(|(_, f)| f.iter().map(|(m, _)| m.clone()))
            })
            .collect();
        for m in &markers {
            self.wait(m);
        }
        !markers.is_empty()
    }

    fn reserved(&self) -> u64 {
        self.used
    }

    fn allocate_segment(&mut self, size: u64) -> Option<u64> {
        if size == 0 || size > self.max_alloc || self.used + size > self.capacity {
            return None;
        }
        let addr = self.next_address;
        self.next_address += size.div_ceil(SEGMENT_ALIGN) * SEGMENT_ALIGN;
        self.used += size;
        self.high_water = self.high_water.max(self.used);
        Some(addr)
    }

    fn add_segment(&mut self, si: usize, addr: u64, size: u64, pool: PoolKind) -> usize {
        let st = &mut self.stats;
        inc(&mut st.segment, pool, 1);
        inc(&mut st.reserved_bytes, pool, size);
        st.num_device_alloc += 1;
        if size >= self.config.max_split_size {
            st.oversize_segments.increase(1);
        }
        self.shards[si].segments.push(Segment {
            addr,
            size,
            pool,
            blocks: vec![Block {
                addr,
                size,
                state: State::Free,
                oversize: false,
            }],
            oversize: size >= self.config.max_split_size,
        });
        self.shards[si].segments.len() - 1
    }

    fn release_segment(&mut self, si: usize, gi: usize) {
        let seg = self.shards[si].segments.remove(gi);
        let st = &mut self.stats;
        dec(&mut st.segment, seg.pool, 1);
        dec(&mut st.reserved_bytes, seg.pool, seg.size);
        st.num_device_free += 1;
        if seg.oversize {
            st.oversize_segments.decrease(1);
        }
        self.used -= seg.size;
    }

    /// Whole free segments of a pool, sorted by (size, address): (size, address).
    fn whole_free(&self, si: usize, pool: PoolKind) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self.shards[si]
            .segments
            .iter()
            .filter(|s| s.pool == pool && s.is_whole_free())
            .map(|s| (s.size, s.addr))
            .collect();
        v.sort_unstable();
        v
    }

    fn release_by_addr(&mut self, si: usize, addr: u64) {
        let gi = self.shards[si]
            .segments
            .iter()
            .position(|s| s.addr == addr)
            .unwrap();
        self.release_segment(si, gi);
    }

    /// Releases every whole free segment of a shard once the work enqueued on its stream
    /// has completed (a marker recorded on the stream and waited for).
    fn release_cached(&mut self, si: usize) {
        if self.whole_free(si, PoolKind::Small).is_empty()
            && self.whole_free(si, PoolKind::Large).is_empty()
        {
            return;
        }
        let m = self.record(self.shards[si].stream);
        self.wait(&m);
        for pool in [PoolKind::Small, PoolKind::Large] {
            for (_, addr) in self.whole_free(si, pool) {
                self.release_by_addr(si, addr);
            }
        }
    }

    fn alloc_found(
        &mut self,
        si: usize,
        gi: usize,
        bi: usize,
        size: u64,
        rounded: u64,
    ) -> (u64, u64, u64) {
        let config = self.config.clone();
        let id = self.next_id;
        self.next_id += 1;
        let seg = &mut self.shards[si].segments[gi];
        let pool = seg.pool;
        let already_split = seg.blocks.len() > 1;
        let block_size = seg.blocks[bi].size;
        let st = &mut self.stats;
        if size::should_split(pool, block_size, rounded, &config) {
            let remaining = block_size - rounded;
            let addr = seg.blocks[bi].addr;
            seg.blocks[bi].size = rounded;
            seg.blocks.insert(
                bi + 1,
                Block {
                    addr: addr + rounded,
                    size: remaining,
                    state: State::Free,
                    oversize: false,
                },
            );
            if already_split {
                dec(&mut st.inactive_split_bytes, pool, rounded);
            } else {
                inc(&mut st.inactive_split, pool, 1);
                inc(&mut st.inactive_split_bytes, pool, remaining);
            }
        } else if already_split {
            dec(&mut st.inactive_split, pool, 1);
            dec(&mut st.inactive_split_bytes, pool, block_size);
        }
        let b = &mut seg.blocks[bi];
        b.state = State::Alloc {
            id,
            requested: size,
            uses: Vec::new(),
        };
        let (addr, bsize) = (b.addr, b.size);
        b.oversize = bsize >= config.max_split_size;
        inc(&mut st.allocation, pool, 1);
        inc(&mut st.allocated_bytes, pool, bsize);
        inc(&mut st.active, pool, 1);
        inc(&mut st.active_bytes, pool, bsize);
        inc(&mut st.requested_bytes, pool, size);
        if bsize >= config.max_split_size {
            st.oversize_allocations.increase(1);
        }
        (id, addr, bsize)
    }

    fn search(&self, si: usize, pool: PoolKind, rounded: u64) -> Option<(usize, usize)> {
        let mut best: Option<(u64, u64, usize, usize)> = None;
        // Unsplit: only whole segments are handed out (one split before, when splitting was
        // on, is passed over).
        let whole_only = !self.config.splits_segments();
        for (gi, seg) in self.shards[si].segments.iter().enumerate() {
            if seg.pool != pool || (whole_only && seg.blocks.len() > 1) {
                continue;
            }
            for (bi, b) in seg.blocks.iter().enumerate() {
                if matches!(b.state, State::Free)
                    && b.size >= rounded
                    && best.is_none_or(|(s, a, _, _)| (b.size, b.addr) < (s, a))
                {
                    best = Some((b.size, b.addr, gi, bi));
                }
            }
        }
        let (bsize, _, gi, bi) = best?;
        size::oversize_allows(rounded, bsize, &self.config).then_some((gi, bi))
    }

    fn try_new_segment(
        &mut self,
        si: usize,
        seg_size: u64,
        pool: PoolKind,
        size: u64,
        rounded: u64,
    ) -> Option<(u64, u64, u64)> {
        let addr = self.allocate_segment(seg_size)?;
        let gi = self.add_segment(si, addr, seg_size, pool);
        Some(self.alloc_found(si, gi, 0, size, rounded))
    }

    /// before_grow with unsplit segments: a new segment that would raise the high-water
    /// mark first releases the shard's idle segments (both pools), largest first, until they
    /// add up to it; not for a size released so before.
    fn release_idle_before_grow(&mut self, si: usize, seg_size: u64) {
        if self.reserved() + seg_size <= self.high_water
            || self.shards[si].unsplit_released.contains(&seg_size)
        {
            return;
        }
        let mut idle = self.whole_free(si, PoolKind::Large);
        idle.extend(self.whole_free(si, PoolKind::Small));
        idle.sort_unstable_by(|a, b| b.cmp(a));
        let mut released = 0u64;
        for (size, addr) in idle {
            if released >= seg_size {
                break;
            }
            self.release_by_addr(si, addr);
            let sizes = &mut self.shards[si].unsplit_released;
            if sizes.len() >= 4096 {
                sizes.clear();
            }
            sizes.insert(size);
            released += size;
        }
    }

    fn policy_size(&mut self, si: usize, pool: PoolKind, seg_size: u64, rounded: u64) -> u64 {
        match pool {
            PoolKind::Small => {
                let small: u64 = self.shards[si]
                    .segments
                    .iter()
                    .filter(|s| s.pool == PoolKind::Small)
                    .map(|s| s.size)
                    .sum();
                let target = small / 8;
                if target < SMALL_BUFFER {
                    SMALL_BUFFER
                } else {
                    (1u64 << (63 - target.leading_zeros())).min(SMALL_SEGMENT_MAX)
                }
            }
            PoolKind::Large => {
                let (used, high_water) = (self.used, self.high_water);
                let share = self.config.regrow_peak_fraction;
                let released = &mut self.shards[si].released;
                if released.iter().any(|&r| r >= seg_size) {
                    let total: u64 = released.iter().sum();
                    let mut size = (total.div_ceil(ROUND_LARGE) * ROUND_LARGE)
                        .min(seg_size * self.config.regrow_factor);
                    // regrow_peak_fraction: a regrowth that would raise the high-water mark
                    // gets at most the room below it, its own segment and the share of the
                    // mark (whole 2 MiB units); the oversize rule then judges that size.
                    if share > 0.0 && used + size > high_water {
                        let bet = (high_water as f64 * share) as u64;
                        let limit =
                            (high_water - used + seg_size + bet) / ROUND_LARGE * ROUND_LARGE;
                        size = size.min(limit.max(seg_size));
                    }
                    if size >= seg_size
                        && size <= self.max_alloc
                        && size::oversize_allows(rounded, size, &self.config)
                    {
                        released.sort_unstable();
                        let mut left = size;
                        while left > 0 {
                            let Some(last) = released.pop() else { break };
                            if last > left {
                                released.push(last - left);
                                left = 0;
                            } else {
                                left -= last;
                            }
                        }
                        return size;
                    }
                }
                if self.reserved() + seg_size <= self.high_water {
                    return seg_size;
                }
                let idle = self.whole_free(si, PoolKind::Large);
                let total: u64 = idle.iter().map(|w| w.0).sum();
                let merged = total.div_ceil(ROUND_LARGE) * ROUND_LARGE;
                let oversize = !size::oversize_allows(rounded, merged, &self.config);
                if total < seg_size || merged > self.max_alloc || oversize {
                    return seg_size;
                }
                self.shards[si].released.extend(idle.iter().map(|w| w.0));
                for (_, addr) in idle {
                    self.release_by_addr(si, addr);
                }
                merged.max(seg_size)
            }
        }
    }

    fn release_available_cached_blocks(&mut self, si: usize, pool: PoolKind, rounded: u64) -> bool {
        let max_split = self.config.max_split_size;
        if max_split == u64::MAX {
            return false;
        }
        let key = rounded.max(max_split);
        let whole = self.whole_free(si, pool);
        if let Some(&(_, addr)) = whole.iter().find(|w| w.0 >= key) {
            self.release_by_addr(si, addr);
            return true;
        }
        // Free blocks of the pool from the largest, while oversize, whole ones only.
        let mut all_free: Vec<(u64, u64, bool)> = Vec::new();
        for seg in self.shards[si].segments.iter().filter(|s| s.pool == pool) {
            for b in &seg.blocks {
                if matches!(b.state, State::Free) {
                    all_free.push((b.size, b.addr, seg.blocks.len() == 1));
                }
            }
        }
        all_free.sort_unstable();
        let candidates: Vec<(u64, u64)> = all_free
            .iter()
            .rev()
            .take_while(|f| f.0 >= max_split)
            .filter(|f| f.2)
            .map(|f| (f.0, f.1))
            .collect();
        let mut released = 0;
        for (size, addr) in candidates {
            if released >= key {
                break;
            }
            self.release_by_addr(si, addr);
            released += size;
        }
        released >= key
    }

    fn release_cached_all(&mut self) {
        for si in 0..self.shards.len() {
            self.release_cached(si);
        }
    }

    fn steal(
        &mut self,
        me: usize,
        pool: PoolKind,
        size: u64,
        rounded: u64,
    ) -> Option<(u64, u64, u64)> {
        let mut best: Option<(u64, u64, usize)> = None;
        for si in 0..self.shards.len() {
            if si == me {
                continue;
            }
            let found = self
                .whole_free(si, pool)
                .into_iter()
                .find(|&(s, _)| s >= rounded && size::oversize_allows(rounded, s, &self.config));
            if let Some((s, a)) = found {
                if best.is_none_or(|(bs, ba, _)| (s, a) < (bs, ba)) {
                    best = Some((s, a, si));
                }
            }
        }
        let (_, addr, owner) = best?;
        let owner_stream = self.shards[owner].stream;
        let my_stream = self.shards[me].stream;
        let marker = self.record(owner_stream);
        self.stream_wait(my_stream, marker);
        let gi = self.shards[owner]
            .segments
            .iter()
            .position(|s| s.addr == addr)
            .unwrap();
        let seg = self.shards[owner].segments.remove(gi);
        self.shards[me].segments.push(seg);
        let gi = self.shards[me].segments.len() - 1;
        Some(self.alloc_found(me, gi, 0, size, rounded))
    }

    /// The device-wide search: every stream's completed events processed, then a cached
    /// block of shard `si`'s pool, else a segment stolen from another stream.
    fn find_device_wide(
        &mut self,
        si: usize,
        pool: PoolKind,
        size: u64,
        rounded: u64,
    ) -> Option<(u64, u64, u64)> {
        for s in 0..self.shards.len() {
            self.process_events(s);
        }
        if let Some((gi, bi)) = self.search(si, pool, rounded) {
            return Some(self.alloc_found(si, gi, bi, size, rounded));
        }
        self.steal(si, pool, size, rounded)
    }

    /// `allocate(size)` on `stream`.
    pub fn alloc(&mut self, stream: usize, size: u64) -> ModelAlloc {
        assert!(size > 0);
        if size > self.max_alloc {
            return ModelAlloc::TooLarge;
        }
        let si = self.shard_index(stream);
        self.process_events(si);
        let rounded = size::round_size(size, &self.config);
        let mut seg_size = size::segment_size(rounded, &self.config);
        if seg_size > self.max_alloc {
            seg_size = rounded;
        }
        if rounded > self.max_alloc {
            return ModelAlloc::TooLarge;
        }
        let pool = PoolKind::for_size(rounded);
        let ok = |r: (u64, u64, u64)| ModelAlloc::Ok(r.0, r.1, r.2);
        if let Some((gi, bi)) = self.search(si, pool, rounded) {
            return ok(self.alloc_found(si, gi, bi, size, rounded));
        }
        // Unsplit segments are exactly their request: no policy sizes them, but idle ones
        // may be released to make room.
        let grow = if self.config.release_policy != ReleasePolicy::BeforeGrow {
            seg_size
        } else if self.config.splits_segments() {
            self.policy_size(si, pool, seg_size, rounded)
        } else {
            self.release_idle_before_grow(si, seg_size);
            seg_size
        };
        if let Some(r) = self.try_new_segment(si, grow, pool, size, rounded) {
            return ok(r);
        }
        if grow != seg_size {
            if let Some(r) = self.try_new_segment(si, seg_size, pool, size, rounded) {
                return ok(r);
            }
        }
        if self.release_available_cached_blocks(si, pool, rounded) {
            if let Some(r) = self.try_new_segment(si, seg_size, pool, size, rounded) {
                return ok(r);
            }
        }
        // Device-wide part.
        if let Some(r) = self.find_device_wide(si, pool, size, rounded) {
            return ok(r);
        }
        // Wait for the pending frees, search again, then release cached segments.
        self.stats.num_sync_all_streams += 1;
        if self.wait_pending() {
            if let Some(r) = self.find_device_wide(si, pool, size, rounded) {
                return ok(r);
            }
        }
        self.release_cached_all();
        if let Some((gi, bi)) = self.search(si, pool, rounded) {
            return ok(self.alloc_found(si, gi, bi, size, rounded));
        }
        self.stats.num_alloc_retries += 1;
        if let Some(r) = self.try_new_segment(si, seg_size, pool, size, rounded) {
            return ok(r);
        }
        self.stats.num_ooms += 1;
        ModelAlloc::OutOfMemory
    }

    /// `set_config(config)`: applies from the next allocation.
    pub fn set_config(&mut self, config: AllocConfig) {
        self.stats.max_split_size = i64::try_from(config.max_split_size).unwrap_or(-1);
        self.config = config;
    }

    /// `record_stream(ptr, stream)`.
    pub fn record_stream(&mut self, id: u64, stream: usize) {
        let (si, gi, bi) = self.find_block(id).expect("live block");
        if self.shards[si].stream == stream {
            return;
        }
        if let State::Alloc { uses, .. } = &mut self.shards[si].segments[gi].blocks[bi].state {
            if !uses.contains(&stream) {
                uses.push(stream);
            }
        }
    }

    /// Drop of the DataPtr.
    pub fn free(&mut self, id: u64) {
        let (si, gi, bi) = self.find_block(id).expect("live block");
        let seg = &mut self.shards[si].segments[gi];
        let pool = seg.pool;
        let b = &mut seg.blocks[bi];
        let size = b.size;
        let State::Alloc {
            requested, uses, ..
        } = std::mem::replace(&mut b.state, State::Free)
        else {
            panic!("not allocated")
        };
        dec(&mut self.stats.allocation, pool, 1);
        dec(&mut self.stats.allocated_bytes, pool, size);
        if uses.is_empty() {
            self.shards[si].segments[gi].blocks[bi].state = State::Alloc {
                id,
                requested,
                uses,
            };
            self.free_block(si, gi, bi);
            return;
        }
        let count = uses.len() as u32;
        self.shards[si].segments[gi].blocks[bi].state = State::Pending {
            id,
            count,
            requested,
        };
        for u in uses {
            let m = self.record(u);
            let fifos = &mut self.shards[si].fifos;
            if let Some((_, f)) = fifos.iter_mut().find(|(k, _)| *k == u) {
                f.push_back((m, id));
            } else {
                fifos.push((u, VecDeque::from([(m, id)])));
            }
        }
    }

    /// `empty_cache()`.
    pub fn empty_cache(&mut self) {
        self.stats.num_sync_all_streams += 1;
        self.wait_pending();
        for s in 0..self.shards.len() {
            self.process_events(s);
        }
        self.release_cached_all();
    }

    /// Segments sorted by address, as the snapshot shows them.
    pub fn view(&self) -> Vec<SegmentView> {
        let mut out: Vec<SegmentView> = Vec::new();
        for shard in &self.shards {
            for seg in &shard.segments {
                let blocks = seg
                    .blocks
                    .iter()
                    .map(|b| match b.state {
                        State::Free => (b.addr, b.size, 0, BlockState::Inactive),
                        State::Alloc { requested, .. } => {
                            (b.addr, b.size, requested, BlockState::Allocated)
                        }
                        State::Pending { requested, .. } => {
                            (b.addr, b.size, requested, BlockState::PendingFree)
                        }
                    })
                    .collect();
                out.push((shard.stream, seg.addr, seg.size, blocks));
            }
        }
        out.sort_by_key(|s| s.1);
        out
    }

    pub fn used(&self) -> u64 {
        self.used
    }
}
