// Included inside struct group<N_WARPS>: member functions only.
// Global <-> shared vectors, split over the group's threads (no trailing barrier: call sync()).

template <ducks::sv::all SV, ducks::gl::all GL> __device__ static inline void load(SV &dst, const GL &src, const coord &idx) {
    ::kittens::detail::memory::load_sv<GROUP_THREADS>(dst, src, idx, laneid());
}
template <ducks::sv::all SV, ducks::gl::all GL> __device__ static inline void store(const GL &dst, const SV &src, const coord &idx) {
    ::kittens::detail::memory::store_sv<GROUP_THREADS>(dst, src, idx, laneid());
}
template <ducks::sv::all SV, ducks::gl::all GL>
__device__ static inline void load_async(SV &dst, const GL &src, const coord &idx) {
    ::kittens::detail::memory::load_sv_async<GROUP_THREADS>(dst, src, idx, laneid());
}
