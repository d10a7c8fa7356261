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
// Parts: tree_options.hpp (the options), tree_json.hpp (Python-compatible JSON text), tree_warnings.hpp (warning
// entries), detail/tree_tensor.hpp (one tensor's keys), detail/tree_node.hpp (a node
// and its JSON text), detail/tree_files.hpp (the pair of files and their
// commit), this file (the listener, the model of a pass and pruning).
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
#include "tree_options.hpp"
#include "tree_warnings.hpp"
#include "view.hpp"
#include "detail/atomic_file.hpp"
#include "detail/process.hpp"
#include "detail/torch_print.hpp"
#include "detail/tree_files.hpp"
#include "detail/tree_node.hpp"
#include "detail/tree_tensor.hpp"

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
    return files_.written();
  }
  /// Bytes of JSON written to the SUMMARY / FULL_TENSORS files so far (all passes).
  std::uint64_t summary_bytes() const {
    std::lock_guard<std::mutex> lk(m_);
    return files_.summary_bytes();
  }
  std::uint64_t full_bytes() const {
    std::lock_guard<std::mutex> lk(m_);
    return files_.full_bytes();
  }
  /// Paths of the last pass's files ("" before the first pass).
  std::string summary_path() const {
    std::lock_guard<std::mutex> lk(m_);
    return files_.summary_path();
  }
  std::string full_path() const {
    std::lock_guard<std::mutex> lk(m_);
    return files_.full_path();
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
  using piece = detail::tree_piece;
  using node = detail::tree_node;

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
    files_.discard();
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
    files_.open(opts_.directory, base, opts_.write_summary, opts_.write_full);
    ++pass_;
    in_pass_ = true;
    thread_ = std::this_thread::get_id();
    root_.clear();
    pass_warnings_.clear();
    detection_.clear();
    ended_by_detection_ = false;
    root_.with_summary = opts_.write_summary;
    root_.with_full = opts_.write_full;
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
    detail::write_node_inputs(w, n, k);
    maybe_flush();
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
        detail::write_node_outputs(w, n, k);
      }
    } else if (leaf) {
      // the root drops a missing output (Python: falsy keys removed); other leaves write null
      if (!root || !n.outputs.empty()) {
        w.add(",");
        w.add(detail::indent(k));
        w.add("\"outputs\": ");
        if (n.outputs.empty()) w.add("null");
        else detail::write_node_outputs(w, n, k);
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
    detail::describe_tree_tensor(io, rec, opts_);
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
    detail::write_node_keys(w, n, k);
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
    files_.write(root_);
  }

  /// Commits the pass's files (detail::tree_file_pair::commit: crash-consistent as a pair).
  void end_pass() {
    maybe_flush(true);
    files_.commit();
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
      detail::describe_tree_tensor(io, rec, opts_);
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

  const std::uint64_t recorder_id_;  ///< the recorder whose scopes this writer follows
  tree_options opts_;
  std::string run_id_;
  std::uint64_t pass_ = 0;
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
  detail::tree_file_pair files_;
  std::string last_error_;
  std::string pending_errors_;  ///< error lines for on_error, handed over after the lock is released
  connection conn_;  ///< the attachment made by the constructor (last: ended before the members above go)
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_TREE_HPP
