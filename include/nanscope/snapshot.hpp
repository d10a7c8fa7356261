// nanscope — snapshot.hpp: what a detection saves into recorder_options::snapshot_dir — the offending tensor
// and, when the frame in progress produced the value, its inputs and parameters as .npy files, with a JSON index.
//
// File names are unique per process and recorder, so ranks and recorders sharing one directory never overwrite
// each other's evidence:
//   nanscope_r{rank}_p{pid}_rec{recorder id}_step{S}_{K}_{i}_{module}_{context}.npy   (+ ..._step{S}_{K}_index.json)
// ("r{rank}_" only when a launcher variable names the rank). Every file is written atomically and never replaces
// an existing file: if a name is taken (a reused pid of an earlier run, say), the whole set moves to the next
// free suffix ("..._{K}-1_..."). The directory and its missing parents are created; stale temporary files of
// dead snapshot writers in it are removed first. Included by detail/recorder_impl.hpp (it defines
// recorder::write_snapshot).
#ifndef NANSCOPE_SNAPSHOT_HPP
#define NANSCOPE_SNAPSHOT_HPP

#include "config.hpp"
#include "npy.hpp"
#include "recorder.hpp"
#include "detail/atomic_file.hpp"
#include "detail/process.hpp"

#include <memory>
#include <string>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// "nanscope_r{rank}_p{pid}_rec{id}_step{S}_{K}" (no "r{rank}_" when the rank is unknown).
inline std::string snapshot_prefix(std::uint64_t recorder_id, std::uint64_t step, std::uint64_t detection) {
  const int rank = parse_env_rank();
  std::string p = "nanscope_";
  if (rank >= 0) p += "r" + std::to_string(rank) + "_";
  p += "p" + std::to_string(process_id()) + "_rec" + std::to_string(recorder_id) + "_step" + std::to_string(step) +
       "_" + std::to_string(detection);
  return p;
}

}  // namespace detail

#if !NANSCOPE_IMPL_SEPARATE || defined(NANSCOPE_IMPLEMENTATION)
/// Writes the offending tensor and, when this frame produced the value, its inputs and parameters as .npy
/// files into `dir`, plus an index (JSON) naming them (see the file comment). Failures are reported to the sink
/// and do not replace the detection.
NANSCOPE_IMPL_ENTRY void recorder::write_snapshot(const std::string& dir, const detection& d, const frame& current) {
  const std::string stem = detail::snapshot_prefix(id_, d.step, detections_.load(std::memory_order_relaxed));
  // The tensors to save, in order: the offending one, then (produced here) the inputs and parameters.
  std::vector<const tensor_record*> saved;
  for (const auto& t : current.tensors)
    if (t.context == d.context && t.role == d.role && t.is_tensor && t.view.data != nullptr) saved.push_back(&t);
  if (d.produced_here)
    for (const auto& t : current.tensors)
      if ((t.role == tensor_role::input || t.role == tensor_role::parameter) && t.is_tensor && t.view.data != nullptr)
        saved.push_back(&t);

  auto run = [&] {
    if (!detail::make_directories(dir)) detail::file_fail(dir, "snapshot_dir: not a directory and cannot be created");
    detail::remove_stale_temporaries(dir, {}, "nanscope_");
    for (int attempt = 0; attempt < 1000; ++attempt) {
      const std::string prefix = stem + (attempt == 0 ? std::string() : "-" + std::to_string(attempt));
      std::vector<std::string> written;  // removed again if a later name of this set is taken
      bool taken = false;
      std::string index = "{\n  \"step\": " + std::to_string(d.step) + ",\n  \"module_path\": " +
                          detail::json_quote(d.module_path) + ",\n  \"class\": " + detail::json_quote(d.class_name) +
                          ",\n  \"context\": " + detail::json_quote(d.context) +
                          ",\n  \"produced_here\": " + (d.produced_here ? "true" : "false") + ",\n  \"files\": [";
      for (std::size_t k = 0; k < saved.size() && !taken; ++k) {
        const tensor_record& t = *saved[k];
        const std::string base = prefix + "_" + std::to_string(k) + "_" + detail::file_safe(current.module_path) + "_" +
                                 detail::file_safe(t.context) + ".npy";
        const std::string file = dir + "/" + base;
        detail::atomic_file f(file);
        detail::write_npy_into(f, t.view);
        if (!f.commit_new()) {
          taken = true;
          break;
        }
        written.push_back(file);
        index += k == 0 ? "\n" : ",\n";
        index += "    {\"file\": " + detail::json_quote(base) + ", \"role\": \"" + detail::role_word(t.role) +
                 "\", \"context\": " + detail::json_quote(t.context) + ", \"dtype\": \"" + name(t.view.type) +
                 "\", \"shape\": [";
        for (int i = 0; i < t.view.rank; ++i) index += (i ? ", " : "") + std::to_string(t.view.shape[i]);
        index += "], \"offending\": ";
        index += (t.context == d.context && t.role == d.role) ? "true}" : "false}";
      }
      if (!taken) {
        index += saved.empty() ? "]" : "\n  ]";
        if (!d.produced_here)
          index += ",\n  \"note\": \"the value arrived already non-finite: the frame that produced it is not in "
                   "progress any more, so only the offending tensor was saved\"";
        index += "\n}\n";
        detail::atomic_file f(dir + "/" + prefix + "_index.json");
        f.write(index.data(), index.size());
        if (f.commit_new()) return;
      }
      for (const auto& w : written) ::unlink(w.c_str());  // ours, just written under a set that cannot complete
    }
    detail::file_fail(dir + "/" + stem, "snapshot: no free file name");
  };
#if NANSCOPE_IMPL_EXCEPTIONS
  try {
    run();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lk(m_);
    emit(std::string("nanscope: snapshot failed: ") + e.what() + "\n");
  }
#else
  run();
#endif
}

#endif

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_SNAPSHOT_HPP
