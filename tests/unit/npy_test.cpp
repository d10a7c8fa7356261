// nanscope tests — npy_test.cpp: nanscope::write_npy / read_npy and the atomic file writer.
//
// Round trips for every dtype, ranks 0..4, contiguous and strided views (with poison between the elements);
// the exact header layout; malformed files; Fortran order; numpy itself reading what we write and writing
// what we read (when /usr/bin/python3 has numpy); and atomicity: a writer killed with SIGKILL midway leaves
// the previous file (or no file), never a truncated one, and its temporary file is never the target.
#include "support/files.hpp"
#include "support/reference.hpp"
#include "support/views.hpp"

#include <nanscope/detail/atomic_file.hpp>
#include <nanscope/npy.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#define NANSCOPE_TEST_POSIX 1
#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#else
#define NANSCOPE_TEST_POSIX 0
#endif

namespace {

using nanscope::dtype;
using namespace nstest;

const dtype npy_dtypes[] = {dtype::f64, dtype::f32, dtype::f16, dtype::bf16, dtype::f8_e4m3fn, dtype::f8_e5m2,
                            dtype::i8,  dtype::i16, dtype::i32, dtype::i64,  dtype::u8,        dtype::u16,
                            dtype::u32, dtype::u64, dtype::boolean};

// ---------------------------------------------------------------------------------------------------------
// Files and directories.
// ---------------------------------------------------------------------------------------------------------
std::vector<unsigned char> slurp_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void spit(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
void spit(const std::string& path, const std::string& text) {
  spit(path, std::vector<unsigned char>(text.begin(), text.end()));
}
bool can_open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return in.good();
}

#if NANSCOPE_TEST_POSIX
using nstest::list_dir;
/// A fresh directory under $TMPDIR (or /tmp), removed with its files at the end.
struct scratch_dir {
  std::string path;
  scratch_dir() {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t != nullptr && t[0] != '\0' ? t : "/tmp") + "/nanscope_npy_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    REQUIRE(::mkdtemp(buf.data()) != nullptr);
    path = buf.data();
  }
  ~scratch_dir() {
    for (const std::string& nm : list_dir(path)) {
      const std::string p = path + "/" + nm;
      ::chmod(p.c_str(), 0700);
      if (::unlink(p.c_str()) != 0) {
        for (const std::string& inner : list_dir(p)) ::unlink((p + "/" + inner).c_str());
        ::rmdir(p.c_str());
      }
    }
    ::rmdir(path.c_str());
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
};
#endif

// ---------------------------------------------------------------------------------------------------------
// Expected file content, computed independently of npy.hpp.
// ---------------------------------------------------------------------------------------------------------
/// Exact value of f32 bits as a double, by ldexp on the fields (no FP conversion that DAZ could flush).
double f32_value(std::uint32_t b) {
  const bool neg = (b >> 31) != 0;
  const int e = static_cast<int>((b >> 23) & 0xFF);
  const std::uint32_t m = b & 0x7FFFFF;
  if (e == 0xFF) return m == 0 ? inf_with_sign(neg) : nan_with_sign(neg);
  const double mag = e == 0 ? std::ldexp(static_cast<double>(m), -149) : std::ldexp(static_cast<double>(m | 0x800000u), e - 150);
  return with_sign(mag, neg);
}
/// f32 bits of a double that is exactly an f32 value (normal in f32, or zero), by its fields.
std::uint32_t f32_bits_of_exact(double x) {
  const std::uint64_t b = bits64(x);
  const std::uint32_t sign = static_cast<std::uint32_t>(b >> 63) << 31;
  if (is_nan(x)) return sign | 0x7FC00000u;
  if (is_inf(x)) return sign | 0x7F800000u;
  if (is_zero(x)) return sign;
  const int e = static_cast<int>((b >> 52) & 0x7FF) - 1023;
  const auto frac = static_cast<std::uint32_t>((b >> 29) & 0x7FFFFF);
  return sign | (static_cast<std::uint32_t>(e + 127) << 23) | frac;
}

/// The file dtype and the little-endian element bytes a logical sequence of raw elements must become.
dtype expected_file_dtype(dtype t) {
  return t == dtype::bf16 || t == dtype::f8_e4m3fn || t == dtype::f8_e5m2 ? dtype::f32 : t;
}
std::vector<unsigned char> expected_bytes(dtype t, const std::vector<std::uint64_t>& raws) {
  const dtype ft = expected_file_dtype(t);
  const std::size_t fes = ref_size_of(ft);
  std::vector<unsigned char> out(raws.size() * fes);
  for (std::size_t i = 0; i < raws.size(); ++i) {
    std::uint64_t v = raws[i];
    if (t == dtype::bf16) v = (raws[i] & 0xFFFF) << 16;
    if (t == dtype::f8_e4m3fn) v = f32_bits_of_exact(ref_decode_e4m3fn(static_cast<std::uint8_t>(raws[i])));
    if (t == dtype::f8_e5m2) v = f32_bits_of_exact(ref_decode_e5m2(static_cast<std::uint8_t>(raws[i])));
    if (t == dtype::boolean) v = (raws[i] & 0xFF) != 0 ? 1 : 0;
    for (std::size_t k = 0; k < fes; ++k) out[i * fes + k] = static_cast<unsigned char>(v >> (8 * k));
  }
  return out;
}
/// Same bytes, except that a NaN must only stay a NaN (fp8 NaN payloads are not part of the contract).
bool same_elements(dtype t, const std::vector<unsigned char>& got, const std::vector<unsigned char>& want) {
  if (got.size() != want.size()) return false;
  if (t != dtype::f8_e5m2 && t != dtype::f8_e4m3fn) return got == want;
  for (std::size_t i = 0; i < got.size(); i += 4) {
    std::uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    const bool an = (a & 0x7FFFFFFFu) > 0x7F800000u, bn = (b & 0x7FFFFFFFu) > 0x7F800000u;
    if (an != bn || (!an && a != b)) return false;
  }
  return true;
}

std::vector<std::uint64_t> random_raws(dtype t, std::size_t n, rng& g) {
  std::vector<std::uint64_t> r(n);
  const std::size_t es = ref_size_of(t);
  for (auto& x : r) {
    x = es == 8 ? g.next() : g.next() & ((std::uint64_t{1} << (8 * es)) - 1);
    if (t == dtype::boolean) x = g.below(3);  // 2 must be written as 1
  }
  return r;
}


std::vector<layout> round_trip_layouts() {
  return {make_layout("rank 0", {}, {}),
          make_layout("rank 1", {7}, {1}),
          make_layout("rank 1 empty", {0}, {1}),
          make_layout("rank 2", {3, 5}, {5, 1}),
          make_layout("rank 3", {2, 3, 4}, {12, 4, 1}),
          make_layout("rank 4", {2, 1, 3, 5}, {15, 15, 5, 1}),
          make_layout("rank 4 with a zero extent", {2, 0, 3, 5}, {15, 15, 5, 1}),
          make_layout("rank 1 every third", {11}, {3}),
          make_layout("rank 2 transposed", {5, 3}, {1, 5}),
          make_layout("rank 2 padded rows", {4, 6}, {9, 1}),
          make_layout("rank 3 inner stride 2", {2, 3, 4}, {30, 10, 2}),
          make_layout("rank 4 permuted", {3, 2, 5, 2}, {2, 30, 6, 1}),
          make_layout("rank 2 broadcast", {3, 4}, {0, 1}),
          make_layout("rank 1 large", {70001}, {1}),
          make_layout("rank 2 large strided", {300, 250}, {503, 2})};
}

#if NANSCOPE_TEST_POSIX
template <class U>
void round_trip_one(const scratch_dir& d, dtype t, const layout& l, rng& g) {
  const std::vector<std::uint64_t> logical = random_raws(t, static_cast<std::size_t>(l.numel()), g);
  const std::vector<U> poison = narrow<U>({0xFFFFFFFFFFFFFFFFull, 0x7FF8000000000000ull, 0x7FC07FC07FC07FC0ull});
  const strided_tensor<U> st = scatter(narrow<U>(logical), t, l, poison);
  const std::vector<std::uint64_t> seen = logical_raw(st.view);  // the view's logical elements (broadcast repeats)
  const std::string path = d.file(std::string(nanscope::name(t)) + ".npy");
  const std::string what = std::string(nanscope::name(t)) + " " + l.label;
  INFO(what);
  nanscope::write_npy(path, st.view);
  const std::vector<unsigned char> file = slurp_bytes(path);
  REQUIRE(file.size() >= 10);
  const std::size_t header_len = file[8] | static_cast<std::size_t>(file[9]) << 8;
  CHECK((10 + header_len) % 64 == 0);
  const nanscope::npy_array a = nanscope::read_npy(path);
  CHECK(a.type == expected_file_dtype(t));
  REQUIRE(a.shape.size() == static_cast<std::size_t>(l.rank));
  for (int i = 0; i < l.rank; ++i) CHECK(a.shape[static_cast<std::size_t>(i)] == l.shape[i]);
  CHECK(a.numel() == seen.size());
  CHECK(same_elements(t, a.bytes, expected_bytes(t, seen)));
  // the data part of the file is exactly those bytes too
  CHECK(same_elements(t, std::vector<unsigned char>(file.begin() + static_cast<std::ptrdiff_t>(10 + header_len), file.end()),
                      expected_bytes(t, seen)));
  // and the view of what was read is a valid tensor of the same shape
  const nanscope::tensor_view v = a.view("read");
  CHECK(v.rank == l.rank);
  CHECK(v.numel() == seen.size());
  CHECK_NOTHROW(nanscope::validate(v));
}
#endif

}  // namespace

#if NANSCOPE_TEST_POSIX

TEST_CASE("npy: the preamble is numpy's: magic, version 1.0, dict, spaces, newline, data at a multiple of 64") {
  scratch_dir d;
  struct hcase {
    dtype t;
    std::vector<std::int64_t> shape;
    const char* dict;
  };
  const hcase cases[] = {
      {dtype::f32, {2, 3}, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"},
      {dtype::f64, {5}, "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }"},
      {dtype::f16, {}, "{'descr': '<f2', 'fortran_order': False, 'shape': (), }"},
      {dtype::bf16, {1, 2, 3, 4}, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3, 4), }"},
      {dtype::i8, {0}, "{'descr': '|i1', 'fortran_order': False, 'shape': (0,), }"},
      {dtype::u8, {3, 0}, "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 0), }"},
      {dtype::boolean, {2}, "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }"},
      {dtype::i64, {1, 1, 1, 1, 1, 1, 1, 1}, "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1), }"},
      {dtype::u16, {123456789, 0}, "{'descr': '<u2', 'fortran_order': False, 'shape': (123456789, 0), }"},
  };
  for (const hcase& c : cases) {
    nanscope::tensor_view v;
    const std::uint64_t zeros[8] = {};
    v.data = zeros;
    v.type = c.t;
    v.rank = static_cast<int>(c.shape.size());
    for (int i = 0; i < v.rank; ++i) v.shape[i] = c.shape[static_cast<std::size_t>(i)];
    v.set_contiguous_strides();
    const std::string path = d.file("h.npy");
    nanscope::write_npy(path, v);
    const std::vector<unsigned char> f = slurp_bytes(path);
    const std::string dict_text = c.dict;
    INFO(dict_text);
    REQUIRE(f.size() >= 64);
    CHECK(std::memcmp(f.data(), "\x93NUMPY\x01\x00", 8) == 0);
    const std::size_t hl = f[8] | static_cast<std::size_t>(f[9]) << 8;
    CHECK((10 + hl) % 64 == 0);
    REQUIRE(f.size() >= 10 + hl);
    const std::string header(f.begin() + 10, f.begin() + static_cast<std::ptrdiff_t>(10 + hl));
    const std::string dict = c.dict;
    CHECK(header.compare(0, dict.size(), dict) == 0);
    CHECK(header.back() == '\n');
    CHECK(header.find_first_not_of(' ', dict.size()) == header.size() - 1);
    CHECK(hl - dict.size() - 1 < 64);  // minimal padding
    std::uint64_t n = 1;
    for (std::int64_t e : c.shape) n *= static_cast<std::uint64_t>(e);
    CHECK(f.size() == 10 + hl + n * ref_size_of(expected_file_dtype(c.t)));
  }
}

TEST_CASE("npy: round trip of every dtype, ranks 0..4, contiguous, strided, permuted and broadcast views") {
  scratch_dir d;
  rng g(2024);
  for (dtype t : npy_dtypes) {
    for (const layout& l : round_trip_layouts()) {
      switch (ref_size_of(t)) {
        case 1: round_trip_one<std::uint8_t>(d, t, l, g); break;
        case 2: round_trip_one<std::uint16_t>(d, t, l, g); break;
        case 4: round_trip_one<std::uint32_t>(d, t, l, g); break;
        default: round_trip_one<std::uint64_t>(d, t, l, g); break;
      }
    }
  }
  // every fp8 and bf16 pattern converts exactly
  for (dtype t : {dtype::f8_e4m3fn, dtype::f8_e5m2, dtype::bf16}) {
    const std::size_t np = t == dtype::bf16 ? 65536 : 256;
    std::vector<std::uint64_t> all(np);
    for (std::size_t p = 0; p < np; ++p) all[p] = p;
    const std::string path = d.file("all.npy");
    if (t == dtype::bf16) {
      const auto b = narrow<std::uint16_t>(all);
      nanscope::write_npy(path, nanscope::tensor_view::flat(b.data(), t, static_cast<std::int64_t>(np)));
    } else {
      const auto b = narrow<std::uint8_t>(all);
      nanscope::write_npy(path, nanscope::tensor_view::flat(b.data(), t, static_cast<std::int64_t>(np)));
    }
    CHECK(same_elements(t, nanscope::read_npy(path).bytes, expected_bytes(t, all)));
  }
  // the template overload (any tensor via to_view)
  const std::vector<double> v = {1.0, -2.5, 1e300};
  nanscope::write_npy(d.file("vec.npy"), v);
  const nanscope::npy_array a = nanscope::read_npy(d.file("vec.npy"));
  CHECK(a.type == dtype::f64);
  REQUIRE(a.bytes.size() == 24);
  CHECK(std::memcmp(a.bytes.data(), v.data(), 24) == 0);
}

namespace {
/// A .npy file made by hand: version, header text (padded to 64 unless pad == false) and data.
std::vector<unsigned char> craft(const std::string& dict, const std::vector<unsigned char>& data, int ver_major = 1,
                                 bool pad = true) {
  const std::size_t pre = ver_major == 1 ? 10 : 12;
  std::string header = dict;
  if (pad)
    while ((pre + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::vector<unsigned char> f = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(ver_major), 0};
  const std::size_t hl = header.size();
  f.push_back(static_cast<unsigned char>(hl & 0xFF));
  f.push_back(static_cast<unsigned char>((hl >> 8) & 0xFF));
  if (ver_major != 1) {
    f.push_back(static_cast<unsigned char>((hl >> 16) & 0xFF));
    f.push_back(static_cast<unsigned char>((hl >> 24) & 0xFF));
  }
  f.insert(f.end(), header.begin(), header.end());
  f.insert(f.end(), data.begin(), data.end());
  return f;
}
std::vector<unsigned char> f32_bytes(std::initializer_list<float> xs) {
  std::vector<unsigned char> out;
  for (float x : xs) {
    unsigned char b[4];
    std::memcpy(b, &x, 4);
    out.insert(out.end(), b, b + 4);
  }
  return out;
}
}  // namespace

TEST_CASE("npy: malformed files throw nanscope::error naming the file and the problem") {
  scratch_dir d;
  const std::string path = d.file("bad.npy");
  const std::vector<unsigned char> six = f32_bytes({1, 2, 3, 4, 5, 6});
  const std::string good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  spit(path, craft(good, six));
  CHECK_NOTHROW(nanscope::read_npy(path));

  struct bad_case {
    const char* label;
    std::vector<unsigned char> bytes;
    const char* message;
  };
  std::vector<unsigned char> bad_magic = craft(good, six);
  bad_magic[1] = 'n';
  std::vector<unsigned char> long_header = craft(good, six);
  long_header[8] = 0xFF;
  long_header[9] = 0x7F;
  std::vector<unsigned char> truncated_header = craft(good, six);
  truncated_header.resize(40);
  std::vector<unsigned char> short_data = craft(good, six);
  short_data.pop_back();
  std::vector<unsigned char> long_data = craft(good, six);
  long_data.push_back(0);
  std::vector<unsigned char> version3 = craft(good, six, 3);
  std::vector<unsigned char> version11 = craft(good, six);
  version11[7] = 1;
  std::vector<unsigned char> no_newline = craft(good, six, 1, false);
  no_newline[no_newline.size() - six.size() - 1] = ' ';
  std::vector<unsigned char> high_byte = craft(good, six);
  high_byte[20] = 0xE9;
  const bad_case cases[] = {
      {"empty file", {}, "not an .npy file"},
      {"too short", {0x93, 'N', 'U', 'M'}, "not an .npy file"},
      {"bad magic", bad_magic, "bad magic"},
      {"header length beyond the file", long_header, "runs past the end of the file"},
      {"truncated header", truncated_header, "runs past the end of the file"},
      {"data shorter than the shape", short_data, "shorter than the shape"},
      {"trailing bytes", long_data, "trailing bytes"},
      {"version 3.0", version3, "unsupported .npy format version 3.0"},
      {"version 1.1", version11, "unsupported .npy format version 1.1"},
      {"header without final newline", no_newline, "final newline"},
      {"non-ASCII header", high_byte, "non-ASCII"},
      {"unsupported descr <c8", craft("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", std::vector<unsigned char>(16)), "unsupported dtype descr '<c8'"},
      {"big-endian descr", craft("{'descr': '>f4', 'fortran_order': False, 'shape': (6,), }", six), "big-endian"},
      {"unicode descr", craft("{'descr': '<U3', 'fortran_order': False, 'shape': (2,), }", std::vector<unsigned char>(24)), "unsupported dtype descr"},
      {"object descr", craft("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", std::vector<unsigned char>(16)), "unsupported dtype descr"},
      {"structured descr", craft("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }", six), "structured"},
      {"fortran_order not a bool", craft("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", six), "fortran_order"},
      {"missing shape", craft("{'descr': '<f4', 'fortran_order': False, }", six), "no 'shape'"},
      {"missing descr", craft("{'fortran_order': False, 'shape': (6,), }", six), "no 'descr'"},
      {"missing fortran_order", craft("{'descr': '<f4', 'shape': (6,), }", six), "no 'fortran_order'"},
      {"duplicate key", craft("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", six), "twice"},
      {"unknown key", craft("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'extra': 1, }", six), "unexpected key 'extra'"},
      {"shape not a tuple", craft("{'descr': '<f4', 'fortran_order': False, 'shape': 6, }", six), "expected '('"},
      {"shape (6) without comma", craft("{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", six), "not a tuple"},
      {"negative extent", craft("{'descr': '<f4', 'fortran_order': False, 'shape': (-6,), }", six), "non-negative"},
      {"huge extent", craft("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", six), "does not fit"},
      {"huge shape product", craft("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", six), "shorter than the shape"},
      {"rank 9", craft("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 6), }", six), "max_rank"},
      {"not a dict", craft("['descr', '<f4']", six), "expected '{'"},
      {"garbage after the dict", craft(good + " x", six), "followed only by spaces"},
      {"unterminated string", craft("{'descr: '<f4', 'fortran_order': False, 'shape': (6,) }", six), ""},
  };
  for (const bad_case& c : cases) {
    const std::string case_label = c.label;
    INFO(case_label);
    spit(path, c.bytes);
    bool threw = false;
    try {
      (void)nanscope::read_npy(path);
    } catch (const nanscope::error& e) {
      threw = true;
      const std::string what = e.what();
      CHECK_MESSAGE(what.find(path) != std::string::npos, what);
      CHECK_MESSAGE(what.find(c.message) != std::string::npos, what);
    }
    CHECK(threw);
  }
  CHECK_THROWS_WITH_AS(nanscope::read_npy(d.file("missing.npy")),
                       doctest::Contains("missing.npy': cannot open: No such file or directory"), nanscope::error);
}

TEST_CASE("npy: Fortran-ordered files are transposed into row-major order; version 2.0; Python 2 longs") {
  scratch_dir d;
  const std::string path = d.file("f.npy");
  // shape (2, 3, 4), element (i, j, k) = 100 i + 10 j + k, stored column-major (i fastest)
  std::vector<unsigned char> data;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) {
        const auto v = static_cast<std::int16_t>(100 * i + 10 * j + k);
        data.push_back(static_cast<unsigned char>(v & 0xFF));
        data.push_back(static_cast<unsigned char>((v >> 8) & 0xFF));
      }
  spit(path, craft("{'descr': '<i2', 'fortran_order': True, 'shape': (2, 3, 4), }", data));
  nanscope::npy_array a = nanscope::read_npy(path);
  CHECK(a.type == dtype::i16);
  REQUIRE(a.bytes.size() == 48);
  int flat = 0;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k, ++flat) {
        std::int16_t got;
        std::memcpy(&got, &a.bytes[static_cast<std::size_t>(2 * flat)], 2);
        CHECK(got == 100 * i + 10 * j + k);
      }
  // version 2.0, keys in another order, double quotes, no trailing comma, 'L' suffixes
  spit(path, craft("{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \"<f4\"}", f32_bytes({1, 2, 3, 4, 5, 6}), 2));
  a = nanscope::read_npy(path);
  CHECK(a.type == dtype::f32);
  CHECK(a.shape == std::vector<std::int64_t>{2, 3});
  CHECK(a.bytes == f32_bytes({1, 2, 3, 4, 5, 6}));
  // an unpadded header (older writers) and '<i1' are accepted
  spit(path, craft("{'descr': '<i1', 'fortran_order': False, 'shape': (3,)}", {1, 2, 0xFF}, 1, false));
  a = nanscope::read_npy(path);
  CHECK(a.type == dtype::i8);
  CHECK(a.bytes == std::vector<unsigned char>{1, 2, 0xFF});
}

TEST_CASE("npy: write errors") {
  scratch_dir d;
  const float x[2] = {1.0f, 2.0f};
  nanscope::tensor_view dev = nanscope::view_of(x, 2);
  dev.space = nanscope::memory_space::cuda_device;
  dev.name = "on_gpu";
  CHECK_THROWS_WITH_AS(nanscope::write_npy(d.file("g.npy"), dev), doctest::Contains("on_gpu"), nanscope::error);
  nanscope::tensor_view neg = nanscope::view_of(x, 2);
  neg.shape[0] = -2;
  CHECK_THROWS_AS(nanscope::write_npy(d.file("n.npy"), neg), nanscope::error);
  CHECK(!can_open(d.file("g.npy")));
  CHECK(!can_open(d.file("n.npy")));
  // a directory that does not exist: the error names the path and the system's reason
  CHECK_THROWS_WITH_AS(nanscope::write_npy(d.file("no/such/dir/x.npy"), nanscope::view_of(x, 2)),
                       doctest::Contains("no/such/dir/x.npy': cannot create the temporary file"), nanscope::error);
  CHECK_THROWS_WITH_AS(nanscope::write_npy(d.file("no/x.npy"), nanscope::view_of(x, 2)),
                       doctest::Contains("No such file or directory"), nanscope::error);
  // the target is a directory
  REQUIRE(::mkdir(d.file("adir").c_str(), 0700) == 0);
  CHECK_THROWS_WITH_AS(nanscope::write_npy(d.file("adir"), nanscope::view_of(x, 2)), doctest::Contains("directory"),
                       nanscope::error);
  CHECK_THROWS_AS(nanscope::write_npy(d.file("adir") + "/", nanscope::view_of(x, 2)), nanscope::error);
  // nothing but the directory is left behind: no temporary files
  CHECK(list_dir(d.path) == std::vector<std::string>{"adir"});
  // a named pipe is refused, not replaced by a file (nor is a device: as root "/dev/null" would have been)
  REQUIRE(::mkfifo(d.file("pipe.npy").c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(nanscope::write_npy(d.file("pipe.npy"), nanscope::view_of(x, 2)),
                       doctest::Contains("pipe.npy': exists and is a named pipe, not a regular file"), nanscope::error);
  struct stat fifo_st;
  REQUIRE(::lstat(d.file("pipe.npy").c_str(), &fifo_st) == 0);
  CHECK(S_ISFIFO(fifo_st.st_mode));
  REQUIRE(::unlink(d.file("pipe.npy").c_str()) == 0);
  // a socket too (a file of our own: a regression must not replace a real device such as /dev/null)
  {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string sock = d.file("s.npy");
    REQUIRE(sock.size() < sizeof addr.sun_path);
    std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
    REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
    CHECK_THROWS_WITH_AS(nanscope::write_npy(sock, nanscope::view_of(x, 2)),
                         doctest::Contains("s.npy': exists and is a socket, not a regular file"), nanscope::error);
    ::close(fd);
    REQUIRE(::unlink(sock.c_str()) == 0);
  }
  // a symbolic link is replaced by the file; what it pointed to is untouched
  nanscope::write_npy(d.file("real.npy"), nanscope::view_of(x, 2));
  REQUIRE(::symlink("real.npy", d.file("link.npy").c_str()) == 0);
  nanscope::write_npy(d.file("link.npy"), nanscope::view_of(x, 1));
  CHECK(nanscope::read_npy(d.file("real.npy")).numel() == 2);
  CHECK(nanscope::read_npy(d.file("link.npy")).numel() == 1);
  REQUIRE(::lstat(d.file("link.npy").c_str(), &fifo_st) == 0);
  CHECK(S_ISREG(fifo_st.st_mode));
  REQUIRE(::unlink(d.file("link.npy").c_str()) == 0);
  REQUIRE(::unlink(d.file("real.npy").c_str()) == 0);
  // an existing file keeps its permissions when replaced
  const std::string p = d.file("perm.npy");
  nanscope::write_npy(p, nanscope::view_of(x, 2));
  REQUIRE(::chmod(p.c_str(), 0640) == 0);
  nanscope::write_npy(p, nanscope::view_of(x, 1));
  struct stat st;
  REQUIRE(::stat(p.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
  CHECK(nanscope::read_npy(p).numel() == 1);
  // an unwritable directory (not meaningful as root, who may write anywhere)
  if (::geteuid() != 0) {
    REQUIRE(::mkdir(d.file("ro").c_str(), 0500) == 0);
    CHECK_THROWS_WITH_AS(nanscope::write_npy(d.file("ro/x.npy"), nanscope::view_of(x, 2)),
                         doctest::Contains("Permission denied"), nanscope::error);
  }
}

TEST_CASE("atomic_file: discard, commit, and the temporary name") {
  scratch_dir d;
  const std::string target = d.file("t.bin");
  {
    nanscope::detail::atomic_file f(target);
    const std::string tmp = f.temp_path();
    CHECK(tmp != target);
    CHECK(tmp.find(d.path + "/.t.bin.tmp." + std::to_string(::getpid()) + ".") == 0);
    f.write("abc", 3);
    CHECK(can_open(tmp));
    CHECK(!can_open(target));
  }  // not committed: removed
  CHECK(list_dir(d.path).empty());
  nanscope::detail::write_file_atomically(target, "hello", 5);
  CHECK(slurp_bytes(target) == std::vector<unsigned char>{'h', 'e', 'l', 'l', 'o'});
  {
    nanscope::detail::atomic_file f(target);
    f.write("bye", 3);
    f.commit();
    CHECK(f.temp_path().empty());
    CHECK_THROWS_AS(f.write("x", 1), nanscope::error);
  }
  CHECK(slurp_bytes(target) == std::vector<unsigned char>{'b', 'y', 'e'});
  CHECK(list_dir(d.path) == std::vector<std::string>{"t.bin"});
  // a relative path (no directory part) works too
  char cwd[4096];
  REQUIRE(::getcwd(cwd, sizeof cwd) != nullptr);
  REQUIRE(::chdir(d.path.c_str()) == 0);
  nanscope::detail::write_file_atomically("rel.bin", "r", 1);
  REQUIRE(::chdir(cwd) == 0);
  CHECK(slurp_bytes(d.file("rel.bin")) == std::vector<unsigned char>{'r'});
}

namespace {
/// Kills and reaps a forked child when it goes out of scope, so that a failed REQUIRE never leaves one behind.
struct child_guard {
  pid_t pid = -1;
  explicit child_guard(pid_t p) : pid(p) {}
  child_guard(const child_guard&) = delete;
  child_guard& operator=(const child_guard&) = delete;
  ~child_guard() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

/// Forks a child that opens an atomic write of `target`, writes `bytes` bytes, signals through a pipe and
/// then waits to be killed. Returns the child's pid once the temporary file holds those bytes.
pid_t start_stuck_writer(const std::string& target, std::size_t bytes) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(120);  // never outlive a test run that lost track of this child
    try {
      nanscope::detail::atomic_file f(target);
      const std::vector<unsigned char> junk(bytes, 0xAB);
      f.write(junk.data(), junk.size());
      const char c = 1;
      if (::write(fds[1], &c, 1) != 1) ::_exit(3);
      for (;;) ::pause();
    } catch (...) {
      ::_exit(2);
    }
  }
  ::close(fds[1]);
  char c = 0;
  const ::ssize_t got = ::read(fds[0], &c, 1);
  ::close(fds[0]);
  REQUIRE(got == 1);
  return pid;
}
void kill_and_reap(child_guard& child) {
  const pid_t pid = child.pid;
  child.pid = -1;
  REQUIRE(::kill(pid, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}
std::vector<float> ramp(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1000) * scale;
  return v;
}
}  // namespace

TEST_CASE("atomic writes: a writer killed with SIGKILL midway leaves the old file (or none), never a partial one") {
  scratch_dir d;
  const std::string target = d.file("x.npy");

  SUBCASE("old file present") {
    const std::vector<float> old = ramp(1000, 0.5f);
    nanscope::write_npy(target, old);
    const std::vector<unsigned char> old_bytes = slurp_bytes(target);
    child_guard child(start_stuck_writer(target, 3 << 20));
    const pid_t pid = child.pid;
    std::vector<std::string> names = list_dir(d.path);
    REQUIRE(names.size() == 2);  // the target and the child's temporary file
    kill_and_reap(child);
    CHECK(slurp_bytes(target) == old_bytes);
    const nanscope::npy_array a = nanscope::read_npy(target);
    CHECK(a.numel() == old.size());
    // the killed child's temporary file remains under its own name, and is not an .npy file
    names = list_dir(d.path);
    REQUIRE(names.size() == 2);
    const std::string tmp = names[0] == "x.npy" ? names[1] : names[0];
    CHECK(tmp.find(".x.npy.tmp." + std::to_string(pid) + ".") == 0);
    CHECK(slurp_bytes(d.file(tmp)).size() == (3u << 20));
    CHECK_THROWS_WITH_AS(nanscope::read_npy(d.file(tmp)), doctest::Contains("bad magic"), nanscope::error);
  }
  SUBCASE("no old file") {
    child_guard child(start_stuck_writer(target, 1 << 20));
    kill_and_reap(child);
    CHECK(!can_open(target));
    CHECK(list_dir(d.path).size() == 1);  // only the orphaned temporary file
  }
  SUBCASE("write_npy in a loop, killed at arbitrary moments") {
    const std::vector<float> old = ramp(1000, 0.5f);
    const std::vector<float> big = ramp(std::size_t{1} << 22, 2.0f);  // 16 MiB
    nanscope::write_npy(target, old);
    const std::vector<unsigned char> old_bytes = slurp_bytes(target);
    const int rounds = quick ? 2 : 4;
    for (int round = 0; round < rounds; ++round) {
      const pid_t pid = ::fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        ::alarm(120);
        try {
          for (;;) nanscope::write_npy(target, big);
        } catch (...) {
          ::_exit(2);
        }
      }
      child_guard child(pid);
      // wait until a temporary file exists (the child is writing), then a little longer, then kill
      bool writing = false;
      for (int spin = 0; spin < 20000 && !writing; ++spin) {
        for (const std::string& nm : list_dir(d.path))
          if (nm.find(".x.npy.tmp.") == 0 && nm.find(std::to_string(pid)) != std::string::npos) writing = true;
        if (!writing) ::usleep(500);
      }
      CHECK(writing);
      ::usleep(static_cast<useconds_t>(round * 7000));
      kill_and_reap(child);
      // the target is complete: either the old file or the child's complete new one
      const std::vector<unsigned char> now = slurp_bytes(target);
      const nanscope::npy_array a = nanscope::read_npy(target);  // throws if it were truncated
      if (now == old_bytes) {
        CHECK(a.numel() == old.size());
      } else {
        REQUIRE(a.numel() == big.size());
        CHECK(std::memcmp(a.bytes.data(), big.data(), big.size() * 4) == 0);
      }
      for (const std::string& nm : list_dir(d.path))
        if (nm != "x.npy") ::unlink(d.file(nm).c_str());
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// numpy itself (when /usr/bin/python3 has it).
// ---------------------------------------------------------------------------------------------------------
namespace {
const char* const numpy_check_script = R"PY(
import glob, os, sys
import numpy as np

d = sys.argv[1]
bad = []

def parse(path):
    with open(path) as f:
        lines = f.read().split('\n')
    descr = lines[0]
    shape = tuple(int(x) for x in lines[1].split(',') if x != '')
    vals = [v for v in lines[2:] if v != '']
    return descr, shape, vals

def value_of(descr, v):
    return float.fromhex(v) if descr[1] == 'f' else int(v)

def same(descr, got, want):
    if descr[1] == 'f':
        if want != want:
            return got != got
        return got == want and np.signbit(got) == np.signbit(want)
    return int(got) == want

# 1. read every file nanscope wrote and compare with its expectation
n = 0
for exp in sorted(glob.glob(os.path.join(d, 'ns_*.txt'))):
    npy = exp[:-4] + '.npy'
    descr, shape, vals = parse(exp)
    a = np.load(npy)
    if a.dtype.str != descr:
        bad.append('%s: dtype %s, expected %s' % (npy, a.dtype.str, descr))
        continue
    if a.shape != shape:
        bad.append('%s: shape %s, expected %s' % (npy, a.shape, shape))
        continue
    flat = a.ravel(order='C')
    if len(flat) != len(vals):
        bad.append('%s: %d values, expected %d' % (npy, len(flat), len(vals)))
        continue
    for i, v in enumerate(vals):
        got = flat[i].item() if descr[1] != 'b' else int(flat[i])
        if not same(descr, float(got) if descr[1] == 'f' else got, value_of(descr, v)):
            bad.append('%s: element %d is %r, expected %s' % (npy, i, got, v))
            break
    n += 1

# 2. write files for nanscope to read: C and Fortran order, every supported dtype, ranks 0..3
specials = [0.0, -0.0, 1.5, -2.25, float('inf'), float('-inf'), float('nan'), 65504.0, 6e-8, 1e-40, 3.0e38, 1e-310]
types = ['<f8', '<f4', '<f2', '|i1', '<i2', '<i4', '<i8', '|u1', '<u2', '<u4', '<u8', '|b1']
shapes = [(), (5,), (3, 4), (2, 3, 4)]
k = 0
with np.errstate(all='ignore'):
    for t in types:
        for s in shapes:
            for order in ['C', 'F']:
                count = int(np.prod(s)) if s else 1
                if t[1] == 'f':
                    vals = [specials[i % len(specials)] if i % 3 else i * 0.1 for i in range(count)]
                    a = np.array(vals, dtype=np.float64).astype(np.dtype(t))
                elif t[1] == 'b':
                    a = np.array([(i * 7) % 3 == 0 for i in range(count)], dtype=bool)
                else:
                    info = np.iinfo(np.dtype(t))
                    vals = [[info.min, info.max, 0, 1, info.max // 3][i % 5] if i % 2 else (i * 37) % (int(info.max) + 1)
                            for i in range(count)]
                    a = np.array(vals, dtype=np.dtype(t))
                a = a.reshape(s)
                a = np.asfortranarray(a) if order == 'F' else np.ascontiguousarray(a)
                name = os.path.join(d, 'py_%03d' % k)
                np.save(name + '.npy', a)
                with open(name + '.txt', 'w') as f:
                    f.write(t + '\n' + ','.join(str(x) for x in a.shape) + '\n')
                    for x in a.ravel(order='C'):
                        if t[1] == 'f':
                            f.write(float(x).hex() + '\n')
                        else:
                            f.write(str(int(x)) + '\n')
                k += 1

for b in bad[:20]:
    print(b)
print('numpy read %d nanscope files, wrote %d files, %d problems' % (n, k, len(bad)))
sys.exit(1 if bad else 0)
)PY";

bool python_numpy_available() {
  return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
}

/// Exact value of one raw element of a file dtype as a double (ldexp on fields; no DAZ-sensitive conversion).
double file_value(dtype ft, const unsigned char* p) {
  std::uint64_t r = 0;
  std::memcpy(&r, p, ref_size_of(ft));
  switch (ft) {
    case dtype::f64: return f64_from_bits(r);
    case dtype::f32: return f32_value(static_cast<std::uint32_t>(r));
    case dtype::f16: return ref_decode_f16(static_cast<std::uint16_t>(r));
    default: return 0.0;
  }
}
std::string hex_double(double x) {
  if (is_nan(x)) return "nan";
  if (is_inf(x)) return sign_bit(x) ? "-inf" : "inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", x);
  return buf;
}
std::string int_text(dtype t, const unsigned char* p) {
  std::uint64_t r = 0;
  const std::size_t es = ref_size_of(t);
  std::memcpy(&r, p, es);
  const bool is_signed = t == dtype::i8 || t == dtype::i16 || t == dtype::i32 || t == dtype::i64;
  if (is_signed && es < 8 && ((r >> (8 * es - 1)) & 1) != 0) r |= ~std::uint64_t{0} << (8 * es);
  return is_signed ? std::to_string(static_cast<std::int64_t>(r)) : std::to_string(r);
}
std::string descr_text(dtype ft) { return nanscope::npy_descr(ft); }
}  // namespace

TEST_CASE("npy: numpy reads what write_npy writes, read_npy reads what numpy writes") {
  if (!python_numpy_available()) {
    MESSAGE("skipped: /usr/bin/python3 with numpy is not available (Debian: apt-get install python3-numpy)");
    return;
  }
  scratch_dir d;
  rng g(77);
  // our files, with expectations in text
  int written = 0;
  const layout shapes[] = {make_layout("0", {}, {}), make_layout("1", {6}, {1}), make_layout("2t", {3, 4}, {1, 3}),
                           make_layout("3", {2, 3, 4}, {12, 4, 1}), make_layout("4s", {2, 2, 3, 2}, {24, 12, 4, 2})};
  for (dtype t : npy_dtypes) {
    for (const layout& l : shapes) {
      const std::vector<std::uint64_t> logical = random_raws(t, static_cast<std::size_t>(l.numel()), g);
      const std::string base = d.file("ns_" + std::string(nanscope::name(t)) + "_" + l.label);
      std::vector<std::uint64_t> seen;
      auto write_as = [&](auto tag) {
        using U = decltype(tag);
        const strided_tensor<U> st = scatter(narrow<U>(logical), t, l, narrow<U>({0xFFFFFFFFFFFFFFFFull}));
        seen = logical_raw(st.view);
        nanscope::write_npy(base + ".npy", st.view);
      };
      switch (ref_size_of(t)) {
        case 1: write_as(std::uint8_t{}); break;
        case 2: write_as(std::uint16_t{}); break;
        case 4: write_as(std::uint32_t{}); break;
        default: write_as(std::uint64_t{}); break;
      }
      const dtype ft = expected_file_dtype(t);
      const std::vector<unsigned char> bytes = expected_bytes(t, seen);
      std::ostringstream txt;
      txt << descr_text(ft) << "\n";
      for (int i = 0; i < l.rank; ++i) txt << (i ? "," : "") << l.shape[i];
      txt << "\n";
      const std::size_t fes = ref_size_of(ft);
      for (std::size_t i = 0; i < seen.size(); ++i) {
        const unsigned char* p = bytes.data() + i * fes;
        txt << (ft == dtype::f64 || ft == dtype::f32 || ft == dtype::f16 ? hex_double(file_value(ft, p)) : int_text(ft, p))
            << "\n";
      }
      spit(base + ".txt", txt.str());
      ++written;
    }
  }
  spit(d.file("check.py"), std::string(numpy_check_script));
  const std::string cmd = "/usr/bin/python3 '" + d.file("check.py") + "' '" + d.path + "' > '" + d.file("py.log") + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::vector<unsigned char> log = slurp_bytes(d.file("py.log"));
  const std::string log_text(log.begin(), log.end());
  INFO("python output:\n", log_text);
  REQUIRE(rc == 0);
  CHECK(log_text.find("numpy read " + std::to_string(written) + " nanscope files") != std::string::npos);

  // numpy's files, read back and compared with numpy's own text
  int read = 0;
  for (int k = 0;; ++k) {
    char name[32];
    std::snprintf(name, sizeof name, "py_%03d", k);
    const std::string base = d.file(name);
    if (!can_open(base + ".npy")) break;
    const std::vector<unsigned char> t = slurp_bytes(base + ".txt");
    std::istringstream in(std::string(t.begin(), t.end()));
    std::string descr, shape_line, line;
    std::getline(in, descr);
    std::getline(in, shape_line);
    INFO(base, " ", descr, " (", shape_line, ")");
    const nanscope::npy_array a = nanscope::read_npy(base + ".npy");
    CHECK(descr_text(a.type) == descr);
    std::string shape_text;
    for (std::size_t i = 0; i < a.shape.size(); ++i) shape_text += (i ? "," : "") + std::to_string(a.shape[i]);
    CHECK(shape_text == shape_line);
    const std::size_t es = ref_size_of(a.type);
    std::size_t i = 0;
    int wrong = 0;
    while (std::getline(in, line) && !line.empty()) {
      REQUIRE(i < a.numel());
      const unsigned char* p = a.bytes.data() + i * es;
      bool ok;
      if (a.type == dtype::f64 || a.type == dtype::f32 || a.type == dtype::f16) {
        const double want = std::strtod(line.c_str(), nullptr);
        const double got = file_value(a.type, p);
        ok = is_nan(want) ? is_nan(got) : bits64(got) == bits64(want);
      } else {
        ok = int_text(a.type, p) == line;
      }
      if (!ok && wrong++ < 3) CHECK_MESSAGE(ok, "element ", i, ": file text ", line);
      ++i;
    }
    CHECK(i == a.numel());
    CHECK(wrong == 0);
    ++read;
  }
  CHECK(read == 12 * 4 * 2);
}

#endif  // NANSCOPE_TEST_POSIX
