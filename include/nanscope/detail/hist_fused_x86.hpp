// nanscope — detail/hist_fused_x86.hpp: the exponent histogram fused into the AVX-512 kernel's block loop
// (nibble counters fed from the vectors the kernel already holds). Internal: include <nanscope/histogram.hpp>.
#ifndef NANSCOPE_DETAIL_HIST_FUSED_X86_HPP
#define NANSCOPE_DETAIL_HIST_FUSED_X86_HPP

#if !defined(NANSCOPE_HISTOGRAM_HPP) && !defined(NANSCOPE_IMPL_INTERNAL_INCLUDE)
#error "nanscope/detail/hist_fused_x86.hpp is internal: include <nanscope/histogram.hpp>"
#endif

#include "../config.hpp"
#include "../dtype.hpp"
#include "hist_fused_avx2.hpp"
#include "histogram_kernel.hpp"
#include "kernel_x86.hpp"

#include <cstdint>
#include <cstring>
#include <type_traits>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

#if NANSCOPE_HAS_X86_SIMD()
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// How the bins ride in avx512_f32_kernel (its hook G): every full vector of raw bits the kernel loads goes to
// step(), which adds a one in a nibble of one of four registers; the chunk's window is 16 consecutive
// exponent fields [w0, w0 + 16), and each window field has its own nibble ("slot"). A nibble takes at most 8
// ones per 256-element block, so at every block's end (end_block) the nibbles are split into even and odd
// bytes and added to byte counters (at most 16 a block, 15 blocks per flush), which go to the segment's bins.
//   f32:         32-bit lanes, 8 nibbles each. The slot is field mod 16: 1 rotated left by 4 * field (mod 32)
//                lands in nibble field mod 8 of register "all", and also of register "odd" when bit 3 of the
//                field is set; one pair per kernel accumulator set A (8 of a block's 16 vectors each). Every
//                element adds one somewhere; the kernel's block min and max of |x| tell whether all of them
//                were in the window.
//   f16 / bf16:  16-bit lanes on the raw patterns, 4 nibbles each: registers = window quarters, slot =
//                field - w0; 1 << 4 * slot shifts out of a register (nothing added) when the field is outside
//                the quarter, so the block's nibble total falls short when some field was outside the window.
// A block with a field outside the window (zeros, subnormals, inf, NaN, data spread wider than 16 binades) is
// scanned again from L1, and those elements are counted one by one (f32: and taken back from the slot they
// aliased). The margins' dirty boundaries in the window (histogram_kernel.hpp) are compared on every vector,
// the first two (direct); any more are "lazy": a block whose nibbles show an element in such a field is
// scanned for it. So the counts are exactly the scalar loop's, for any data.
/// The hook's state that is touched once a block or less (memory), apart from the per-vector registers.
struct hist_cold512 {
  const hist_setup* s = nullptr;
  hist_local* h = nullptr;
  unsigned w0 = 1;
  std::uint32_t lazy_bits = 0;  // window bins (bit j: field w0 + j) holding a lazy dirty boundary
  int nd = 0;                   // direct boundaries: dk[0..nd)
  int dk[2] = {0, 0};
  unsigned blocks = 0;          // blocks in byt since the last flush
  __m512i byt[8];               // byt[2q] even nibbles of register q's slots, byt[2q + 1] the odd ones, as bytes
  std::uint64_t qacc[16];       // slots flushed from byt
  std::int64_t corr[16];        // f32: elements outside the window taken back from the slot they aliased
};

/// Slot (nibble counter) of window field w0 + j.
template <unsigned ES>
inline unsigned hist_slot(unsigned w0, unsigned j) {
  if constexpr (ES == 4) return (w0 + j) & 15u;
  else return j;
}

/// Slot of nibble `nibble` in (split) nibble register q.
template <unsigned ES>
inline unsigned hist_bin_of(unsigned q, unsigned nibble) {
  if constexpr (ES == 4) return (q & 1u) * 8u + nibble;  // q = set * 2 + half: half 0 slots 0-7, half 1 8-15
  else return q * 4u + nibble;
}

/// Byte counters to qacc (each byte position's sum over the lanes).
template <unsigned ES>
NANSCOPE_IMPL_TARGET_AVX512 inline void hist_flush_bytes512(hist_cold512& c) {
  const __m512i z = _mm512_setzero_si512();
  for (unsigned k = 0; k < (ES == 4 ? 4u : 8u); ++k) {
    const unsigned q = k / 2, odd = k % 2;
    for (unsigned pos = 0; pos < ES; ++pos) {  // byte pos of a lane: nibble 2 * pos + odd of register q
      const __m512i sel = ES == 4 ? _mm512_set1_epi32(static_cast<int>(0xFFu << (8 * pos)))
                                  : _mm512_set1_epi16(static_cast<short>(0xFFu << (8 * pos)));
      c.qacc[hist_bin_of<ES>(q, 2 * pos + odd)] +=
          static_cast<std::uint64_t>(_mm512_reduce_add_epi64(_mm512_sad_epu8(_mm512_and_si512(c.byt[k], sel), z)));
    }
    c.byt[k] = z;
  }
  c.blocks = 0;
}

/// Scans a block again from L1: counts its zeros in bulk, and one by one the elements the nibbles did not bin
/// (fields outside the window) and those in a lazy boundary's field.
template <unsigned ES, unsigned Shift>
NANSCOPE_IMPL_TARGET_AVX512 inline void hist_scan512(hist_cold512& cs, const unsigned char* p) {
  using U = std::conditional_t<ES == 4, std::uint32_t, std::uint16_t>;
  const hist_setup& s = *cs.s;
  hist_local& h = *cs.h;
  std::uint32_t* c = h.c;
  const unsigned w0 = cs.w0;
  for (std::size_t v = 0; v < 256 * ES; v += 64) {
    const __m512i r = _mm512_loadu_si512(p + v);
    std::uint64_t cand;
    if constexpr (ES == 4) {
      const __m512i a = _mm512_and_si512(r, _mm512_set1_epi32(0x7FFFFFFF));
      const __m512i j = _mm512_sub_epi32(_mm512_srli_epi32(a, Shift), _mm512_set1_epi32(static_cast<int>(w0)));
      const __mmask16 nz = _mm512_test_epi32_mask(a, a);
      const int zeros = 16 - __builtin_popcount(mask_bits(nz));
      c[0] += static_cast<std::uint32_t>(zeros);
      cs.corr[0] -= zeros;  // field 0 went to slot 0
      const __mmask16 out = _mm512_cmpge_epu32_mask(j, _mm512_set1_epi32(16));
      const __mmask16 lzm = _mm512_test_epi32_mask(_mm512_sllv_epi32(_mm512_set1_epi32(1), j),
                                                   _mm512_set1_epi32(static_cast<int>(cs.lazy_bits)));
      cand = (mask_bits(out) & mask_bits(nz)) | mask_bits(lzm);  // (never promote a mask: kernel_x86.hpp)
    } else {
      const __m512i a = _mm512_and_si512(r, _mm512_set1_epi16(0x7FFF));
      const __m512i j = _mm512_sub_epi16(_mm512_srli_epi16(a, Shift), _mm512_set1_epi16(static_cast<short>(w0)));
      const __mmask32 nz = _mm512_test_epi16_mask(a, a);
      c[0] += static_cast<std::uint32_t>(32 - __builtin_popcountll(mask_bits(nz)));
      const __mmask32 out = _mm512_cmpge_epu16_mask(j, _mm512_set1_epi16(16));
      const __mmask32 lzm = _mm512_test_epi16_mask(_mm512_sllv_epi16(_mm512_set1_epi16(1), j),
                                                   _mm512_set1_epi16(static_cast<short>(cs.lazy_bits)));
      cand = (mask_bits(out) & mask_bits(nz)) | mask_bits(lzm);
    }
    while (cand != 0) {
      const unsigned l = static_cast<unsigned>(__builtin_ctzll(cand));
      cand &= cand - 1;
      U x;
      std::memcpy(&x, p + v + l * ES, ES);
      const U a = static_cast<U>(x & static_cast<U>(s.abs_mask));
      const unsigned f = static_cast<unsigned>(a >> Shift);
      if (f < w0 || f >= w0 + 16) {
        ++c[f * hist_copies];
        if constexpr (ES == 4) --cs.corr[f & 15u];
      }
      hist_dirty(s, h, a, f);
    }
  }
}

/// avx512_f32_kernel's hook G: the per-vector registers (the kernel keeps a local copy, which never escapes).
template <unsigned ES, unsigned Shift>
struct hist_hook512 {
  static constexpr bool enabled = true;
  static constexpr int max_direct = 2;
  using U = std::conditional_t<ES == 4, std::uint32_t, std::uint16_t>;
  static constexpr unsigned field_mask = ES == 4 ? 0xFFu : (0x7FFFu >> Shift);

  hist_cold512* cold = nullptr;
  int nd = 0;
  bool any_lazy = false;
  __m512i w4;   // 16-bit: 4 * w0 in every lane; f32: w0 << 23, the window's lowest |x| bits
  __m512i wtop;  // f32: the window's highest |x| bits, ((w0 + 16) << 23) - 1
  __m512i nib[4];  // f32: (all, odd) of set 0, then of set 1; 16-bit: window quarters
  __m512i lz[4];  // per nibble register: 0xF in the nibbles of lazy bins
  __m512i bv[max_direct], dv[max_direct];  // direct boundaries (|x| bits) and their per-lane counts

  /// Picks the chunk's window (kept while five samples stay inside it) and sets the counters up.
  NANSCOPE_IMPL_TARGET_AVX512 void begin(hist_cold512& c, const hist_setup& s, hist_local& h, const unsigned char* p,
                                        std::size_t n) {
    cold = &c;
    c.s = &s;
    c.h = &h;
    const unsigned w = hist_pick_window<U, Shift>(s, h, p, n, s.nbins - 17, max_direct);  // inf / NaN field outside
    h.set_window(s, w, max_direct);
    c.w0 = w;
    c.nd = 0;
    c.lazy_bits = 0;
    for (int k = s.first_bound; k < s.nbounds; ++k) {
      if (!s.dirty[k] || s.field[k] < w || s.field[k] >= w + 16) continue;
      if (h.direct[k]) c.dk[c.nd++] = k;
      else c.lazy_bits |= 1u << (s.field[k] - w);
    }
    nd = c.nd;
    any_lazy = c.lazy_bits != 0;
    for (unsigned q = 0; q < 4; ++q) {
      alignas(64) U m[64 / ES];
      U v = 0;
      for (unsigned nb = 0; nb < ES * 2; ++nb) {
        const unsigned sl = hist_bin_of<ES>(q, nb);
        const unsigned j = ES == 4 ? (sl - w) & 15u : sl;  // window field w + j has slot sl
        if ((c.lazy_bits >> j & 1u) != 0) v = static_cast<U>(v | (U{0xF} << (4 * nb)));
      }
      for (auto& e : m) e = v;
      lz[q] = _mm512_load_si512(m);
      nib[q] = _mm512_setzero_si512();
    }
    for (auto& b : c.byt) b = _mm512_setzero_si512();
    for (int j = 0; j < max_direct; ++j) {
      const std::uint64_t b = j < nd ? s.b[c.dk[j]] : ~std::uint64_t{0};  // unused: all ones, never reached
      bv[j] = ES == 4 ? _mm512_set1_epi32(static_cast<int>(b)) : _mm512_set1_epi16(static_cast<short>(b));
      dv[j] = _mm512_setzero_si512();
    }
    for (auto& a : c.qacc) a = 0;
    for (auto& a : c.corr) a = 0;
    c.blocks = 0;
    w4 = ES == 4 ? _mm512_set1_epi32(static_cast<int>(w << 23)) : _mm512_set1_epi16(static_cast<short>(4 * w));
    wtop = _mm512_set1_epi32(static_cast<int>(((w + 16) << 23) - 1));
  }

  /// One full vector of raw bits; A: the kernel's accumulator set (f32).
  template <int A>
  NANSCOPE_IMPL_TARGET_AVX512 __attribute__((always_inline)) void step(__m512i r) {
    if constexpr (ES == 4) {
      // t = 4 * field; the rotate uses t mod 32 = 4 * (field mod 8); bit 5 of t is bit 3 of the field
      const __m512i t = _mm512_and_si512(_mm512_srli_epi32(r, 21), _mm512_set1_epi32(0x3FC));
      const __m512i v = _mm512_rolv_epi32(_mm512_set1_epi32(1), t);
      nib[2 * A] = _mm512_add_epi32(nib[2 * A], v);
      nib[2 * A + 1] = _mm512_mask_add_epi32(nib[2 * A + 1], _mm512_test_epi32_mask(t, _mm512_set1_epi32(32)), nib[2 * A + 1], v);
      // direct boundaries, branch-free: an unused one is all ones, which no |x| pattern reaches
      const __m512i a = _mm512_and_si512(r, _mm512_set1_epi32(0x7FFFFFFF));
      const __m512i m1 = _mm512_set1_epi32(-1);
      dv[0] = _mm512_mask_sub_epi32(dv[0], _mm512_cmpge_epu32_mask(a, bv[0]), dv[0], m1);
      dv[1] = _mm512_mask_sub_epi32(dv[1], _mm512_cmpge_epu32_mask(a, bv[1]), dv[1], m1);
    } else {
      const __m512i one = _mm512_set1_epi16(1), sixteen = _mm512_set1_epi16(16);
      const __m512i t0 = _mm512_sub_epi16(
          _mm512_and_si512(_mm512_srli_epi16(r, Shift - 2), _mm512_set1_epi16(static_cast<short>(field_mask << 2))), w4);
      const __m512i t1 = _mm512_sub_epi16(t0, sixteen), t2 = _mm512_sub_epi16(t1, sixteen), t3 = _mm512_sub_epi16(t2, sixteen);
      nib[0] = _mm512_add_epi16(nib[0], _mm512_sllv_epi16(one, t0));
      nib[1] = _mm512_add_epi16(nib[1], _mm512_sllv_epi16(one, t1));
      nib[2] = _mm512_add_epi16(nib[2], _mm512_sllv_epi16(one, t2));
      nib[3] = _mm512_add_epi16(nib[3], _mm512_sllv_epi16(one, t3));
      const __m512i a = _mm512_and_si512(r, _mm512_set1_epi16(0x7FFF));
      const __m512i m1 = _mm512_set1_epi16(-1);
      dv[0] = _mm512_mask_sub_epi16(dv[0], _mm512_cmpge_epu16_mask(a, bv[0]), dv[0], m1);
      dv[1] = _mm512_mask_sub_epi16(dv[1], _mm512_cmpge_epu16_mask(a, bv[1]), dv[1], m1);
    }
  }

  /// After the 256 elements at p went through step(): nibbles to bytes; the block is scanned again when
  /// some element lay outside the window or in a lazy bin.
  /// bmin, bmax: the kernel's unsigned min and max of the block's |x| bits (f32).
  NANSCOPE_IMPL_TARGET_AVX512 __attribute__((always_inline)) void end_block(const unsigned char* p, __m512i bmin,
                                                                             __m512i bmax) {
    const __m512i m = _mm512_set1_epi8(0x0F);
    hist_cold512& c = *cold;
    __m512i tot = _mm512_setzero_si512();
    bool lazy = false;
    bool outside;
    if constexpr (ES == 4) {
      outside = (mask_bits(_mm512_cmplt_epu32_mask(bmin, w4)) | mask_bits(_mm512_cmpgt_epu32_mask(bmax, wtop))) != 0;
      const __m512i split[4] = {_mm512_sub_epi32(nib[0], nib[1]), nib[1], _mm512_sub_epi32(nib[2], nib[3]), nib[3]};
      for (int half = 0; half < 2; ++half) {
        const __m512i a = split[half], b = split[2 + half];  // sets 0 and 1
        const __m512i e = _mm512_add_epi8(_mm512_and_si512(a, m), _mm512_and_si512(b, m));
        const __m512i o = _mm512_add_epi8(_mm512_and_si512(_mm512_srli_epi32(a, 4), m), _mm512_and_si512(_mm512_srli_epi32(b, 4), m));
        if (any_lazy) lazy |= mask_bits(_mm512_test_epi32_mask(_mm512_or_si512(a, b), lz[half])) != 0;
        c.byt[2 * half] = _mm512_add_epi8(c.byt[2 * half], e);
        c.byt[2 * half + 1] = _mm512_add_epi8(c.byt[2 * half + 1], o);
      }
    } else {
      (void)bmin;
      (void)bmax;
      for (int q = 0; q < 4; ++q) {
        const __m512i e = _mm512_and_si512(nib[q], m);
        const __m512i o = _mm512_and_si512(_mm512_srli_epi16(nib[q], 4), m);
        if (any_lazy) lazy |= mask_bits(_mm512_test_epi16_mask(nib[q], lz[q])) != 0;
        c.byt[2 * q] = _mm512_add_epi8(c.byt[2 * q], e);
        c.byt[2 * q + 1] = _mm512_add_epi8(c.byt[2 * q + 1], o);
        tot = _mm512_add_epi8(tot, _mm512_add_epi8(e, o));
      }
    }
    for (auto& x : nib) x = _mm512_setzero_si512();
    if constexpr (ES == 2) {
      // each 64-bit lane saw 32 elements of the block (4 lanes x 8 vectors)
      outside = mask_bits(_mm512_cmpneq_epu64_mask(_mm512_sad_epu8(tot, _mm512_setzero_si512()), _mm512_set1_epi64(32))) != 0;
    }
    if (__builtin_expect(outside || lazy, 0)) hist_scan512<ES, Shift>(c, p);
    if (++c.blocks == 15) hist_flush_bytes512<ES>(c);
  }

  /// End of the chunk's main loop: everything to the segment's counters.
  NANSCOPE_IMPL_TARGET_AVX512 void finish() {
    hist_cold512& c = *cold;
    if (c.blocks != 0) hist_flush_bytes512<ES>(c);
    for (unsigned j = 0; j < 16; ++j) {
      const unsigned sl = hist_slot<ES>(c.w0, j);
      c.h->c[(c.w0 + j) * hist_copies] += static_cast<std::uint32_t>(static_cast<std::int64_t>(c.qacc[sl]) + c.corr[sl]);
    }
    for (int j = 0; j < nd; ++j) {
      const __m512i w = ES == 4 ? dv[j]
                                : _mm512_add_epi32(_mm512_and_si512(dv[j], _mm512_set1_epi32(0xFFFF)),
                                                   _mm512_srli_epi32(dv[j], 16));
      c.h->d[c.dk[j]] += static_cast<std::uint64_t>(static_cast<std::uint32_t>(_mm512_reduce_add_epi32(w)));
    }
  }
};

/// The AVX-512 kernel and the histogram in one pass over a chunk of n contiguous raw f32 / f16 / bf16 elements
/// at level L; the elements past the last full block are binned by the scalar loop.
template <level L, class Load, unsigned ES, unsigned Shift>
NANSCOPE_IMPL_TARGET_AVX512 inline void hist_fused_run(const void* p, std::size_t n, const kernel_params& kp, chunk_out& o,
                                                       const hist_setup& s, hist_local& h) {
  hist_cold512 cold;
  hist_hook512<ES, Shift> g;
  const auto* b = static_cast<const unsigned char*>(p);
  g.begin(cold, s, h, b, n);
  avx512_f32_kernel<L, Load, kernel_no_hash, hist_hook512<ES, Shift>>(p, n, kp, o, nullptr, &g);
  g.finish();
  const std::size_t done = n / 256 * 256;
  hist_scalar(b + done * ES, n - done, s, h, true);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/// hist_setup::fused for f32 / f16 / bf16: runs the health kernel and the bins together when the pass uses
/// AVX-512 or AVX2 at the counts or stats level on a chunk of at least one block; false: not done (the caller
/// runs the kernel, then hist_chunk).
inline bool hist_fused_chunk(const void* p, dtype t, std::size_t n, level lv, std::uint8_t isa_code,
                             const kernel_params& kp, chunk_out& o, const hist_setup& s, hist_local& h) {
  if (lv < level::counts) return false;
  if (isa_code == 2 && n >= 128) {  // 2: isa::avx2
    auto go2 = [&](auto lvl_tag) {
      constexpr level L = decltype(lvl_tag)::value;
      switch (t) {
        case dtype::f32: hist_fused_run256<L, load256_f32, std::uint32_t, 23>(p, n, kp, o, s, h); return true;
        case dtype::f16: hist_fused_run256<L, load256_f16, std::uint16_t, 10>(p, n, kp, o, s, h); return true;
        case dtype::bf16: hist_fused_run256<L, load256_bf16, std::uint16_t, 7>(p, n, kp, o, s, h); return true;
        default: return false;
      }
    };
    if (lv == level::stats) return go2(std::integral_constant<level, level::stats>{});
    return go2(std::integral_constant<level, level::counts>{});
  }
  if (isa_code != 3 || n < 256) return false;  // 3: isa::avx512
  auto go = [&](auto lvl_tag) {
    constexpr level L = decltype(lvl_tag)::value;
    switch (t) {
      case dtype::f32: hist_fused_run<L, load512_f32, 4, 23>(p, n, kp, o, s, h); return true;
      case dtype::f16: hist_fused_run<L, load512_f16, 2, 10>(p, n, kp, o, s, h); return true;
      case dtype::bf16: hist_fused_run<L, load512_bf16, 2, 7>(p, n, kp, o, s, h); return true;
      default: return false;
    }
  };
  if (lv == level::stats) return go(std::integral_constant<level, level::stats>{});
  return go(std::integral_constant<level, level::counts>{});
}
#endif  // NANSCOPE_HAS_X86_SIMD()

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_HIST_FUSED_X86_HPP
