// Included inside struct group<N_WARPS>: member functions only.
//
// Global <-> shared tiles, split over all GROUP_THREADS threads in 16-byte units (coalesced),
// synchronous or through cp.async. These do NOT end with a barrier: call sync() (or
// load_async_wait(), which includes one) before other warps read what the group wrote.
//
// Register tiles: each warp moves its own slice. The shared (or global) block holds the whole
// group's rows, interleaved in 16-row blocks the way wgmma accumulators are: warp w's register
// row block h is rows 16*(N*h + w) .. +15. For warpgroup and rt<float, 16, C>, warp w owns rows
// 16w .. 16w+15; for rt<float, 32, C>, rows 16w.. and 64+16w...

template <ducks::st::all ST, ducks::gl::all GL> __device__ static inline void load(ST &dst, const GL &src, const coord &idx) {
    ::kittens::detail::memory::load_st<GROUP_THREADS>(dst, src, idx, laneid());
}
template <ducks::st::all ST, ducks::gl::all GL> __device__ static inline void store(const GL &dst, const ST &src, const coord &idx) {
    ::kittens::detail::memory::store_st<GROUP_THREADS>(dst, src, idx, laneid());
}
// The first `rows` rows only, from element row idx.row (global_to_shared.cuh's store_st_rows).
template <ducks::st::all ST, ducks::gl::all GL>
__device__ static inline void store_rows(const GL &dst, const ST &src, const row_coord &idx, int rows) {
    ::kittens::detail::memory::store_st_rows<GROUP_THREADS>(dst, src, idx, rows, laneid());
}
// One commit group per call and per thread; complete after load_async_wait<N>().
template <ducks::st::all ST, ducks::gl::all GL>
__device__ static inline void load_async(ST &dst, const GL &src, const coord &idx) {
    ::kittens::detail::memory::load_st_async<GROUP_THREADS>(dst, src, idx, laneid());
}
// Waits until at most N of this thread's commit groups are pending, then syncs the group, so
// every warp sees the copies of every other warp.
template <int N = 0> __device__ static inline void load_async_wait() {
    ::kittens::detail::memory::cp_async_wait<N>();
    sync();
}

// Shared tile of N_WARPS * RT::rows rows -> each warp's register slice (see the mapping above).
template <ducks::rt::all RT, ducks::st::all ST> __device__ static inline void load(RT &dst, const ST &src) {
    static_assert(ST::rows == N_WARPS * RT::rows && ST::cols == RT::cols,
                  "group<N>::load(rt, st): the shared tile must have N times the register tile's rows and the same cols");
    ::kittens::detail::memory::load_rt_st(dst, src, TILE_DIM * warpid(), TILE_DIM * N_WARPS, 0);
}
template <ducks::st::all ST, ducks::rt::all RT> __device__ static inline void store(ST &dst, const RT &src) {
    static_assert(ST::rows == N_WARPS * RT::rows && ST::cols == RT::cols,
                  "group<N>::store(st, rt): the shared tile must have N times the register tile's rows and the same cols");
    ::kittens::detail::memory::store_rt_st(dst, src, TILE_DIM * warpid(), TILE_DIM * N_WARPS, 0);
}

// Global <-> each warp's register slice, same row mapping. coord r counts blocks of
// N_WARPS * RT::rows rows (the group's whole block), c counts RT::cols columns.
template <ducks::rt::all RT, ducks::gl::all GL> __device__ static inline void load(RT &dst, const GL &src, const coord &idx) {
    const auto w = ::kittens::detail::memory::make_window(src, idx.b, idx.d, idx.r * N_WARPS * RT::rows + TILE_DIM * warpid(),
                                                          idx.c * RT::cols);
    ::kittens::detail::memory::load_rt(dst, w, TILE_DIM * N_WARPS);
}
template <ducks::rt::all RT, ducks::gl::all GL> __device__ static inline void store(const GL &dst, const RT &src, const coord &idx) {
    const auto w = ::kittens::detail::memory::make_window(dst, idx.b, idx.d, idx.r * N_WARPS * RT::rows + TILE_DIM * warpid(),
                                                          idx.c * RT::cols);
    ::kittens::detail::memory::store_rt(w, src, TILE_DIM * N_WARPS);
}
