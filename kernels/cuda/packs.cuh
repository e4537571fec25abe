#pragma once
// Packs: N elements of T moved by one load or store instruction (up to 16 bytes). Loads and
// stores go through a plain unsigned vector type of the same size, so a pack of 16-bit floats
// compiles to one wide access rather than N scalar ones. Shared by every vectorized kernel, and
// the raw types by width by the kernels that only move bytes (copies, gathers).
#include <bit>
#include <cstdint>
#include <cstring>
#include <tuple>

namespace genesis::kernels::cuda {

template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Elements of T in 16 bytes: the widest pack.
template <class T>
inline constexpr int kPack = static_cast<int>(16 / sizeof(T));
template <class T>
using Pack16 = Pack<T, kPack<T>>;

// The unsigned type of BYTES bytes (1, 2, 4, 8 or 16) that moves them in one access.
template <int BYTES>
struct RawVector {
  static_assert(std::has_single_bit(unsigned{BYTES}) && BYTES <= 16, "1, 2, 4, 8 or 16 bytes");
  // By log2 of the size.
  using type =
      std::tuple_element_t<std::bit_width(unsigned{BYTES}) - 1, std::tuple<uint8_t, uint16_t, uint32_t, uint2, uint4>>;
};

// Calls f(RawVector<BYTES>{}) for elements of `bytes` = 1, 2, 4, 8 or 16 bytes: moving data needs
// only their width, one instantiation per size rather than per dtype.
template <class F>
void with_raw_width(int64_t bytes, F&& f) {
  switch (bytes) {
    case 1:
      return f(RawVector<1>{});
    case 2:
      return f(RawVector<2>{});
    case 4:
      return f(RawVector<4>{});
    case 8:
      return f(RawVector<8>{});
    default:
      return f(RawVector<16>{});
  }
}

// p is aligned to the pack's size.
template <int N, class T>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
  using Raw = typename RawVector<sizeof(T) * N>::type;
  const Raw raw = *reinterpret_cast<const Raw*>(p);
  Pack<T, N> pack;
  memcpy(&pack, &raw, sizeof(Raw));
  return pack;
}
template <int N, class T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& pack) {
  using Raw = typename RawVector<sizeof(T) * N>::type;
  Raw raw;
  memcpy(&raw, &pack, sizeof(Raw));
  *reinterpret_cast<Raw*>(p) = raw;
}

// The same through pointers to packs.
template <class T, int N>
__device__ __forceinline__ Pack<T, N> load_pack(const Pack<T, N>* p) {
  return load_pack<N>(reinterpret_cast<const T*>(p));
}
template <class T, int N>
__device__ __forceinline__ void store_pack(Pack<T, N>* p, const Pack<T, N>& pack) {
  store_pack<N>(reinterpret_cast<T*>(p), pack);
}

}  // namespace genesis::kernels::cuda
