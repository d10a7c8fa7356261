// nanscope — tree_options.hpp: the options of the layer-tree writer (tree.hpp): where, which style, which ranks.
#ifndef NANSCOPE_TREE_OPTIONS_HPP
#define NANSCOPE_TREE_OPTIONS_HPP

#include "config.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

enum class tree_style : std::uint8_t {
  torch_repr,  ///< HuggingFace's strings, byte for byte
  numeric,     ///< plain JSON numbers (NaN/Inf as strings), nested arrays for values
};
enum class tree_ranks : std::uint8_t {
  rank0_only,  ///< only rank 0 writes (the Python tool's behaviour)
  every_rank,  ///< each rank writes its own files, "{Class}_rank{r}_debug_tree_*.json"
};

struct tree_options {
  std::string directory = ".";  ///< created (with its parents) when missing
  std::string class_name;       ///< root name; empty: the outermost scope's class name (else its name, else "Model")
  tree_style style = tree_style::torch_repr;
  bool prune_layers = true;   ///< keep only the first and last of a run of numbered layer blocks
  bool write_summary = true;  ///< {Class}_debug_tree_SUMMARY.json
  bool write_full = true;     ///< {Class}_debug_tree_FULL_TENSORS.json (with `value`)
  bool extras = true;         ///< nanscope's keys (health counts, abs_max, headroom, step, rank, source)
  bool hash = false;          ///< with extras: each tensor's content hash under "hash" (hash.hpp; for nanscope-diff --bitwise)
  tree_ranks ranks = tree_ranks::rank0_only;
  int rank = -1;              ///< -1: from the environment (RANK, LOCAL_RANK, OMPI_COMM_WORLD_RANK, PMI_RANK), else 0
  std::vector<std::uint64_t> steps;  ///< write the passes of these steps only (empty: every pass, each overwriting)
  std::uint64_t value_threshold = 1000;  ///< torch's print threshold: above it values are summarised
  int edge_items = 3;                    ///< shown at each end of a summarised dimension (at least 1)
  int line_width = 120;                  ///< HuggingFace's linewidth
  int precision = 4;                     ///< digits after the point
  std::function<void(std::string_view)> on_error;  ///< default: print to stderr

  tree_options& in(std::string dir) { directory = std::move(dir); return *this; }
  tree_options& with_style(tree_style s) { style = s; return *this; }
  tree_options& with_pruning(bool on) { prune_layers = on; return *this; }
  tree_options& with_rank(int r) { rank = r; return *this; }
  tree_options& with_ranks(tree_ranks r) { ranks = r; return *this; }
  tree_options& with_extras(bool on) { extras = on; return *this; }
  tree_options& with_hash(bool on = true) { hash = on; return *this; }
  tree_options& named(std::string cls) { class_name = std::move(cls); return *this; }
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_TREE_OPTIONS_HPP
