// nanscope CLI — npz.hpp: `.npz` archives, what numpy.savez and numpy.savez_compressed write: a zip file whose
// members are .npy files, stored or deflated. Only the tool includes this file: it needs zlib (inflate, CRC-32),
// which the core headers never use.
//
// The zip structures are read as the format describes them (PKWARE's APPNOTE): the end of central directory
// record at the end of the file (found backwards, past an optional comment), its zip64 form when a zip64 locator
// precedes it, the central directory (one entry per member, sizes and offsets from a zip64 extra field where the
// 32-bit ones are 0xFFFFFFFF), and each member's local header (its name and method must match the central
// directory's; the data follows it). The central directory is the authority on sizes, so members written with a
// data descriptor (sizes after the data: what zipfile writes to a pipe) read like any other.
//
// Hostile archives: every offset and size is checked against the file before it is used, nothing is read outside
// [data, data + size), and the whole layout is checked before any member is scanned: the end record and the
// central directory lie in the file; members lie before the central directory, one after the other, never
// overlapping (two entries pointing at the same bytes are the "overlapping files" zip bomb); a stored member's two
// sizes agree; a deflated member claims at most 1032 bytes per compressed byte (more than deflate can produce:
// a lying size or a zip bomb); no encrypted member, no compression method other than stored (0) and deflate (8),
// no multi-disk archive, no name twice. Deflated members are inflated chunk by chunk straight into the scan
// (scan_tensor_stream), so memory stays bounded whatever a member claims; inflation stops at the size the central
// directory gives (a stream that holds more is an error, not inflated further), and the data's CRC-32 must match.
// A problem inside one member (corrupt deflate data, a CRC mismatch, a malformed .npy) is reported for that
// member, and the next member is read.
#ifndef NANSCOPE_CLI_NPZ_HPP
#define NANSCOPE_CLI_NPZ_HPP

#include "scan.hpp"

#include <nanscope/npy.hpp>
#include <nanscope/safetensors.hpp>

#ifndef ZLIB_CONST
#define ZLIB_CONST  // next_in is a pointer to const
#endif
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace nanscope_cli {
namespace zip {

inline std::uint16_t rd16(const unsigned char* p) { return static_cast<std::uint16_t>(p[0] | p[1] << 8); }
inline std::uint32_t rd32(const unsigned char* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}
inline std::uint64_t rd64(const unsigned char* p) {
  return static_cast<std::uint64_t>(rd32(p)) | static_cast<std::uint64_t>(rd32(p + 4)) << 32;
}

// Signatures and fixed sizes of the records.
inline constexpr std::uint32_t local_sig = 0x04034b50, central_sig = 0x02014b50, end_sig = 0x06054b50,
                               end64_sig = 0x06064b50, locator64_sig = 0x07064b50;
inline constexpr std::size_t local_len = 30, central_len = 46, end_len = 22, locator64_len = 20, end64_len = 56;

/// The most deflate can expand: a 258-byte match coded in 2 bits is 1032 bytes of output per byte of input.
inline constexpr std::uint64_t max_deflate_ratio = 1032;
/// The longest .npy header accepted in a deflated member (numpy writes under 200 bytes; it reads up to 10000).
inline constexpr std::uint64_t max_member_header = std::uint64_t{1} << 20;

/// One member as the central directory describes it, with where its data starts (from its local header).
struct member {
  std::string name;
  std::uint16_t flags = 0;
  std::uint16_t method = 0;  ///< 0 stored, 8 deflate
  std::uint32_t crc = 0;
  std::uint64_t compressed_size = 0;
  std::uint64_t size = 0;  ///< uncompressed
  std::uint64_t header_offset = 0;
  std::uint64_t data_offset = 0;

  bool is_directory() const { return !name.empty() && name.back() == '/'; }
};

[[noreturn]] inline void fail(const std::string& path, const std::string& problem) {
  nanscope::detail::file_fail(path, problem);
}

inline std::string quote(const std::string& name) { return nanscope::detail::st_quote(name); }

inline const char* method_name(std::uint16_t m) {
  switch (m) {
    case 1: return "shrink";
    case 6: return "implode";
    case 9: return "deflate64";
    case 12: return "bzip2";
    case 14: return "lzma";
    case 93: return "zstd";
    case 95: return "xz";
    default: return "unknown";
  }
}

/// The members of the zip archive held in [f, f + size), in central directory order, after every check of the
/// layout listed at the top of this file. Throws nanscope::error("nanscope: file '<path>': <problem>").
inline std::vector<member> parse(const unsigned char* f, std::size_t size, const std::string& path) {
  if (size < end_len)
    fail(path, "not a zip archive (.npz): only " + std::to_string(size) +
                   " bytes, less than an end of central directory record (22 bytes)");
  // The end record: the last signature whose comment length reaches exactly the end of the file.
  std::size_t end = size;
  const std::size_t lowest = size - end_len > 0xFFFF ? size - end_len - 0xFFFF : 0;
  for (std::size_t pos = size - end_len + 1; pos-- > lowest;) {
    if (rd32(f + pos) == end_sig && pos + end_len + rd16(f + pos + 20) == size) {
      end = pos;
      break;
    }
  }
  if (end == size) fail(path, "not a zip archive (.npz): no end of central directory record");
  const unsigned char* e = f + end;
  std::uint64_t disk = rd16(e + 4), cd_disk = rd16(e + 6), entries_here = rd16(e + 8), entries = rd16(e + 10);
  std::uint64_t cd_size = rd32(e + 12), cd_offset = rd32(e + 16);
  std::uint64_t cd_limit = end;  // where the central directory must end by
  if (end >= locator64_len && rd32(f + end - locator64_len) == locator64_sig) {
    const unsigned char* loc = f + end - locator64_len;
    const std::uint64_t at = rd64(loc + 8);
    if (rd32(loc + 4) != 0 || rd32(loc + 16) != 1) fail(path, "a multi-disk (split) zip archive: not supported");
    const std::uint64_t before = end - locator64_len;
    if (at > before || before - at < end64_len)
      fail(path, "the zip64 end of central directory record (offset " + std::to_string(at) +
                     ") does not lie before its locator (offset " + std::to_string(before) + ")");
    const unsigned char* z = f + at;
    if (rd32(z) != end64_sig)
      fail(path, "no zip64 end of central directory record at offset " + std::to_string(at) + " (bad signature)");
    const std::uint64_t rest = rd64(z + 4);  // the record's size after its first 12 bytes
    if (rest < end64_len - 12 || rest > before - at - 12)
      fail(path, "the zip64 end of central directory record says it is " + std::to_string(rest) +
                     " bytes long (after 12), which does not fit before its locator");
    disk = rd32(z + 16);
    cd_disk = rd32(z + 20);
    entries_here = rd64(z + 24);
    entries = rd64(z + 32);
    cd_size = rd64(z + 40);
    cd_offset = rd64(z + 48);
    cd_limit = at;
  } else if (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    fail(path, "the end of central directory record holds zip64 markers, but no zip64 locator precedes it");
  }
  if (disk != 0 || cd_disk != 0 || entries_here != entries) fail(path, "a multi-disk (split) zip archive: not supported");
  if (cd_offset > cd_limit || cd_size > cd_limit - cd_offset)
    fail(path, "the central directory (" + std::to_string(cd_size) + " bytes at offset " + std::to_string(cd_offset) +
                   ") runs past the end of central directory record (offset " + std::to_string(cd_limit) + ")");
  if (entries > cd_size / central_len)
    fail(path, "the end of central directory record counts " + std::to_string(entries) +
                   " members, more than a central directory of " + std::to_string(cd_size) + " bytes can hold");

  std::vector<member> members;
  members.reserve(static_cast<std::size_t>(entries));
  const std::uint64_t cd_end = cd_offset + cd_size;
  std::uint64_t p = cd_offset;
  for (std::uint64_t i = 0; i < entries; ++i) {
    const std::string where = "central directory entry " + std::to_string(i) + " (offset " + std::to_string(p) + ")";
    if (cd_end - p < central_len) fail(path, where + " runs past the end of the central directory");
    const unsigned char* c = f + p;
    if (rd32(c) != central_sig) fail(path, where + ": bad signature");
    member m;
    m.flags = rd16(c + 8);
    m.method = rd16(c + 10);
    m.crc = rd32(c + 16);
    m.compressed_size = rd32(c + 20);
    m.size = rd32(c + 24);
    const std::size_t name_len = rd16(c + 28), extra_len = rd16(c + 30), comment_len = rd16(c + 32);
    std::uint64_t disk_start = rd16(c + 34);
    m.header_offset = rd32(c + 42);
    if (cd_end - p - central_len < name_len + extra_len + comment_len)
      fail(path, where + " runs past the end of the central directory");
    m.name.assign(reinterpret_cast<const char*>(c + central_len), name_len);
    // zip64 extra field (id 1): the 64-bit values of exactly the fields whose 32-bit value is all ones, in order
    const bool need_size = m.size == 0xFFFFFFFF, need_csize = m.compressed_size == 0xFFFFFFFF,
               need_offset = m.header_offset == 0xFFFFFFFF, need_disk = disk_start == 0xFFFF;
    bool have64 = false;
    const unsigned char* x = c + central_len + name_len;
    std::size_t left = extra_len;
    while (left >= 4) {
      const std::size_t id = rd16(x), len = rd16(x + 2);
      if (len > left - 4) fail(path, "member " + quote(m.name) + ": its extra field " + std::to_string(id) + " is truncated");
      if (id == 1 && !have64) {
        const unsigned char* v = x + 4;
        std::size_t v_left = len;
        auto take = [&](std::uint64_t& out, std::size_t bytes) {
          if (v_left < bytes) fail(path, "member " + quote(m.name) + ": its zip64 extra field is too short");
          out = bytes == 8 ? rd64(v) : rd32(v);
          v += bytes;
          v_left -= bytes;
        };
        if (need_size) take(m.size, 8);
        if (need_csize) take(m.compressed_size, 8);
        if (need_offset) take(m.header_offset, 8);
        if (need_disk) take(disk_start, 4);
        have64 = true;
      }
      x += 4 + len;
      left -= 4 + len;
    }
    if ((need_size || need_csize || need_offset || need_disk) && !have64)
      fail(path, "member " + quote(m.name) + ": its sizes or offset need a zip64 extra field, and it has none");
    if (disk_start != 0) fail(path, "a multi-disk (split) zip archive: not supported");
    members.push_back(std::move(m));
    p += central_len + name_len + extra_len + comment_len;
  }
  if (p != cd_end)
    fail(path, "the central directory holds " + std::to_string(cd_end - p) + " bytes after its " +
                   std::to_string(entries) + " entries");

  for (member& m : members) {
    const std::string who = "member " + quote(m.name);
    if ((m.flags & 0x41) != 0) fail(path, who + " is encrypted: not supported");
    if (m.method != 0 && m.method != 8)
      fail(path, who + ": compression method " + std::to_string(m.method) + " (" + method_name(m.method) +
                     ") is not supported (numpy writes stored (0) and deflate (8) members)");
    if (m.header_offset > cd_offset || cd_offset - m.header_offset < local_len)
      fail(path, who + ": its local header (offset " + std::to_string(m.header_offset) +
                     ") does not lie before the central directory (offset " + std::to_string(cd_offset) + ")");
    const unsigned char* l = f + m.header_offset;
    if (rd32(l) != local_sig)
      fail(path, who + ": no local header at offset " + std::to_string(m.header_offset) + " (bad signature)");
    const std::size_t name_len = rd16(l + 26), extra_len = rd16(l + 28);
    if (cd_offset - m.header_offset - local_len < name_len + extra_len)
      fail(path, who + ": its local header (offset " + std::to_string(m.header_offset) +
                     ") runs into the central directory");
    if (name_len != m.name.size() || std::memcmp(l + local_len, m.name.data(), name_len) != 0)
      fail(path, who + ": its local header names it " +
                     quote(std::string(reinterpret_cast<const char*>(l + local_len), name_len)));
    if (rd16(l + 8) != m.method)
      fail(path, who + ": its local header says compression method " + std::to_string(rd16(l + 8)) +
                     ", the central directory " + std::to_string(m.method));
    m.data_offset = m.header_offset + local_len + name_len + extra_len;
    if (m.compressed_size > cd_offset - m.data_offset)
      fail(path, who + ": its " + std::to_string(m.compressed_size) + " bytes of data at offset " +
                     std::to_string(m.data_offset) + " run past the start of the central directory (offset " +
                     std::to_string(cd_offset) + ")");
    if (m.method == 0 && m.compressed_size != m.size)
      fail(path, who + " is stored (not compressed), but its sizes differ: " + std::to_string(m.compressed_size) +
                     " bytes in the archive, " + std::to_string(m.size) + " uncompressed");
    if (m.method == 8 && m.size / max_deflate_ratio > m.compressed_size + 1)
      fail(path, who + " claims " + std::to_string(m.size) + " bytes inflated from " +
                     std::to_string(m.compressed_size) +
                     " compressed bytes, more than deflate can produce (at most 1032 to 1): a damaged archive or a "
                     "zip bomb; not inflated");
  }
  // no name twice (numpy's reader would keep one of them silently)
  std::vector<const member*> by_name;
  for (const member& m : members) by_name.push_back(&m);
  std::sort(by_name.begin(), by_name.end(), [](const member* a, const member* b) { return a->name < b->name; });
  for (std::size_t i = 1; i < by_name.size(); ++i)
    if (by_name[i]->name == by_name[i - 1]->name) fail(path, "member " + quote(by_name[i]->name) + " appears twice");
  // members one after the other, never sharing bytes
  std::vector<const member*> by_offset;
  for (const member& m : members) by_offset.push_back(&m);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const member* a, const member* b) { return a->header_offset < b->header_offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const member& a = *by_offset[i - 1];
    const member& b = *by_offset[i];
    if (a.data_offset + a.compressed_size > b.header_offset)
      fail(path, "member " + quote(b.name) + " (local header at offset " + std::to_string(b.header_offset) +
                     ") overlaps member " + quote(a.name) + " (bytes [" + std::to_string(a.header_offset) + ", " +
                     std::to_string(a.data_offset + a.compressed_size) + "))");
  }
  return members;
}

/// CRC-32 (zlib's) of n bytes, in pieces that fit zlib's 32-bit lengths.
inline std::uint32_t crc32_of(std::uint32_t crc, const unsigned char* p, std::uint64_t n) {
  uLong c = crc;
  while (n > 0) {
    const uInt k = n > (uInt{1} << 30) ? (uInt{1} << 30) : static_cast<uInt>(n);
    c = ::crc32(c, p, k);
    p += k;
    n -= k;
  }
  return static_cast<std::uint32_t>(c);
}

/// A deflated member's data, inflated in order (raw deflate, as zip stores it), never past the size the central
/// directory gives. Errors throw nanscope::error("<where>: <problem>").
class inflater {
 public:
  inflater(const unsigned char* in, std::uint64_t in_size, std::uint64_t out_size, std::string where)
      : in_(in), in_left_(in_size), out_left_(out_size), where_(std::move(where)) {
    std::memset(&zs_, 0, sizeof zs_);
    if (inflateInit2(&zs_, -MAX_WBITS) != Z_OK) fail_("zlib's inflateInit2 failed");
    ready_ = true;
  }
  ~inflater() {
    if (ready_) inflateEnd(&zs_);
  }
  inflater(const inflater&) = delete;
  inflater& operator=(const inflater&) = delete;

  /// Compressed bytes consumed so far.
  std::uint64_t consumed() const { return zs_.total_in; }

  /// The next n bytes of the member (n at most what is left of its size).
  void read(unsigned char* dst, std::size_t n) {
    if (n > out_left_) fail_("internal error: a read past the member's size");
    while (n > 0) {
      const uInt want = n > (std::size_t{1} << 30) ? (uInt{1} << 30) : static_cast<uInt>(n);
      zs_.next_out = dst;
      zs_.avail_out = want;
      while (zs_.avail_out > 0) {
        if (ended_)
          fail_("the deflate stream ends after " + std::to_string(done_ + (want - zs_.avail_out)) +
                " bytes, but the central directory says " + std::to_string(done_ + out_left_));
        step();
      }
      crc_ = crc32_of(crc_, dst, want);
      dst += want;
      n -= want;
      done_ += want;
      out_left_ -= want;
    }
  }

  /// After the last read: the deflate stream must end exactly here, with every compressed byte used, and the
  /// data's CRC-32 must be the central directory's.
  void finish(std::uint32_t expected_crc) {
    unsigned char probe = 0;
    while (!ended_) {
      zs_.next_out = &probe;
      zs_.avail_out = 1;
      step();
      if (zs_.avail_out == 0)
        fail_("the deflate stream holds more than the " + std::to_string(done_) +
              " bytes the central directory says (a damaged archive or a zip bomb; not inflated further)");
    }
    const std::uint64_t unused = zs_.avail_in + in_left_;
    if (unused != 0)
      fail_(std::to_string(unused) + " bytes of compressed data follow the end of the deflate stream");
    if (crc_ != expected_crc)
      fail_(crc_text("the inflated data has CRC-32 ", crc_) + crc_text(", the central directory says ", expected_crc) +
            " (a damaged archive)");
  }

 private:
  const unsigned char* in_;
  std::uint64_t in_left_;   // compressed bytes not yet handed to zlib
  std::uint64_t out_left_;  // bytes of the member not yet read
  std::uint64_t done_ = 0;  // bytes of the member read
  std::string where_;
  z_stream zs_;
  bool ready_ = false;
  bool ended_ = false;
  std::uint32_t crc_ = 0;

  [[noreturn]] void fail_(const std::string& problem) const { throw nanscope::error(where_ + ": " + problem); }

  static std::string crc_text(const char* what, std::uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(v));
    return std::string(what) + buf;
  }

  /// One call of inflate() with the output space set by the caller.
  void step() {
    if (zs_.avail_in == 0 && in_left_ > 0) {
      const uInt k = in_left_ > (std::uint64_t{1} << 30) ? (uInt{1} << 30) : static_cast<uInt>(in_left_);
      zs_.next_in = in_;
      zs_.avail_in = k;
      in_ += k;
      in_left_ -= k;
    }
    const int rc = ::inflate(&zs_, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      ended_ = true;
    } else if (rc == Z_BUF_ERROR) {  // no progress possible: with room to write, the input is used up
      fail_("the compressed data ends before the deflate stream does (a truncated member)");
    } else if (rc == Z_DATA_ERROR) {
      fail_(std::string("corrupt deflate data: ") + (zs_.msg != nullptr ? zs_.msg : "invalid stream"));
    } else if (rc == Z_MEM_ERROR) {
      fail_("out of memory while inflating");
    } else if (rc != Z_OK) {
      fail_("inflate failed (zlib error " + std::to_string(rc) + ")");
    }
  }
};

}  // namespace zip

/// The key numpy gives a member (numpy.load(...).files): its name without the ".npy" suffix.
inline std::string npz_key(const std::string& name) {
  return name.size() >= 4 && name.compare(name.size() - 4, 4, ".npy") == 0 ? name.substr(0, name.size() - 4) : name;
}

/// Scans every .npy member of an .npz archive held in memory, in central directory order, each reported as its
/// own tensor with the file "<path>:<key>". The archive's layout is checked first (zip::parse): a problem there
/// throws nanscope::error and no member is reported. A problem inside a member goes to on_member_error(label,
/// message) with the message "nanscope: file '<path>': member '<name>': <problem>", and the next member is
/// read. A member whose name does not end in ".npy" is a warning, not scanned (numpy.load returns its bytes);
/// directory entries are ignored. Exceptions other than nanscope::error (from the callbacks) propagate.
inline void scan_npz(const unsigned char* data, std::size_t size, const std::string& path, const scan_settings& st,
                     const scan_callbacks& cb,
                     const std::function<void(const std::string&, const std::string&)>& on_member_error) {
  const std::vector<zip::member> members = zip::parse(data, size, path);
  for (const zip::member& m : members) {
    if (m.is_directory()) continue;
    const std::string where = "nanscope: file '" + path + "': member " + zip::quote(m.name);
    if (npz_key(m.name) == m.name) {
      if (cb.on_warning)
        cb.on_warning("member " + zip::quote(m.name) + " is not a .npy array (its name does not end in .npy): not scanned");
      continue;
    }
    const std::string label = path + ":" + npz_key(m.name);
    // the library's messages name the file as it was given: the label; they are rewritten to name the member
    const std::string label_prefix = "nanscope: file '" + label + "': ";
    scan_callbacks mcb;
    mcb.on_warning = cb.on_warning;
    try {
      if (m.method == 0) {
        const unsigned char* d = data + m.data_offset;
        mcb.on_progress = [&](std::uint64_t done) {
          if (cb.on_progress) cb.on_progress(m.data_offset + done);
        };
        const std::uint32_t crc = zip::crc32_of(0, d, m.size);
        if (crc != m.crc) {
          char buf[96];
          std::snprintf(buf, sizeof buf, "the data has CRC-32 %08x, the central directory says %08x (a damaged archive)",
                        static_cast<unsigned>(crc), static_cast<unsigned>(m.crc));
          throw nanscope::error(where + ": " + buf);
        }
        mcb.on_tensor = cb.on_tensor;
        scan_buffer(d, static_cast<std::size_t>(m.size), label, file_format::npy, st, mcb);
        continue;
      }
      zip::inflater inf(data + m.data_offset, m.compressed_size, m.size, where);
      mcb.on_progress = [&](std::uint64_t) {
        if (cb.on_progress) cb.on_progress(m.data_offset + inf.consumed());
      };
      // The preamble, then the whole header dict: parse_npy() reads only those (the data it checks by its size,
      // the member's size given here), so the buffer holds no more than them.
      std::vector<unsigned char> head(static_cast<std::size_t>(m.size < 12 ? m.size : 12));
      inf.read(head.data(), head.size());
      if (head.size() == 12 && std::memcmp(head.data(), "\x93NUMPY", 6) == 0 && head[7] == 0 &&
          (head[6] == 1 || head[6] == 2)) {
        std::uint64_t hl = static_cast<std::uint64_t>(head[8]) | static_cast<std::uint64_t>(head[9]) << 8;
        std::uint64_t hs = 10;
        if (head[6] == 2) {
          hl |= static_cast<std::uint64_t>(head[10]) << 16 | static_cast<std::uint64_t>(head[11]) << 24;
          hs = 12;
        }
        if (hs + hl <= m.size) {
          if (hs + hl > zip::max_member_header)
            throw nanscope::error(where + ": its .npy header is " + std::to_string(hl) +
                                  " bytes long, over the limit of 1 MiB for a compressed member");
          if (hs + hl > head.size()) {
            head.resize(static_cast<std::size_t>(hs + hl));
            inf.read(head.data() + 12, head.size() - 12);
          }
        }
      }
      const std::uint64_t header_bytes = head.size();  // read so far
      nanscope::npy_layout lay;
      try {
        lay = nanscope::parse_npy(head.data(), static_cast<std::size_t>(m.size), label, st.npy);
      } catch (const nanscope::error&) {
        tensor_report u;
        if (!st.report_unsupported_npy ||
            !detail::npy_unsupported(head.data(), static_cast<std::size_t>(m.size), label, st, u))
          throw;
        // skipped, but read to the end all the same: the stream and its CRC are checked
        std::vector<unsigned char> sink(std::size_t{1} << 16);
        for (std::uint64_t left = m.size - header_bytes; left > 0;) {
          const std::size_t k = left < sink.size() ? static_cast<std::size_t>(left) : sink.size();
          inf.read(sink.data(), k);
          left -= k;
          if (mcb.on_progress) mcb.on_progress(0);
        }
        inf.finish(m.crc);
        if (cb.on_tensor) cb.on_tensor(u);
        continue;
      }
      if (lay.data_offset != header_bytes)  // cannot happen: a header that parses is longer than 12 bytes
        throw nanscope::error(where + ": malformed .npy header (the data would start at byte " +
                              std::to_string(lay.data_offset) + ")");
      tensor_report r;
      r.file = label;
      r.file_dtype = lay.descr;
      r.type = lay.type;
      r.rank = static_cast<int>(lay.shape.size());
      for (int i = 0; i < r.rank; ++i) r.shape[i] = lay.shape[static_cast<std::size_t>(i)];
      r.count = lay.numel;
      r.fortran_order = lay.fortran_order;
      std::uint64_t done = 0;
      const byte_source source = [&](unsigned char* dst, std::size_t n) { inf.read(dst, n); };
      scan_tensor_stream(source, lay.type, lay.numel, lay.fortran_order, lay.needs_swap(), st, r, done, mcb);
      inf.finish(m.crc);
      if (cb.on_tensor) cb.on_tensor(r);
    } catch (const nanscope::error& e) {
      std::string msg = e.what();
      if (msg.compare(0, label_prefix.size(), label_prefix) == 0) msg = where + ": " + msg.substr(label_prefix.size());
      if (on_member_error) on_member_error(label, msg);
    }
  }
}

}  // namespace nanscope_cli

#endif  // NANSCOPE_CLI_NPZ_HPP
