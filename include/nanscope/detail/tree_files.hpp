// nanscope — detail/tree_files.hpp: the layer tree's pair of files (SUMMARY, FULL_TENSORS): streamed into
// temporaries while a pass runs, then committed so that whenever both files exist they are of the same pass.
#ifndef NANSCOPE_DETAIL_TREE_FILES_HPP
#define NANSCOPE_DETAIL_TREE_FILES_HPP

#include "../config.hpp"
#include "../tree_json.hpp"
#include "atomic_file.hpp"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

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

/// One writer's pair of files. open() starts a pass (temporaries beside the targets), write() appends the text a
/// pass produced so far, commit() puts the pair in place, discard() drops the pass (the previous files stay).
/// Not thread-safe: the tree writer calls it under its own lock.
class tree_file_pair {
 public:
  /// Starts a pass: `base` is "<directory>/<Class>[_rank<r>]_debug_tree_"; each file is created when asked for.
  /// The first pass under a base removes the temporaries that writers killed midway left there (dead processes
  /// only).
  void open(const std::string& directory, const std::string& base, bool summary, bool full) {
    summary_path_ = summary ? base + "SUMMARY.json" : std::string();
    full_path_ = full ? base + "FULL_TENSORS.json" : std::string();
    if (cleaned_base_ != base) {
      std::vector<std::string> names;
      for (const std::string* p : {&summary_path_, &full_path_})
        if (!p->empty()) names.push_back(p->substr(p->rfind('/') + 1));
      remove_stale_temporaries(directory, names);
      cleaned_base_ = base;
    }
    summary_file_.reset();
    full_file_.reset();
    if (summary) summary_file_ = std::make_unique<atomic_file>(summary_path_);
    if (full) full_file_ = std::make_unique<atomic_file>(full_path_);
    pass_summary_bytes_ = pass_full_bytes_ = 0;
  }

  /// Appends what `text` holds to the pass's files and empties it.
  void write(tree_text& text) {
    if (summary_file_) summary_file_->write(text.summary.data(), text.summary.size());
    if (full_file_) full_file_->write(text.full.data(), text.full.size());
    pass_summary_bytes_ += text.summary.size();
    pass_full_bytes_ += text.full.size();
    text.clear();
  }

  /// Commits the pass's files. With both files: the old SUMMARY is removed first, then FULL_TENSORS and then
  /// SUMMARY are renamed into place (each fsynced). Whatever moment the process dies at, the directory holds the
  /// old pair, the old FULL_TENSORS alone, the new FULL_TENSORS alone, or the new pair: whenever both files
  /// exist they are of the same pass. SUMMARY is the commit mark of a pair.
  void commit() {
    auto probe = [](int stage) {
      if (auto p = tree_commit_probe().load(std::memory_order_acquire)) p(stage);
    };
    {
      std::lock_guard<std::mutex> commit_lock(tree_commit_mutex());
      if (summary_file_ && full_file_) {
        if (::unlink(summary_path_.c_str()) != 0 && errno != ENOENT)
          file_fail(summary_path_, errno_text("cannot remove the previous pass's file", errno));
        fsync_directory(directory_of(summary_path_), summary_path_);
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
  }

  /// Drops the pass: its temporaries are removed, the previous files stay.
  void discard() noexcept {
    summary_file_.reset();
    full_file_.reset();
  }

  const std::string& summary_path() const { return summary_path_; }  ///< the last pass's ("" before the first)
  const std::string& full_path() const { return full_path_; }
  std::uint64_t summary_bytes() const { return summary_bytes_; }  ///< committed passes only
  std::uint64_t full_bytes() const { return full_bytes_; }
  std::uint64_t written() const { return written_; }  ///< passes committed

 private:
  std::unique_ptr<atomic_file> summary_file_, full_file_;
  std::string summary_path_, full_path_, cleaned_base_;
  std::uint64_t pass_summary_bytes_ = 0, pass_full_bytes_ = 0;
  std::uint64_t summary_bytes_ = 0, full_bytes_ = 0;
  std::uint64_t written_ = 0;
};

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_TREE_FILES_HPP
