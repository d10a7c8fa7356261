// nanscope-diff --bitwise: names the first tensor (in call order) whose content hash differs between two trees.
//
// Trees written with tree_options::with_hash() carry each tensor's content hash (nanscope/hash.hpp) under "hash".
// Tensors are paired by module path relative to the root, the module's call number among modules with that
// path (pre-order; a checkpoint is told apart by its text), and the tensor's label ("inputs.args[0]", "outputs",
// ...). The walk is A's call order: a module's inputs when it is entered, its children, its outputs when it is
// left (nanscope's native trees record outputs on modules with children too). Parameters are not compared here. Exit status: 0 every paired tensor has equal hashes and
// nothing is unpaired or unhashed; 1 a hash differs, a tensor is missing on one side, or some tensors carry no
// hash (bitwise identity not established); 2 a file has no hash at all (written without with_hash(), or by
// HuggingFace's tool): nothing can be compared.
#ifndef NANSCOPE_TOOLS_DIFF_BITWISE_HPP
#define NANSCOPE_TOOLS_DIFF_BITWISE_HPP

#include "names.hpp"
#include "producer.hpp"
#include "tree_model.hpp"

#include <cstddef>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

namespace nsdiff {

/// One tensor of a tree in call order.
struct hashed_tensor {
  std::string module;  ///< display path (with " (call k)" when the path repeats)
  std::string label;   ///< "inputs.args[0]", "outputs", ...
  std::string hash;    ///< "" when the file has none for it
  std::string dtype;
  std::string shape;
};

struct bitwise_report {
  std::size_t compared = 0;  ///< pairs with hashes on both sides
  std::size_t hashed_a = 0, hashed_b = 0, tensors_a = 0, tensors_b = 0;
  std::size_t unhashed = 0;  ///< paired tensors with a hash missing on one side or both
  std::string first_unhashed;  ///< the first of them, "module label (no hash in A|B)"
  int first = -1;            ///< index in `a` of the first tensor whose hash differs
  std::string first_b_hash;
  std::string first_b_dtype, first_b_shape;  ///< B's dtype and shape of that tensor (the hash covers the bits only)
  std::vector<std::string> unpaired;  ///< "missing in B: ..." / "extra in B: ..."
  std::vector<hashed_tensor> a;
  int exit_code() const {
    if (hashed_a == 0 || hashed_b == 0) return 2;
    return first >= 0 || unhashed != 0 || !unpaired.empty() ? 1 : 0;
  }
};

namespace bitwise_detail {

inline std::string relative_path(const std::string& path, const std::string& root) {
  if (path == root) return std::string();
  if (path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '.')
    return path.substr(root.size() + 1);
  return "\x01" + path;
}

using key = std::tuple<std::string, int, std::string>;  // relative path, call number, label

/// The tensors of a tree in call order (a module's inputs when it is entered, its children, its outputs), without
/// recursion (trees nest up to max_module_depth modules).
inline void flatten(const tree_node& top, const std::string& root, std::map<std::string, int>& calls,
                    std::vector<hashed_tensor>& out, std::vector<key>& keys) {
  struct named {
    std::string rel, display;
    int call;
  };
  std::vector<named> open;  // the modules entered and not yet left
  walk_call_order(top, [&](const call_event& e) {
    const tree_node& n = *e.node;
    if (e.enter) {
      std::string rel = relative_path(n.path, root);
      if (n.is_checkpoint) rel += "\x02" + n.checkpoint;
      const int call = calls[rel]++;
      const std::string name = node_name(n);
      open.push_back({rel, call == 0 ? name : name + " (call " + std::to_string(call + 1) + ")", call});
    }
    const named& m = open.back();
    for (const slot& s : e.enter ? n.inputs : n.outputs) {
      if (s.kind != slot_kind::tensor) continue;
      out.push_back({m.display, s.label, s.tensor.hash, s.tensor.dtype, shape_text(s.tensor.shape)});
      keys.emplace_back(m.rel, m.call, s.label);
    }
    if (!e.enter) open.pop_back();
    return true;
  });
}

}  // namespace bitwise_detail

inline bitwise_report bitwise_compare(const tree_file& fa, const tree_file& fb) {
  bitwise_report r;
  std::vector<hashed_tensor> b;
  std::vector<bitwise_detail::key> ka, kb;
  {
    std::map<std::string, int> calls;
    bitwise_detail::flatten(fa.root, fa.root.path, calls, r.a, ka);
  }
  {
    std::map<std::string, int> calls;
    bitwise_detail::flatten(fb.root, fb.root.path, calls, b, kb);
  }
  r.tensors_a = r.a.size();
  r.tensors_b = b.size();
  for (const auto& t : r.a) r.hashed_a += t.hash.empty() ? 0 : 1;
  for (const auto& t : b) r.hashed_b += t.hash.empty() ? 0 : 1;
  std::map<bitwise_detail::key, std::size_t> in_b;
  for (std::size_t i = 0; i < kb.size(); ++i) in_b.emplace(kb[i], i);
  std::vector<bool> paired(b.size(), false);
  for (std::size_t i = 0; i < r.a.size(); ++i) {
    const auto it = in_b.find(ka[i]);
    if (it == in_b.end()) {
      r.unpaired.push_back("missing in B: tensor " + r.a[i].module + " " + r.a[i].label);
      continue;
    }
    paired[it->second] = true;
    const hashed_tensor& y = b[it->second];
    if (r.a[i].hash.empty() || y.hash.empty()) {
      if (r.unhashed == 0)
        r.first_unhashed = r.a[i].module + " " + r.a[i].label + " (no hash in " +
                           (r.a[i].hash.empty() ? (y.hash.empty() ? "A or B" : "A") : "B") + ")";
      ++r.unhashed;
      continue;
    }
    ++r.compared;
    // The hash covers the element bits only (trailing zero elements add nothing): a dtype or shape change with
    // equal hashes is a difference too.
    if (r.first < 0 && (r.a[i].hash != y.hash || r.a[i].dtype != y.dtype || r.a[i].shape != y.shape)) {
      r.first = static_cast<int>(i);
      r.first_b_hash = y.hash;
      r.first_b_dtype = y.dtype;
      r.first_b_shape = y.shape;
    }
  }
  for (std::size_t i = 0; i < b.size(); ++i)
    if (!paired[i]) r.unpaired.push_back("extra in B:   tensor " + b[i].module + " " + b[i].label);
  return r;
}

/// Prints the report (text, or JSON with `as_json`) and returns the exit status.
inline int run_bitwise(std::ostream& out, std::ostream& err, const tree_file& fa, const tree_file& fb, bool as_json,
                       bool quiet) {
  const bitwise_report r = bitwise_compare(fa, fb);
  const int rc = r.exit_code();
  if (rc == 2) {
    const bool none_a = r.hashed_a == 0;
    err << "nanscope-diff: " << terminal_safe(none_a ? fa.file : fb.file) << ": no tensor carries a \"hash\" ("
        << (none_a ? r.tensors_a : r.tensors_b)
        << " tensors): --bitwise needs trees written with nanscope::tree_options::with_hash()\n";
    return rc;
  }
  std::string verdict;
  if (r.first >= 0) verdict = "verdict: DIVERGED (bits differ)";
  else if (!r.unpaired.empty()) verdict = "verdict: DIVERGED (tensors missing on one side)";
  else if (r.unhashed != 0) verdict = "verdict: NOT ESTABLISHED (" + std::to_string(r.unhashed) + " tensors without a hash)";
  else verdict = "verdict: bitwise identical (" + std::to_string(r.compared) + " tensors)";
  if (as_json) {
    json j;
    j["mode"] = "bitwise";
    j["verdict"] = r.first >= 0 || !r.unpaired.empty() ? "diverged" : r.unhashed != 0 ? "not established" : "identical";
    j["exit_code"] = rc;
    j["compared"] = r.compared;
    j["without_hash"] = r.unhashed;
    if (r.unhashed != 0) j["first_without_hash"] = r.first_unhashed;
    j["unpaired"] = r.unpaired;
    if (r.first >= 0) {
      const hashed_tensor& t = r.a[static_cast<std::size_t>(r.first)];
      j["first_difference"] = {{"module", t.module}, {"tensor", t.label}, {"dtype", t.dtype}, {"shape", t.shape},
                               {"hash_a", t.hash},   {"hash_b", r.first_b_hash}, {"dtype_b", r.first_b_dtype},
                               {"shape_b", r.first_b_shape}};
    } else {
      j["first_difference"] = nullptr;
    }
    out << j.dump(2) << "\n";
    return rc;
  }
  if (!quiet) {
    out << "nanscope-diff --bitwise\n";
    out << "  A (reference): " << terminal_safe(fa.file) << "  [" << r.hashed_a << " of " << r.tensors_a << " tensors hashed]\n";
    out << "  B (candidate): " << terminal_safe(fb.file) << "  [" << r.hashed_b << " of " << r.tensors_b << " tensors hashed]\n";
    out << "  compared: " << r.compared << " tensors by content hash\n";
    if (r.first >= 0) {
      const hashed_tensor& t = r.a[static_cast<std::size_t>(r.first)];
      out << "\nfirst bitwise difference: " << terminal_safe(t.module) << " " << terminal_safe(t.label) << " (" << t.dtype << ", " << t.shape
          << "): hash " << t.hash << " vs " << r.first_b_hash;
      if (t.dtype != r.first_b_dtype || t.shape != r.first_b_shape)
        out << "; B has " << terminal_safe(r.first_b_dtype) << ", " << terminal_safe(r.first_b_shape);
      out << "\n";
    }
    if (!r.unpaired.empty()) {
      out << "\nunpaired tensors (" << r.unpaired.size() << "):\n";
      for (const auto& u : r.unpaired) out << "  " << terminal_safe(u) << "\n";
    }
    if (r.unhashed != 0)
      out << "\nnotes:\n  " << r.unhashed
          << " paired tensors have no hash in A or B (written without with_hash(), or not readable on the host);"
          << " the first: " << terminal_safe(r.first_unhashed) << "\n";
    out << "\n";
  }
  out << verdict << "\n";
  return rc;
}

}  // namespace nsdiff

#endif  // NANSCOPE_TOOLS_DIFF_BITWISE_HPP
