// nanscope — tree_limits.hpp: how deep a layer tree may nest (one limit, one message, for its writer and readers).
#ifndef NANSCOPE_TREE_LIMITS_HPP
#define NANSCOPE_TREE_LIMITS_HPP

#include "config.hpp"

#include <cstddef>
#include <string>

NANSCOPE_NAMESPACE_BEGIN

/// The most modules a layer tree nests: the modules on the path from the root to its deepest node, the root
/// included (a root alone is 1 deep; 1000 scopes opened one inside the other are 1000 deep). What the tree
/// writer writes up to this depth, nanscope-diff and nanscope report read; deeper trees are refused by all of
/// them with tree_depth_error()'s text.
inline constexpr std::size_t max_tree_depth = 1000;

/// The text every refusal of a deeper tree uses: "the layer tree is nested more than 1000 modules deep".
inline std::string tree_depth_error() {
  return "the layer tree is nested more than " + std::to_string(max_tree_depth) + " modules deep";
}

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_TREE_LIMITS_HPP
