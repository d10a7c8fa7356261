// nanscope — detail/control_toml.hpp: a control_config from a config file's TOML text, read by detail/toml_config.hpp.
//
// Included by control.hpp after control_config and the detail::parse_* helpers (it needs them; not on its own).
// control_from_toml is parse_control_toml's body: the same keys, checks and error texts as when toml++ read the
// file, and, as then, a table's keys are taken in sorted (byte) order, so the first error reported and which of
// `enabled` and `mode = "off"` applies last do not depend on the order of the file. Out of memory it throws
// std::bad_alloc (the controller keeps its configuration); nothing noexcept allocates.
#ifndef NANSCOPE_DETAIL_CONTROL_TOML_HPP
#define NANSCOPE_DETAIL_CONTROL_TOML_HPP

#ifndef NANSCOPE_CONTROL_HPP
#error "nanscope/detail/control_toml.hpp is part of nanscope/control.hpp: include that instead"
#endif

#include "../config.hpp"
#include "toml_config.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// A table's entries sorted by key (bytewise, as toml++'s tables iterate).
template <class Alloc>
std::vector<const basic_toml_value<Alloc>*> toml_sorted_entries(const basic_toml_value<Alloc>& table) {
  std::vector<const basic_toml_value<Alloc>*> out;
  out.reserve(table.size());
  for (const auto& e : table.items()) out.push_back(&e);
  std::sort(out.begin(), out.end(), [](const basic_toml_value<Alloc>* a, const basic_toml_value<Alloc>* b) {
    return a->key() < b->key();
  });
  return out;
}

/// parse_control_toml on a parsed document (the root table).
template <class Alloc>
bool control_from_toml_document(const basic_toml_value<Alloc>& root, std::string_view source, control_config& cfg,
                                std::string& error) {
  using node = basic_toml_value<Alloc>;
  auto where = [&](const node& n) { return std::string(source) + ":" + std::to_string(n.line()) + ": "; };
  // Reads an unsigned integer key; false with error set when the value is not one.
  auto get_u64 = [&](const node& n, std::string_view key, std::uint64_t& out, std::uint64_t min) {
    if (!n.is_integer() || n.as_integer() < 0 || static_cast<std::uint64_t>(n.as_integer()) < min) {
      error = where(n) + "'" + std::string(key) + "' must be an integer >= " + std::to_string(min);
      return false;
    }
    out = static_cast<std::uint64_t>(n.as_integer());
    return true;
  };
  auto get_mode = [&](const node& n, bool& has_mode, check_mode& mode, bool& on) {
    bool off = false;
    check_mode m = check_mode::stats;
    if (!n.is_string() || !parse_mode(n.as_string(), m, off)) {
      error = where(n) +
              "'mode' must be one of \"stats\", \"curt_health\", \"concise_health\", \"full_health\", \"shape\", "
              "\"no_tensor\", \"off\"";
      return false;
    }
    if (off) {
      on = false;
    } else {
      has_mode = true;
      mode = m;
    }
    return true;
  };
  for (const node* entry : toml_sorted_entries(root)) {
    const std::string_view key = entry->key();
    const node& n = *entry;
    if (key == "enabled") {
      if (!n.is_boolean()) {
        error = where(n) + "'enabled' must be true or false";
        return false;
      }
      cfg.enabled = n.as_boolean();
    } else if (key == "mode") {
      bool on = true;
      if (!get_mode(n, cfg.has_mode, cfg.mode, on)) return false;
      if (!on) cfg.enabled = false;
    } else if (key == "every") {
      if (!get_u64(n, key, cfg.every, 1)) return false;
    } else if (key == "from") {
      if (!get_u64(n, key, cfg.from, 0)) return false;
    } else if (key == "to") {
      if (!get_u64(n, key, cfg.to, 0)) return false;
    } else if (key == "max_skip") {
      std::uint64_t k = 0;
      if (!get_u64(n, key, k, 0)) return false;
      if (k > 1000000) {
        error = where(n) + "'max_skip' must be <= 1000000";
        return false;
      }
      cfg.max_skip = static_cast<std::uint32_t>(k);
    } else if (key == "budget") {
      double f = -1.0;
      if (n.is_floating()) {
        f = n.as_floating();
      } else if (n.is_integer()) {
        f = static_cast<double>(n.as_integer());
      } else if (n.is_string()) {
        if (!parse_budget(n.as_string(), f)) f = -1.0;
      }
      std::uint64_t fb;  // NaN by its bits: `!(f >= 0.0)` does not catch it under -ffast-math
      std::memcpy(&fb, &f, sizeof fb);
      if ((fb & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull || !(f >= 0.0) || f > 1.0) {
        error = where(n) + "'budget' must be a fraction in [0, 1] (0.02) or a percentage string (\"2%\")";
        return false;
      }
      cfg.budget = f;
    } else if (key == "default") {
      bool b = true;
      if (!n.is_string() || !parse_bool(n.as_string(), b)) {
        error = where(n) + "'default' must be \"on\" or \"off\"";
        return false;
      }
      cfg.sites_default_on = b;
    } else if (key == "site") {
      if (!n.is_array()) {
        error = where(n) + "'site' must be an array of tables ([[site]])";
        return false;
      }
      for (const node& e : n.items()) {
        if (!e.is_table()) {
          error = where(e) + "each [[site]] must be a table";
          return false;
        }
        site_select s;
        bool has_pattern = false;
        for (const node* site_entry : toml_sorted_entries(e)) {
          const std::string_view sk = site_entry->key();
          const node& sn = *site_entry;
          if (sk == "glob" || sk == "regex") {
            if (!sn.is_string() || sn.as_string().empty() || has_pattern) {
              error = where(sn) + "a [[site]] needs exactly one non-empty 'glob' or 'regex' string";
              return false;
            }
            s.pattern = std::string(sn.as_string());
            s.regex = sk == "regex";
            has_pattern = true;
          } else if (sk == "mode") {
            if (!get_mode(sn, s.has_mode, s.mode, s.on)) return false;
          } else if (sk == "enabled") {
            if (!sn.is_boolean()) {
              error = where(sn) + "'enabled' must be true or false";
              return false;
            }
            s.on = s.on && sn.as_boolean();
          } else if (sk == "every") {
            if (!get_u64(sn, sk, s.every, 1)) return false;
          } else if (sk == "from") {
            if (!get_u64(sn, sk, s.from, 0)) return false;
          } else if (sk == "to") {
            if (!get_u64(sn, sk, s.to, 0)) return false;
          } else {
            error = where(sn) + "unknown key '" + std::string(sk) + "' in [[site]] (glob, regex, mode, enabled, every, "
                    "from, to)";
            return false;
          }
        }
        if (!has_pattern) {
          error = where(e) + "a [[site]] needs a 'glob' or a 'regex'";
          return false;
        }
        if (s.to < s.from) {
          error = where(e) + "'to' is before 'from'";
          return false;
        }
        cfg.sites.push_back(std::move(s));
      }
    } else {
      error = where(n) + "unknown key '" + std::string(key) +
              "' (enabled, mode, every, from, to, budget, max_skip, default, [[site]])";
      return false;
    }
  }
  if (cfg.to < cfg.from) {
    error = std::string(source) + ": 'to' is before 'from'";
    return false;
  }
  return true;
}

/// parse_control_toml's body: parses `text` (a config file's TOML) into `cfg`, which keeps its values for absent
/// keys. false: `error` names the source, line and problem; `cfg` is then unspecified.
inline bool control_from_toml(std::string_view text, std::string_view source, control_config& cfg,
                              std::string& error) {
  toml_value doc;
  if (!toml_parse(text, source, doc, error)) return false;
  return control_from_toml_document(doc, source, cfg, error);
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_CONTROL_TOML_HPP
