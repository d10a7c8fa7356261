// nanscope-merge: what the merge concludes (the producing sites, the carriers, the receivers, the verdict) and its rendering as text and as JSON.
#ifndef NANSCOPE_TOOLS_MERGE_REPORT_HPP
#define NANSCOPE_TOOLS_MERGE_REPORT_HPP

#include "evidence.hpp"

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace nanscope_merge {

/// A site where a non-finite value appeared on a rank.
struct site {
  int rank = -1;
  std::uint64_t step = 0;
  std::uint64_t order = 0;
  std::string kind;         // produced | input | before_transfer | reduction | received
  std::string module_path;  // frames: the module; transfers: the site label
  std::string cls;
  std::string tensor;       // the tensor's context, or "input of all_reduce #3 on 'world'"
  std::string text;         // one line for people
};

/// One transfer that carried a non-finite value from some ranks to others.
struct carrier {
  std::string type;  // collective | send/recv
  std::string kind, comm, site;
  std::uint64_t seq = 0, step = 0;
  int tag = 0;
  std::vector<int> from, to;
  bool all_members = true;  // every member's record of the transfer is present
  std::string text;
};

struct result {
  int exit = no_fault;
  std::string verdict;  // no_fault | fault | incomplete | error
  std::string dir;
  int world_size = 0;
  std::vector<int> present, missing;
  std::vector<site> origins;          // the first producing site(s); several: concurrent
  std::vector<site> later_producers;  // producing sites that happen after an origin
  std::vector<carrier> chain;
  std::vector<int> receivers;         // ranks whose first non-finite value arrived through a transfer
  bool local_only = false;            // a fault that no marked transfer carried to another rank
  std::vector<std::string> notes;     // what is missing and what that means
  std::string error;
};

namespace detail {

inline std::string ranks_text(const std::vector<int>& r) {
  std::string s = r.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  return s;
}
}  // namespace detail

inline json site_json(const site& s) {
  return json{{"rank", s.rank},          {"step", s.step},     {"order", s.order}, {"kind", s.kind},
              {"module_path", s.module_path}, {"class", s.cls}, {"tensor", s.tensor}, {"text", s.text}};
}

inline json to_json(const result& r) {
  json j;
  j["verdict"] = r.verdict;
  j["exit_code"] = r.exit;
  j["dir"] = r.dir;
  if (r.exit == error) {
    j["error"] = r.error;
    return j;
  }
  j["world_size"] = r.world_size;
  j["ranks_present"] = r.present;
  j["ranks_missing"] = r.missing;
  j["origins"] = json::array();
  for (const auto& s : r.origins) j["origins"].push_back(site_json(s));
  j["concurrent"] = r.origins.size() > 1;
  j["later_producers"] = json::array();
  for (const auto& s : r.later_producers) j["later_producers"].push_back(site_json(s));
  j["chain"] = json::array();
  for (const auto& c : r.chain)
    j["chain"].push_back(json{{"type", c.type}, {"kind", c.kind}, {"comm", c.comm}, {"seq", c.seq}, {"tag", c.tag},
                              {"step", c.step}, {"site", c.site}, {"from", c.from}, {"to", c.to}, {"text", c.text}});
  j["receivers"] = r.receivers;
  j["local_only"] = r.local_only;
  j["notes"] = r.notes;
  return j;
}

namespace detail {
/// s as a JSON string, as nlohmann-json's dump(..., ensure_ascii = false, error_handler_t::replace) writes it:
/// ASCII here, anything else (UTF-8, or bytes that are not, written as U+FFFD) by nlohmann-json itself.
inline void json_string(std::string& o, const std::string& s) {
  for (const char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) {
      o += json(s).dump(-1, ' ', false, json::error_handler_t::replace);
      return;
    }
  o += '"';
  std::size_t plain = 0;  // the start of the characters not yet copied, none of them escaped
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c > 0x1F && c != '"' && c != '\\') continue;
    o.append(s, plain, i - plain);
    plain = i + 1;
    switch (c) {
      case '\b': o += "\\b"; break;
      case '\t': o += "\\t"; break;
      case '\n': o += "\\n"; break;
      case '\f': o += "\\f"; break;
      case '\r': o += "\\r"; break;
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      default: {
        const char* hex = "0123456789abcdef";
        o += "\\u00";
        o += hex[c >> 4];
        o += hex[c & 15];
      }
    }
  }
  o.append(s, plain, s.size() - plain);
  o += '"';
}
/// The pieces of nlohmann-json's dump(2): an object's keys come sorted, one member or element a line.
class json_writer {
 public:
  explicit json_writer(std::string& o) : o_(o) {}
  void open() { o_ += '{'; first_.push_back(true); }
  void close() { end('}'); }
  void key(const char* k) {
    o_ += first_.back() ? "\n" : ",\n";
    first_.back() = false;
    o_.append(2 * first_.size(), ' ');
    o_ += '"';
    o_ += k;
    o_ += "\": ";
  }
  void element() {
    o_ += first_.back() ? "\n" : ",\n";
    first_.back() = false;
    o_.append(2 * first_.size(), ' ');
  }
  void open_array() { o_ += '['; first_.push_back(true); }
  void close_array() { end(']'); }
  void value(const std::string& s) { json_string(o_, s); }
  void value(bool b) { o_ += b ? "true" : "false"; }
  void value(int v) { o_ += std::to_string(v); }
  void value(std::uint64_t v) { o_ += std::to_string(v); }
  void value(const std::vector<int>& v) {
    open_array();
    for (const int x : v) {
      element();
      value(x);
    }
    close_array();
  }
  void value(const std::vector<std::string>& v) {
    open_array();
    for (const auto& x : v) {
      element();
      value(x);
    }
    close_array();
  }
  template <class T>
  void member(const char* k, const T& v) {
    key(k);
    value(v);
  }

 private:
  void end(char c) {
    const bool empty = first_.back();
    first_.pop_back();
    if (!empty) {
      o_ += '\n';
      o_.append(2 * first_.size(), ' ');
    }
    o_ += c;
  }
  std::string& o_;
  std::vector<bool> first_;
};
inline void site_json_text(json_writer& w, const site& s) {
  w.open();
  w.member("class", s.cls);
  w.member("kind", s.kind);
  w.member("module_path", s.module_path);
  w.member("order", s.order);
  w.member("rank", s.rank);
  w.member("step", s.step);
  w.member("tensor", s.tensor);
  w.member("text", s.text);
  w.close();
}
}  // namespace detail

/// to_json(r).dump(2, ' ', false, json::error_handler_t::replace) + "\n", byte for byte, written directly (a
/// result with a long chain made a large tree of JSON values first).
inline std::string to_json_text(const result& r) {
  std::string o;
  detail::json_writer w(o);
  w.open();
  if (r.exit == error) {
    w.member("dir", r.dir);
    w.member("error", r.error);
    w.member("exit_code", r.exit);
    w.member("verdict", r.verdict);
    w.close();
    o += '\n';
    return o;
  }
  w.key("chain");
  w.open_array();
  for (const auto& c : r.chain) {
    w.element();
    w.open();
    w.member("comm", c.comm);
    w.member("from", c.from);
    w.member("kind", c.kind);
    w.member("seq", c.seq);
    w.member("site", c.site);
    w.member("step", c.step);
    w.member("tag", c.tag);
    w.member("text", c.text);
    w.member("to", c.to);
    w.member("type", c.type);
    w.close();
  }
  w.close_array();
  w.member("concurrent", r.origins.size() > 1);
  w.member("dir", r.dir);
  w.member("exit_code", r.exit);
  w.key("later_producers");
  w.open_array();
  for (const auto& s : r.later_producers) {
    w.element();
    detail::site_json_text(w, s);
  }
  w.close_array();
  w.member("local_only", r.local_only);
  w.member("notes", r.notes);
  w.key("origins");
  w.open_array();
  for (const auto& s : r.origins) {
    w.element();
    detail::site_json_text(w, s);
  }
  w.close_array();
  w.member("ranks_missing", r.missing);
  w.member("ranks_present", r.present);
  w.member("receivers", r.receivers);
  w.member("verdict", r.verdict);
  w.member("world_size", r.world_size);
  w.close();
  o += '\n';
  return o;
}

inline std::string to_text(const result& r) {
  std::ostringstream o;
  if (r.exit == error) {
    o << "nanscope-merge: error: " << r.error << "\n";
    return o.str();
  }
  o << "nanscope-merge: " << r.present.size() << " of " << r.world_size << " rank files in " << r.dir << "\n";
  if (!r.missing.empty()) o << "missing: " << detail::ranks_text(r.missing) << "\n";
  if (r.origins.size() == 1) o << "first producing site: " << r.origins[0].text << "\n";
  if (r.origins.size() > 1) {
    o << "first producing sites (concurrent: neither happens before the other):\n";
    for (const auto& s : r.origins) o << "  " << s.text << "\n";
  }
  if (!r.later_producers.empty()) {
    o << "later producing sites (they happen after the first):\n";
    for (const auto& s : r.later_producers) o << "  " << s.text << "\n";
  }
  if (!r.chain.empty()) {
    o << "propagation:\n";
    for (const auto& c : r.chain) o << "  " << c.text << "\n";
  }
  if (r.local_only) o << "it stayed local: no marked collective or send/recv carried it to another rank\n";
  if (!r.receivers.empty()) o << "receivers: " << detail::ranks_text(r.receivers) << "\n";
  for (const auto& n : r.notes) o << "note: " << n << "\n";
  o << "verdict: "
    << (r.exit == no_fault ? "no non-finite value in any rank's evidence"
        : r.exit == fault  ? "fault attributed"
                           : "evidence incomplete")
    << " (exit " << r.exit << ")\n";
  return o.str();
}

}  // namespace nanscope_merge

#endif  // NANSCOPE_TOOLS_MERGE_REPORT_HPP
