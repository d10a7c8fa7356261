// nanscope — tree.hpp: the layer-tree JSON writer. While a forward pass runs inside recorder scopes, it writes
// the nested call tree in the schema of HuggingFace's model_addition_debugger_context (docs/formats.md),
// so a C++ port's tree can be read — and diffed with tools/nanscope-diff — side by side with a Python run.
//
//   nanscope::tree_writer tree(nanscope::default_recorder(), nanscope::tree_options{}.in("debug"));
//   { NANSCOPE_SCOPE("", "LlamaModel"); ... }   // on leaving the outermost scope: debug/LlamaModel_debug_tree_*.json
//
// Nodes: `module_path` ("{Class}" for the outermost scope, "{Class}.{dotted.path}" below), `inputs`
// ({"args": [...], "kwargs": {...}}: positional inputs, then named ones; empty parts dropped except on the root,
// as the Python tool does), `outputs` on leaf nodes only (a tensor, a list for output[i], null when none),
// `children` in call order. Tensors: `shape`, `dtype`, `value` (FULL_TENSORS file only), then `mean`, `std`,
// `min`, `max` with torch's semantics (NaN propagates; statistics only for float16/float32/bfloat16 in the
// torch_repr style, as HuggingFace writes them). nanscope's own keys follow (`health`, `abs_max`,
// `abs_min_nonzero`, `headroom_bits`, `first_nonfinite`, `parameters`, `source`, and a root `nanscope` object
// with step, rank and whether the pass completed); HF readers ignore them, `extras(false)` drops them. Early
// warnings of a history (history.hpp) on the same recorder go to `nanscope_warnings` on their node and to the
// root's `nanscope.warnings` (tree_warnings.hpp); a pass without warnings has neither key.
//
// Parts: tree_json.hpp (Python-compatible JSON text), tree_warnings.hpp (warning entries), this file (the model
// of a pass, pruning, tensors and the atomic commit of the files).
//
// Styles: torch_repr (byte-compatible strings: "torch.Size([2, 3])", "torch.float16", "tensor(1.2345e+00)",
// value = the lines of print(tensor) in sci mode, linewidth 120) and numeric (shape as an array, statistics as
// JSON numbers, value as nested arrays with "..." where torch would summarise; NaN/Inf as "nan"/"inf"/"-inf").
//
// Layer pruning (default on, as in the Python tool): among the children of a node, the layer blocks — paths
// ending in ".<n>" that have children whose paths contain ".<n>." — keep only the first and the last, at every
// level. Output is streamed: the files are written while the pass runs, and only a run of numbered siblings that
// pruning may still drop is held in memory (one layer block and what follows it), so memory stays bounded for
// deep and wide trees. Files are written atomically (a temporary file renamed over the target when the
// outermost scope ends): a crash never leaves a truncated file. The pair is committed as "remove the old
// SUMMARY, rename FULL_TENSORS, rename SUMMARY", so whenever both files exist they are of the same pass; both
// end with the same "nanscope_pair" {run, pass} (with extras). Temporaries of writers killed midway are removed
// by the next writer's first pass (dead processes only). docs/tree.md, "Crash consistency of the pair".
//
// Ranks: by default only rank 0 writes (the rank comes from tree_options::rank or the first of RANK,
// LOCAL_RANK, OMPI_COMM_WORLD_RANK, PMI_RANK that is set); every_rank writes "{Class}_rank{r}_debug_tree_*.json".
//
// Threads: the tree follows the thread that opened the outermost scope; scopes of other threads are ignored.
// Errors while writing (a full disk) are reported through tree_options::on_error (default: stderr) and abandon
// that pass's files; a scope never throws because of the tree.
#ifndef NANSCOPE_TREE_HPP
#define NANSCOPE_TREE_HPP

#include "config.hpp"
#include "check.hpp"
#include "dtype.hpp"
#include "health.hpp"
#include "margins.hpp"
#include "recorder.hpp"
#include "tree_json.hpp"
#include "tree_limits.hpp"
#include "tree_warnings.hpp"
#include "view.hpp"
#include "detail/atomic_file.hpp"
#include "detail/process.hpp"
#include "detail/torch_print.hpp"

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <sys/stat.h>

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

namespace detail {

/// Throws nanscope::error("nanscope: tree_writer: <problem>").
[[noreturn]] inline void tree_fail(const std::string& problem) {
  NANSCOPE_IMPL_THROW(::nanscope::error("nanscope: tree_writer: " + problem));
#if !NANSCOPE_IMPL_EXCEPTIONS
  std::abort();
#endif
}

/// The process's rank from the usual launcher variables, or -1 when none is set. Throws for a malformed value.
inline int env_rank() {
  const char* var = nullptr;
  const char* value = nullptr;
  const int r = parse_env_rank(&var, &value);
  if (r == -2)
    tree_fail(std::string("environment variable ") + var + "='" + value + "' is not a rank (a non-negative integer)");
  return r;
}

/// Serialises the commit of SUMMARY/FULL_TENSORS pairs within the process (two writers into one directory never
/// interleave their renames).
inline std::mutex& tree_commit_mutex() {
  static std::mutex m;
  return m;
}

/// Test hook: when set, called at each stage of a pass's commit (1: the old SUMMARY removed, 2: FULL_TENSORS
/// renamed into place, 3: SUMMARY renamed into place). The fault-injection tests kill the writer there.
inline std::atomic<void (*)(int)>& tree_commit_probe() {
  static std::atomic<void (*)(int)> probe{nullptr};
  return probe;
}

/// The Python tool's address sanitiser: "object at 0x<hex>" becomes "object at 0xXXXXXXXX".
inline std::string sanitize_addresses(std::string_view s) {
  static const std::string_view key = "object at 0x";
  std::string out;
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t at = s.find(key, i);
    if (at == std::string_view::npos) break;
    std::size_t j = at + key.size();
    std::size_t k = j;
    while (k < s.size() && ((s[k] >= '0' && s[k] <= '9') || (s[k] >= 'a' && s[k] <= 'f') || (s[k] >= 'A' && s[k] <= 'F'))) ++k;
    out.append(s.substr(i, j - i));
    if (k > j) {
      out += "XXXXXXXX";
      i = k;
    } else {
      i = j;
    }
  }
  out.append(s.substr(i));
  return out;
}

/// Python's `(.*)\.(\d+)$` matched against a module path: the digits after the last '.', when the path ends
/// with them (or with them and one '\n', as Python's `$` allows) and has no newline before that '.'.
inline bool layer_number(const std::string& path, std::string& number) {
  std::size_t end = path.size();
  if (end > 0 && path[end - 1] == '\n') --end;
  std::size_t b = end;
  while (b > 0 && path[b - 1] >= '0' && path[b - 1] <= '9') --b;
  if (b == end || b == 0 || path[b - 1] != '.') return false;
  if (path.find('\n') < b - 1) return false;
  number = path.substr(b, end - b);
  return true;
}

}  // namespace detail

/// Writes the layer tree of every outermost scope of a recorder (see the file comment). Attaches itself as one
/// of the recorder's scope listeners for its lifetime; several writers may be attached to one recorder, and the
/// writer and its recorder may end in any order (attachment.hpp). Events of other recorders (the writer attached
/// to a second one with add_listener) are ignored; frames are matched by serial number, never by address.
class tree_writer final : public scope_listener {
 public:
  explicit tree_writer(recorder& r, tree_options o = {}) : recorder_id_(r.id()), opts_(std::move(o)) {
    rank_ = opts_.rank >= 0 ? opts_.rank : detail::env_rank();
    if (rank_ < 0) rank_ = 0;
    active_ = opts_.ranks == tree_ranks::every_rank || rank_ == 0;
    if (opts_.directory.empty()) opts_.directory = ".";
    if (active_) {
      if (!detail::make_directories(opts_.directory))
        detail::file_fail(opts_.directory, "tree_writer: not a directory and cannot be created");
    }
    run_id_ = detail::unique_run_id();
    conn_ = r.connect(*this);
  }
  tree_writer(const tree_writer&) = delete;
  tree_writer& operator=(const tree_writer&) = delete;
  /// Detaches from the recorder (waiting for calls in progress on other threads). A pass still open is
  /// abandoned: its temporary files are removed and the previous files stay.
  ~tree_writer() override { end_attachments(); }

  /// Whether this process writes trees (rank selection).
  bool active() const { return active_; }
  int rank() const { return rank_; }
  /// Trees written completely so far.
  std::uint64_t trees_written() const {
    std::lock_guard<std::mutex> lk(m_);
    return written_;
  }
  /// Bytes of JSON written to the SUMMARY / FULL_TENSORS files so far (all passes).
  std::uint64_t summary_bytes() const {
    std::lock_guard<std::mutex> lk(m_);
    return summary_bytes_;
  }
  std::uint64_t full_bytes() const {
    std::lock_guard<std::mutex> lk(m_);
    return full_bytes_;
  }
  /// Paths of the last pass's files ("" before the first pass).
  std::string summary_path() const {
    std::lock_guard<std::mutex> lk(m_);
    return summary_path_;
  }
  std::string full_path() const {
    std::lock_guard<std::mutex> lk(m_);
    return full_path_;
  }
  /// The last error reported (empty if none).
  std::string last_error() const {
    std::lock_guard<std::mutex> lk(m_);
    return last_error_;
  }
  const tree_options& options() const { return opts_; }

  void scope_opened(const frame& f, bool outermost) noexcept override {
    hook([&] {
      if (!active_ || f.recorder != recorder_id_) return;
      if (outermost) {
        if (in_pass_ && std::this_thread::get_id() == thread_) {
          // the pass's own thread opens an outermost scope: the pass's root closed unheard; that pass can never
          // complete (a detach abandons the pass when it happens: this is a safety net)
          abandon("the outermost scope of the pass closed unheard");
        }
        if (in_pass_) return;  // another thread's outermost scope while a pass runs
        begin_pass(f);
        return;
      }
      if (!in_pass_ || std::this_thread::get_id() != thread_) return;
      open_node(f);
    });
  }

  void tensor_recorded(const frame& f, const tensor_record& rec) noexcept override {
    hook([&] {
      if (!in_pass_ || f.recorder != recorder_id_ || std::this_thread::get_id() != thread_ || nodes_.empty()) return;
      if (f.checkpoint) {
        // with extras, a checkpoint (DETECT_OVERFLOW) is a node in call order under the innermost open one
        if (opts_.extras && rec.is_tensor) add_checkpoint(f, rec);
        return;
      }
      node& n = nodes_.back();
      if (n.serial != f.serial) return;
      add_record(n, rec);
    });
  }

  /// The recorder's detection (native styles): with extras, the node of `f` gets "nanscope_detection" and the
  /// root's "nanscope" object "detection" (the verdict: produced here or carried, and the last child before it).
  /// When the recorder throws or aborts next, the pass ends here and its files are committed: nobody may catch
  /// the exception, and an uncaught one unwinds nothing (no scope would close the tree).
  void detection_raised(const frame& f, const detection& d, bool stopping) noexcept override {
    hook([&] {
      if (!in_pass_ || f.recorder != recorder_id_ || std::this_thread::get_id() != thread_ || nodes_.empty()) return;
      if (opts_.extras && detection_.empty()) note_detection(f, d);
      if (stopping) end_pass_at_detection();
    });
  }

  bool wants_reference_stats() const noexcept override { return active_; }
  /// The recorder ended, or detached this writer (remove_listener, set_listener): a pass still open can never
  /// complete, and is abandoned (its temporary files removed, the previous files kept, the error reported).
  void detached(recorder& r) noexcept override {
    (void)r;
    hook([&] {
      if (in_pass_) abandon("the writer was detached from its recorder while a pass was open");
    });
  }
  /// Whether the writer is attached to its recorder (false once either has ended the attachment).
  bool attached() const noexcept { return conn_.connected(); }

  /// An early warning (history.hpp, attached to the same recorder) about a tensor of frame `f`: written, with
  /// extras, as "nanscope_warnings" on f's node and into the root's "nanscope" object (docs/tree.md).
  void warning_raised(const frame& f, const early_warning& w) noexcept override {
    hook([&] {
      if (!in_pass_ || !opts_.extras || f.recorder != recorder_id_ || std::this_thread::get_id() != thread_) return;
      // the node of f; for a checkpoint, the node of the scope it was taken in (the innermost open one)
      node* at = nullptr;
      if (f.checkpoint) {
        if (!nodes_.empty() && nodes_.back().module_path == f.module_path) at = &nodes_.back();
      } else {
        for (auto it = nodes_.rbegin(); it != nodes_.rend() && at == nullptr; ++it)
          if (it->serial == f.serial) at = &*it;
      }
      if (at != nullptr) {
        at->warnings.push_back(detail::tree_warning_json(w, std::string_view()));
        at->evidence = true;
      }
      pass_warnings_.push_back(detail::tree_warning_json(w, at != nullptr ? at->path : hf_path(f.module_path)));
    });
  }

  void scope_closed(const frame& f, bool outermost) noexcept override {
    (void)outermost;
    hook([&] {
      if (!in_pass_ || f.recorder != recorder_id_ || std::this_thread::get_id() != thread_ || nodes_.empty()) return;
      bool open = false;
      for (const node& n : nodes_) open = open || n.serial == f.serial;
      if (!open) return;
      // A scope that ends before the scopes opened inside it (a heap scope deleted out of order, which the
      // recorder reports) closes them too: the tree stays well formed.
      while (nodes_.back().serial != f.serial) close_node();
      close_node();
      if (nodes_.empty()) end_pass();
    });
  }

  /// The id of this writer instance, written with the pass number as "nanscope_pair" in both files.
  const std::string& run_id() const { return run_id_; }
  /// Passes begun so far (the "pass" of "nanscope_pair").
  std::uint64_t passes() const {
    std::lock_guard<std::mutex> lk(m_);
    return pass_;
  }

 private:
  struct piece {
    detail::tree_text text;
    bool layer;
    bool keep;  ///< with extras: holds evidence, so pruning never drops it
  };
  struct node {
    std::uint64_t serial = 0;   ///< the frame's (frame::serial)
    std::string module_path;    ///< the frame's
    std::string path;
    int depth = 0;
    bool numbered = false;
    std::string number;
    bool buffered = false;  ///< writes into `own` (pruning may drop it) instead of its parent's stream
    int out = -1;           ///< index of the node whose `own` receives this node's text; -1: the files
    detail::tree_text own;
    bool header_done = false;
    bool has_children = false;
    bool child_has_number = false;
    int emitted = 0;      ///< children written into this node's "children" array
    int layer_blocks = 0; ///< layer-block children seen
    std::vector<piece> pending;  ///< after the 2nd layer block: the latest block and what followed it
    std::vector<detail::tree_io> args, kwargs, outputs, params;
    std::vector<std::string> warnings;  ///< early warnings about this node's tensors (JSON fragments, level 0)
    source_location where;
    std::string checkpoint;     ///< a checkpoint node: its text ("nanscope_checkpoint"); empty for a module
    std::string last_child;     ///< the path of the last module child closed so far
    std::string detection;      ///< "nanscope_detection" (a JSON object, level 0), when the recorder detected here
    bool evidence = false;      ///< this node or one below holds a NaN/Inf, a warning or the detection (kept by pruning)
  };

  /// A listener hook: fn under the lock (an exception abandons the pass); the error texts it left are handed
  /// to on_error after the lock is released, so that on_error may call the writer (last_error(), ...).
  template <class F>
  void hook(F&& fn) noexcept {
    std::string errors;
    {
      std::lock_guard<std::mutex> lk(m_);
      guarded(fn);
      errors.swap(pending_errors_);
    }
    if (errors.empty()) return;
    if (opts_.on_error) {
      detail::call_text_callback(opts_.on_error, errors, "tree_options::on_error");
    } else {
      std::fwrite(errors.data(), 1, errors.size(), stderr);
      std::fflush(stderr);
    }
  }

  template <class F>
  void guarded(F&& fn) noexcept {
#if NANSCOPE_IMPL_EXCEPTIONS
    try {
      fn();
    } catch (const std::exception& e) {
      abandon(e.what());
    } catch (...) {
      abandon("unknown error");
    }
#else
    fn();
#endif
  }

  /// Records an error (under m_): last_error() and the text the hook hands to on_error.
  void report(const std::string& msg) {
    last_error_ = msg;
    pending_errors_ += "nanscope: tree_writer: " + msg + "\n";
  }
  /// Ends the pass without writing its files (the previous ones stay). Allocates only for the message: when that
  /// fails too (memory is short), the message goes to stderr as it is.
  void abandon(const char* why) noexcept {
#if NANSCOPE_IMPL_EXCEPTIONS
    try {
      report(std::string(why) + " (this pass's tree files are not written)");
    } catch (...) {
      std::fprintf(stderr, "nanscope: tree_writer: %s (this pass's tree files are not written)\n", why);
    }
#else
    report(std::string(why) + " (this pass's tree files are not written)");
#endif
    nodes_.clear();
    root_.clear();
    pass_warnings_.clear();
    detection_.clear();
    summary_file_.reset();
    full_file_.reset();
    in_pass_ = false;
  }

  bool step_selected(std::uint64_t s) const {
    if (opts_.steps.empty()) return true;
    for (auto x : opts_.steps)
      if (x == s) return true;
    return false;
  }

  void begin_pass(const frame& f) {
    if (!step_selected(f.step)) return;
    class_name_ = !opts_.class_name.empty() ? opts_.class_name
                  : !f.class_name.empty()   ? f.class_name
                  : !f.module_path.empty()  ? f.module_path
                                            : std::string("Model");
    root_prefix_ = f.module_path;
    step_ = f.step;
    const std::string base = opts_.directory + "/" + detail::file_safe(class_name_) +
                             (opts_.ranks == tree_ranks::every_rank ? "_rank" + std::to_string(rank_) : std::string()) +
                             "_debug_tree_";
    summary_path_ = opts_.write_summary ? base + "SUMMARY.json" : std::string();
    full_path_ = opts_.write_full ? base + "FULL_TENSORS.json" : std::string();
    if (cleaned_base_ != base) {
      // temporaries of this writer's files left by writers killed midway (dead processes only)
      std::vector<std::string> names;
      for (const std::string* p : {&summary_path_, &full_path_})
        if (!p->empty()) names.push_back(p->substr(p->rfind('/') + 1));
      detail::remove_stale_temporaries(opts_.directory, names);
      cleaned_base_ = base;
    }
    ++pass_;
    if (opts_.write_summary) summary_file_ = std::make_unique<detail::atomic_file>(summary_path_);
    if (opts_.write_full) full_file_ = std::make_unique<detail::atomic_file>(full_path_);
    in_pass_ = true;
    thread_ = std::this_thread::get_id();
    root_.clear();
    pass_warnings_.clear();
    detection_.clear();
    ended_by_detection_ = false;
    root_.with_summary = opts_.write_summary;
    root_.with_full = opts_.write_full;
    pass_summary_bytes_ = pass_full_bytes_ = 0;
    node r;
    r.serial = f.serial;
    r.module_path = f.module_path;
    r.path = class_name_;
    r.depth = 0;
    r.where = f.where;
    r.own.with_summary = opts_.write_summary;
    r.own.with_full = opts_.write_full;
    nodes_.push_back(std::move(r));
  }

  std::string hf_path(const std::string& p) const {
    std::string rel;
    if (root_prefix_.empty()) {
      rel = p;
    } else if (p.size() > root_prefix_.size() && p.compare(0, root_prefix_.size(), root_prefix_) == 0 &&
               p[root_prefix_.size()] == '.') {
      rel = p.substr(root_prefix_.size() + 1);
    } else if (p == root_prefix_) {
      rel.clear();
    } else {
      rel = p;
    }
    return rel.empty() ? class_name_ : class_name_ + "." + rel;
  }

  detail::tree_text& stream_of(int idx) { return idx < 0 ? root_ : nodes_[static_cast<std::size_t>(idx)].own; }
  int target_of(int idx) const {
    const node& n = nodes_[static_cast<std::size_t>(idx)];
    return n.buffered ? idx : n.out;
  }

  void open_node(const frame& f, std::string checkpoint = std::string()) {
    if (nodes_.size() >= max_tree_depth) {
      // what nanscope-diff and nanscope report would refuse is not written either (tree_limits.hpp)
      abandon((tree_depth_error() + " (at '" + f.module_path + "')").c_str());
      return;
    }
    const int parent_idx = static_cast<int>(nodes_.size()) - 1;
    node& parent = nodes_.back();
    write_header(parent_idx);
    if (!parent.has_children) {
      parent.has_children = true;
      detail::tree_text& w = stream_of(target_of(parent_idx));
      w.add(",");
      w.add(detail::indent(parent.depth * 2 + 1));
      w.add("\"children\": [");
    }
    node c;
    c.serial = f.serial;
    c.module_path = f.module_path;
    c.path = hf_path(f.module_path);
    c.depth = parent.depth + 1;
    c.where = f.where;
    if (parent.numbered && c.path.find("." + parent.number + ".") != std::string::npos) parent.child_has_number = true;
    c.checkpoint = std::move(checkpoint);
    c.numbered = c.checkpoint.empty() && detail::layer_number(c.path, c.number);
    c.buffered = opts_.prune_layers && (c.numbered || !parent.pending.empty());
    c.out = target_of(parent_idx);
    c.own.with_summary = opts_.write_summary;
    c.own.with_full = opts_.write_full;
    nodes_.push_back(std::move(c));
  }

  /// Writes "{ module_path, inputs, "children": [" of node idx into its target (once, at its first child).
  void write_header(int idx) {
    node& n = nodes_[static_cast<std::size_t>(idx)];
    if (n.header_done) return;
    n.header_done = true;
    detail::tree_text& w = stream_of(target_of(idx));
    if (!n.buffered && idx > 0) {
      node& parent = nodes_[static_cast<std::size_t>(idx - 1)];
      w.add(parent.emitted++ ? "," : "");
      w.add(detail::indent(n.depth * 2));
    }
    const int k = n.depth * 2 + 1;
    std::string head = "{" + detail::indent(k) + "\"module_path\": ";
    detail::py_json_quote_to(head, n.path);
    head += ",";
    if (!n.checkpoint.empty()) {  // (extras only: checkpoints are nodes only then)
      head += detail::indent(k);
      head += "\"nanscope_checkpoint\": ";
      detail::py_json_quote_to(head, n.checkpoint);
      head += ",";
    }
    head += detail::indent(k);
    head += "\"inputs\": ";
    w.add(head);
    write_inputs(w, n, k);
    maybe_flush();
  }

  void write_inputs(detail::tree_text& w, const node& n, int k) {
    const bool root = n.depth == 0;
    const bool has_args = !n.args.empty() || root;
    const bool has_kwargs = !n.kwargs.empty() || root;
    if (!has_args && !has_kwargs) {
      w.add("{}");
      return;
    }
    w.add("{");
    if (has_args) {
      w.add(detail::indent(k + 1));
      w.add("\"args\": ");
      if (n.args.empty()) {
        w.add("[]");
      } else {
        w.add("[");
        for (std::size_t i = 0; i < n.args.size(); ++i) {
          if (i) w.add(",");
          w.add(detail::indent(k + 2));
          w.add_io(n.args[i], k + 2);
        }
        w.add(detail::indent(k + 1));
        w.add("]");
      }
      if (has_kwargs) w.add(",");
    }
    if (has_kwargs) {
      w.add(detail::indent(k + 1));
      w.add("\"kwargs\": ");
      write_named(w, n.kwargs, k + 1);
    }
    w.add(detail::indent(k));
    w.add("}");
  }

  /// The kwargs object. HF's SUMMARY is FULL_TENSORS with every "value" key removed from the objects under
  /// inputs and outputs (its strip_values), so a kwarg named "value" (an attention module's) is not in the
  /// SUMMARY file, and its object is left as {} when it was the only one.
  static void write_named(detail::tree_text& w, const std::vector<detail::tree_io>& items, int level) {
    for (const bool full : {false, true}) {
      if (!(full ? w.with_full : w.with_summary)) continue;
      std::string& out = full ? w.full : w.summary;
      out += '{';
      std::size_t shown = 0;
      for (const auto& item : items) {
        if (!full && item.name == "value") continue;
        if (shown++ != 0) out += ',';
        out += detail::indent(level + 1);
        out += detail::py_json_quote(item.name);
        out += ": ";
        item.render(out, level + 1, full);
      }
      if (shown != 0) out += detail::indent(level);
      out += '}';
    }
  }

  void write_outputs(detail::tree_text& w, const node& n, int k) {
    // a single "output" → the tensor; output[i] → a list by index (gaps as null)
    if (n.outputs.size() == 1 && n.outputs[0].name == "output") {
      w.add_io(n.outputs[0], k);
      return;
    }
    std::vector<const detail::tree_io*> slots;
    for (const auto& o : n.outputs) {
      std::size_t i = slots.size();
      if (o.name.size() > 8 && o.name.compare(0, 7, "output[") == 0) i = std::strtoul(o.name.c_str() + 7, nullptr, 10);
      if (i > slots.size() + 4096) i = slots.size();  // a absurd index: append
      if (i >= slots.size()) slots.resize(i + 1, nullptr);
      slots[i] = &o;
    }
    w.add("[");
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (i) w.add(",");
      w.add(detail::indent(k + 1));
      if (slots[i]) w.add_io(*slots[i], k + 1);
      else w.add("null");
    }
    w.add(detail::indent(k));
    w.add("]");
  }

  void close_node() {
    const int idx = static_cast<int>(nodes_.size()) - 1;
    node& n = nodes_.back();
    const bool root = idx == 0;
    const int k = n.depth * 2 + 1;
    const bool leaf = !n.has_children;
    const bool header_was_done = n.header_done;
    write_header(idx);
    detail::tree_text& w = stream_of(target_of(idx));
    if (header_was_done) {
      // children: flush what pruning held back, close the array
      for (auto& p : n.pending) emit_child(idx, p.text);
      n.pending.clear();
      w.add(detail::indent(k));
      w.add("]");
      // the native tree keeps every module's outputs (HuggingFace's keeps the leaves' only): a value made in a
      // module's own code after its last child shows on that module
      if (opts_.extras && !n.outputs.empty()) {
        w.add(",");
        w.add(detail::indent(k));
        w.add("\"outputs\": ");
        write_outputs(w, n, k);
      }
    } else if (leaf) {
      // the root drops a missing output (Python: falsy keys removed); other leaves write null
      if (!root || !n.outputs.empty()) {
        w.add(",");
        w.add(detail::indent(k));
        w.add("\"outputs\": ");
        if (n.outputs.empty()) w.add("null");
        else write_outputs(w, n, k);
      }
    }
    if (opts_.extras) write_node_extras(w, n, k, root);
    w.add(detail::indent(n.depth * 2));
    w.add("}");
    const bool layer_block = n.numbered && n.has_children && n.child_has_number;
    const bool keep = opts_.extras && n.evidence;
    if (idx > 0) {
      node& parent = nodes_[static_cast<std::size_t>(idx - 1)];
      parent.evidence = parent.evidence || n.evidence;
      if (n.checkpoint.empty()) parent.last_child = n.path;
    }
    if (n.buffered) {
      detail::tree_text text = std::move(n.own);
      nodes_.pop_back();
      accept_child(idx - 1, std::move(text), layer_block, keep);
    } else {
      nodes_.pop_back();
    }
    maybe_flush();
  }

  /// A checkpoint's node (extras): a child of the innermost open node, written whole at once.
  void add_checkpoint(const frame& f, const tensor_record& rec) {
    open_node(f, rec.context.empty() ? std::string("checkpoint") : rec.context);
    if (!in_pass_) return;  // refused (too deep): the pass was abandoned
    node& n = nodes_.back();
    n.where = rec.where.file != nullptr && rec.where.file[0] != '\0' ? rec.where : f.where;
    detail::tree_io io;
    io.name = "output";
    describe(io, rec);
    n.outputs.push_back(std::move(io));
    if (rec.health.has_nonfinite()) n.evidence = true;
    close_node();
  }

  /// The recorder's verdict, on the detecting node (a module still open) and in the root's "nanscope" object.
  void note_detection(const frame& f, const detection& d) {
    node* at = nullptr;
    if (!f.checkpoint)
      for (auto it = nodes_.rbegin(); it != nodes_.rend() && at == nullptr; ++it)
        if (it->serial == f.serial) at = &*it;
    // "after": the last module that completed inside the detecting one (a checkpoint's: the scope it is in)
    const node* scope_node = at != nullptr ? at : &nodes_.back();
    std::vector<std::pair<std::string, std::string>> fields;
    fields.emplace_back("tensor", detail::py_json_quote(d.context));
    fields.emplace_back("produced_here", d.produced_here ? "true" : "false");
    fields.emplace_back("after", scope_node->last_child.empty() ? std::string("null")
                                                                 : detail::py_json_quote(scope_node->last_child));
    fields.emplace_back("nan", std::to_string(d.health.nan));
    fields.emplace_back("pos_inf", std::to_string(d.health.pos_inf));
    fields.emplace_back("neg_inf", std::to_string(d.health.neg_inf));
    if (at != nullptr) {
      at->detection = detail::py_object(fields);
      at->evidence = true;
    }
    std::vector<std::pair<std::string, std::string>> root;
    root.emplace_back("module_path", detail::py_json_quote(at != nullptr ? at->path : hf_path(f.module_path)));
    if (f.checkpoint) root.emplace_back("checkpoint", detail::py_json_quote(d.context));
    for (auto& kv : fields) root.push_back(std::move(kv));
    root.emplace_back("step", std::to_string(d.step));
    detection_ = detail::py_object(root);
  }

  /// A throwing (or aborting) detection: the pass ends at it; its files are committed now.
  void end_pass_at_detection() {
    ended_by_detection_ = true;
    while (!nodes_.empty()) close_node();
    end_pass();
  }

  void write_node_extras(detail::tree_text& w, const node& n, int k, bool root) {
    if (!n.params.empty()) {
      w.add(",");
      w.add(detail::indent(k));
      w.add("\"parameters\": ");
      write_named(w, n.params, k);
    }
    if (n.where.file != nullptr && n.where.file[0] != '\0') {
      w.add(",");
      w.add(detail::indent(k));
      w.add("\"source\": ");
      w.add(detail::py_json_quote(std::string(n.where.file) + ":" + std::to_string(n.where.line)));
    }
    if (!n.warnings.empty()) {
      std::string s;
      detail::append_warning_list(s, "nanscope_warnings", n.warnings, k);
      w.add(s);
    }
    if (!n.detection.empty()) {
      w.add(",");
      w.add(detail::indent(k));
      std::string s = "\"nanscope_detection\": ";
      detail::append_at(s, n.detection, k);
      w.add(s);
    }
    if (root) {
      w.add(",");
      w.add(detail::indent(k));
      std::string s = "\"nanscope\": ";
      std::vector<std::pair<std::string, std::string>> meta = {
          {"format", "1"},
          {"style", opts_.style == tree_style::torch_repr ? "\"torch_repr\"" : "\"numeric\""},
          {"step", std::to_string(step_)},
          {"rank", std::to_string(rank_)},
          {"pruned", opts_.prune_layers ? "true" : "false"},
          {"complete", ended_by_detection_ || std::uncaught_exceptions() > 0 ? "false" : "true"}};
      if (ended_by_detection_) meta.emplace_back("ended_by", "\"detection\"");
      if (!detection_.empty()) meta.emplace_back("detection", detection_);
      // every early warning of the pass (those of pruned nodes and checkpoints included); absent when none
      if (!pass_warnings_.empty()) meta.emplace_back("warnings", detail::py_array(pass_warnings_));
      detail::append_at(s, detail::py_object(meta), k);
      w.add(s);
      // the pair id, the root's last key: equal in the SUMMARY and FULL_TENSORS files of one pass
      w.add(",");
      w.add(detail::indent(k));
      std::string pair = "\"nanscope_pair\": ";
      detail::append_at(pair, detail::py_object({{"run", detail::py_json_quote(run_id_)}, {"pass", std::to_string(pass_)}}),
                        k);
      w.add(pair);
    }
  }

  /// A buffered child of node `pidx` has closed.
  void accept_child(int pidx, detail::tree_text text, bool layer_block, bool keep) {
    node& p = nodes_[static_cast<std::size_t>(pidx)];
    if (layer_block) {
      ++p.layer_blocks;
      if (p.layer_blocks == 1) {
        emit_child(pidx, text);
        return;
      }
      if (!p.pending.empty()) {
        // the previous candidate for "last" is a middle block now: drop it (unless it holds evidence: a NaN/Inf,
        // a warning, the detection), keep what followed it
        for (std::size_t i = p.pending[0].keep ? 0 : 1; i < p.pending.size(); ++i) emit_child(pidx, p.pending[i].text);
        p.pending.clear();
      }
      p.pending.push_back(piece{std::move(text), true, keep});
      return;
    }
    if (!p.pending.empty()) {
      p.pending.push_back(piece{std::move(text), false, keep});
    } else {
      emit_child(pidx, text);
    }
  }

  void emit_child(int pidx, const detail::tree_text& text) {
    node& p = nodes_[static_cast<std::size_t>(pidx)];
    detail::tree_text& w = stream_of(target_of(pidx));
    w.add(p.emitted++ ? "," : "");
    w.add(detail::indent((p.depth + 1) * 2));
    w.add(text);
  }

  void maybe_flush(bool force = false) {
    constexpr std::size_t chunk = std::size_t{1} << 20;
    if (!force && root_.summary.size() < chunk && root_.full.size() < chunk) return;
    if (summary_file_) summary_file_->write(root_.summary.data(), root_.summary.size());
    if (full_file_) full_file_->write(root_.full.data(), root_.full.size());
    pass_summary_bytes_ += root_.summary.size();
    pass_full_bytes_ += root_.full.size();
    root_.clear();
  }

  /// Commits the pass's files. With both files: the old SUMMARY is removed first, then FULL_TENSORS and then
  /// SUMMARY are renamed into place (each fsynced). Whatever moment the process dies at, the directory holds the
  /// old pair, the old FULL_TENSORS alone, the new FULL_TENSORS alone, or the new pair: whenever both files
  /// exist they are of the same pass. SUMMARY is the commit mark of a pair.
  void end_pass() {
    maybe_flush(true);
    auto probe = [](int stage) {
      if (auto p = detail::tree_commit_probe().load(std::memory_order_acquire)) p(stage);
    };
    {
      std::lock_guard<std::mutex> commit_lock(detail::tree_commit_mutex());
      if (summary_file_ && full_file_) {
        if (::unlink(summary_path_.c_str()) != 0 && errno != ENOENT)
          detail::file_fail(summary_path_, detail::errno_text("cannot remove the previous pass's file", errno));
        detail::fsync_directory(detail::directory_of(summary_path_), summary_path_);
        probe(1);
      }
      if (full_file_) full_file_->commit();
      probe(2);
      if (summary_file_) summary_file_->commit();
      probe(3);
    }
    summary_file_.reset();
    full_file_.reset();
    summary_bytes_ += pass_summary_bytes_;
    full_bytes_ += pass_full_bytes_;
    ++written_;
    nodes_.clear();
    in_pass_ = false;
  }

  // --- tensors ------------------------------------------------------------------------------------------

  void add_record(node& n, const tensor_record& rec) {
    if (rec.is_tensor && rec.health.has_nonfinite()) n.evidence = true;
    detail::tree_io io;
    io.name = rec.context;
    if (!rec.is_tensor) {
      io.is_tensor = false;
      io.text = detail::py_json_quote(detail::sanitize_addresses(rec.repr.empty() ? std::string("None") : rec.repr));
    } else {
      describe(io, rec);
    }
    switch (rec.role) {
      case tensor_role::input:
        if (rec.context.size() > 6 && rec.context.compare(0, 6, "input[") == 0) n.args.push_back(std::move(io));
        else n.kwargs.push_back(std::move(io));
        break;
      case tensor_role::output: n.outputs.push_back(std::move(io)); break;
      case tensor_role::parameter:
        if (opts_.extras) n.params.push_back(std::move(io));
        break;
      case tensor_role::checkpoint: break;
    }
  }

  void describe(detail::tree_io& io, const tensor_record& rec) {
    io.is_tensor = true;
    const tensor_view& v = rec.view;
    const bool torch = opts_.style == tree_style::torch_repr;
    detail::torch_print_options po;
    po.threshold = opts_.value_threshold;
    po.edge_items = opts_.edge_items < 1 ? 1 : opts_.edge_items;  // torch's edgeitems=0 mode is not reproduced
    po.line_width = opts_.line_width;
    po.precision = opts_.precision;
    const health_result* h = &rec.health;
    health_result own;
    const bool readable = v.data != nullptr && (v.space == memory_space::host || v.space == memory_space::cuda_pinned ||
                                                v.space == memory_space::cuda_managed);
    const bool want_hash = opts_.hash && opts_.extras && readable;
    if (is_float(v.type) && h->mode != check_mode::stats && readable) {
      own = (check)(v, check_options{}.with_mode(check_mode::stats).with_hash(want_hash));
      h = &own;
    }
    if (torch) {
      io.shape = detail::py_json_quote(detail::torch_size_repr(v));
      io.type = detail::py_json_quote(info(v.type).torch_name);
    } else {
      std::vector<std::string> dims;
      for (int i = 0; i < v.rank; ++i) dims.push_back(std::to_string(v.shape[i]));
      io.shape = detail::py_array(dims);
      io.type = detail::py_json_quote(info(v.type).torch_name);
    }
    if (opts_.write_full && readable) {
      if (torch) {
        const std::string text = detail::torch_tensor_repr(v, po);
        std::vector<std::string> lines;
        std::size_t b = 0;
        while (true) {
          const std::size_t e = text.find('\n', b);
          lines.push_back(detail::py_json_quote(text.substr(b, e == std::string::npos ? std::string::npos : e - b)));
          if (e == std::string::npos) break;
          b = e + 1;
        }
        io.value = detail::py_array(lines);
      } else {
        io.value = numeric_value(v, po);
      }
    }
    const bool hf_stats = v.type == dtype::f16 || v.type == dtype::f32 || v.type == dtype::bf16;
    if (is_float(v.type) && (torch ? hf_stats : true)) {
      detail::torch_stats s = detail::torch_stats_of(*h, torch);
      if (rec.reference.known) {  // the framework's own reduction (LibTorch adapter): its digits, not ours
        s.mean = rec.reference.mean;
        s.std = rec.reference.std;
      }
      if (torch) {
        io.fields.emplace_back("mean", detail::py_json_quote(detail::torch_scalar_repr(s.mean, v.type, v, po)));
        io.fields.emplace_back("std", detail::py_json_quote(detail::torch_scalar_repr(s.std, v.type, v, po)));
        io.fields.emplace_back("min", detail::py_json_quote(detail::torch_scalar_repr(s.min, v.type, v, po)));
        io.fields.emplace_back("max", detail::py_json_quote(detail::torch_scalar_repr(s.max, v.type, v, po)));
      } else {
        io.fields.emplace_back("mean", detail::json_number(s.mean, false));
        io.fields.emplace_back("std", detail::json_number(s.std, false));
        io.fields.emplace_back("min", detail::json_number(s.min, size_of(v.type) <= 4));
        io.fields.emplace_back("max", detail::json_number(s.max, size_of(v.type) <= 4));
      }
    }
    if (!opts_.extras) return;
    if (is_float(v.type)) {
      io.fields.emplace_back("health", detail::py_object({{"negative", std::to_string(h->negative)},
                                                          {"zero", std::to_string(h->zero)},
                                                          {"positive", std::to_string(h->positive)},
                                                          {"neg_inf", std::to_string(h->neg_inf)},
                                                          {"pos_inf", std::to_string(h->pos_inf)},
                                                          {"nan", std::to_string(h->nan)}}));
      const bool narrow = size_of(v.type) <= 4;
      io.fields.emplace_back("abs_max", detail::json_number(h->abs_max, narrow));
      io.fields.emplace_back("abs_min_nonzero", detail::json_number(h->abs_min_nonzero, narrow));
      if (detail::is_finite_bits(h->abs_max)) {
        std::vector<std::pair<std::string, std::string>> hr;
        static const dtype targets[] = {dtype::f16, dtype::bf16, dtype::f8_e4m3fn, dtype::f8_e5m2};
        for (dtype t : targets) hr.emplace_back(name(t), detail::json_number(headroom_bits(h->abs_max, t), false));
        io.fields.emplace_back("headroom_bits", detail::py_object(hr));
      }
      if (h->first_nonfinite >= 0) io.fields.emplace_back("first_nonfinite", std::to_string(h->first_nonfinite));
    } else if (detail::is_finite_bits(h->abs_max)) {
      io.fields.emplace_back("abs_max", detail::json_number(h->abs_max, false));
    }
    if (want_hash) {  // fused into the pass above when it ran, else a hashing pass of its own
      const content_hash ch =
          h->hash.valid ? h->hash : (check)(v, check_options{}.with_mode(check_mode::no_tensor).with_hash()).hash;
      io.fields.emplace_back("hash", detail::py_json_quote(to_hex(ch)));
    }
  }

  /// Nested arrays of the values torch would show ("..." where it summarises).
  static std::string numeric_value(const tensor_view& v, const detail::torch_print_options& po) {
    const detail::element_reader rd(v);
    const bool summarize = v.numel() > po.threshold;
    const bool as_float = size_of(v.type) <= 4;
    auto one = [&](std::int64_t off) -> std::string {
      if (v.type == dtype::boolean) return rd.bits(off) != 0 ? "true" : "false";
      if (!is_float(v.type)) return rd.as_int_text(off);
      return detail::json_number(rd.as_double(off), as_float);
    };
    if (v.rank == 0) return one(0);
    struct rec_t {
      const tensor_view& v;
      const detail::torch_print_options& po;
      bool summarize;
      decltype(one)& f;
      std::string run(int d, std::int64_t off) {
        std::vector<std::string> items;
        for (std::int64_t i : detail::torch_shown_indices(v.shape[d], summarize, po.edge_items)) {
          if (i < 0) {
            items.emplace_back("\"...\"");
            continue;
          }
          const std::int64_t o = off + i * v.strides[d];
          items.push_back(d + 1 == v.rank ? f(o) : run(d + 1, o));
        }
        return detail::py_array(items);
      }
    } r{v, po, summarize, one};
    return r.run(0, 0);
  }

  const std::uint64_t recorder_id_;  ///< the recorder whose scopes this writer follows
  tree_options opts_;
  std::string run_id_;
  std::uint64_t pass_ = 0;
  std::string cleaned_base_;
  int rank_ = 0;
  bool active_ = true;

  mutable std::mutex m_;
  bool in_pass_ = false;
  std::thread::id thread_;
  std::string class_name_;
  std::string root_prefix_;
  std::uint64_t step_ = 0;
  std::deque<node> nodes_;
  detail::tree_text root_;
  std::vector<std::string> pass_warnings_;  ///< the pass's early warnings with their module_path (JSON, level 0)
  std::string detection_;                   ///< the pass's detection for the root's "nanscope" (JSON), if any
  bool ended_by_detection_ = false;         ///< a throwing detection ended the pass (committed early)
  std::unique_ptr<detail::atomic_file> summary_file_, full_file_;
  std::string summary_path_, full_path_;
  std::uint64_t pass_summary_bytes_ = 0, pass_full_bytes_ = 0;
  std::uint64_t summary_bytes_ = 0, full_bytes_ = 0;
  std::uint64_t written_ = 0;
  std::string last_error_;
  std::string pending_errors_;  ///< error lines for on_error, handed over after the lock is released
  connection conn_;  ///< the attachment made by the constructor (last: ended before the members above go)
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_TREE_HPP
