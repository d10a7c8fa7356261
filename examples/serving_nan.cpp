// nanscope example — serving_nan.cpp: a decode step over a continuous batch of 64 requests, with a paged KV cache
// (blocks of 16 tokens). One request's prompt holds a token whose embedding is huge: its keys are finite but far
// beyond the f16 range, and its attention scores, computed in f16, overflow to Inf, so its softmax (Inf - Inf) and
// its logits are NaN. The
// engine checks the logits with one segment per request and the KV cache with one segment per block
// (nanscope/segments.hpp), aborts only that request, zeroes its KV blocks, and continues with the other 63,
// whose logits are asserted bit-identical to those of a batch that never held the poisoned request.
#include <nanscope/nanscope.hpp>
#include <nanscope/segments.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int d_model = 32, vocab = 64, block_tokens = 16, n_requests = 64, poisoned = 17;

/// Deterministic weights in [-0.5, 0.5).
struct lcg {
  std::uint64_t s;
  float next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((s >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
  }
};

struct model {
  std::vector<float> emb, wq, wk, wv, wo;  // [vocab, d], [d, d] x 3, [vocab, d]
  model() {
    lcg g{42};
    auto fill = [&](std::vector<float>& w, std::size_t n) {
      w.resize(n);
      for (float& x : w) x = g.next();
    };
    fill(emb, vocab * d_model);
    fill(wq, d_model * d_model);
    fill(wk, d_model * d_model);
    fill(wv, d_model * d_model);
    fill(wo, vocab * d_model);
  }
  /// out = W x (W is [rows, d_model])
  static void matvec(const std::vector<float>& w, int rows, const float* x, float* out) {
    for (int r = 0; r < rows; ++r) {
      float acc = 0.0f;
      for (int c = 0; c < d_model; ++c) acc += w[static_cast<std::size_t>(r * d_model + c)] * x[c];
      out[r] = acc;
    }
  }
  /// A token's embedding; token -1 is the poison: an embedding 10^6 times too large.
  void embed(int token, float* x) const {
    const int t = token < 0 ? 7 : token;
    for (int c = 0; c < d_model; ++c) x[c] = emb[static_cast<std::size_t>(t * d_model + c)] * (token < 0 ? 1e6f : 1.0f);
  }
};

struct request {
  std::int64_t id;
  std::vector<int> tokens;
  std::vector<int> blocks;  // its block table
};

/// The engine: a pool of KV blocks [blocks * 16 tokens, d_model] for K and V, and the requests in the batch.
struct engine {
  const model& m;
  int n_blocks;
  std::vector<float> k_cache, v_cache;
  std::vector<request> batch;
  std::vector<int> free_blocks;

  engine(const model& mm, int blocks) : m(mm), n_blocks(blocks) {
    k_cache.assign(static_cast<std::size_t>(blocks * block_tokens * d_model), 0.0f);
    v_cache = k_cache;
    for (int b = blocks - 1; b >= 0; --b) free_blocks.push_back(b);
  }
  float* slot(std::vector<float>& cache, const request& r, std::size_t pos) {
    const int b = r.blocks[pos / block_tokens];
    return cache.data() + (static_cast<std::size_t>(b) * block_tokens + pos % block_tokens) * d_model;
  }
  /// Writes the K and V of token position `pos` of request r (allocating a block when needed).
  void write_kv(request& r, std::size_t pos) {
    if (pos % block_tokens == 0) {
      r.blocks.push_back(free_blocks.back());
      free_blocks.pop_back();
    }
    float x[d_model];
    m.embed(r.tokens[pos], x);
    model::matvec(m.wk, d_model, x, slot(k_cache, r, pos));
    model::matvec(m.wv, d_model, x, slot(v_cache, r, pos));
  }
  /// One decode step: logits [batch, vocab] for each request's last token, then its K/V written.
  std::vector<float> decode(std::vector<float>& logits) {
    logits.assign(batch.size() * vocab, 0.0f);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      request& r = batch[i];
      const std::size_t last = r.tokens.size() - 1;
      write_kv(r, last);
      float x[d_model], q[d_model], out[d_model] = {};
      m.embed(r.tokens[last], x);
      model::matvec(m.wq, d_model, x, q);
      std::vector<float> score(last + 1);
      float mx = -INFINITY;
      for (std::size_t j = 0; j <= last; ++j) {
        const float* k = slot(k_cache, r, j);
        float s = 0.0f;
        for (int c = 0; c < d_model; ++c) s += q[c] * k[c];
        // scores in f16, as an fp16 attention kernel produces them: above 65504 they are Inf
        score[j] = nanscope::half::from_float(static_cast<double>(s / std::sqrt(static_cast<float>(d_model)))).to_float();
        mx = std::max(mx, score[j]);
      }
      float sum = 0.0f;
      for (float& s : score) sum += (s = std::exp(s - mx));  // inf - inf: NaN for the poisoned request
      for (std::size_t j = 0; j <= last; ++j) {
        const float* v = slot(v_cache, r, j);
        for (int c = 0; c < d_model; ++c) out[c] += score[j] / sum * v[c];
      }
      model::matvec(m.wo, vocab, out, logits.data() + i * vocab);
    }
    return logits;
  }
  void prefill() {
    for (request& r : batch)
      for (std::size_t p = 0; p + 1 < r.tokens.size(); ++p) write_kv(r, p);
  }
};

std::vector<request> make_requests(bool with_poisoned) {
  std::vector<request> out;
  for (int i = 0; i < n_requests; ++i) {
    if (i == poisoned && !with_poisoned) continue;
    request r;
    r.id = 1000 + i;
    const int len = 5 + (i * 37) % 60;
    for (int t = 0; t < len; ++t) r.tokens.push_back((i * 7 + t * 13) % vocab);
    if (i == poisoned) r.tokens[3] = -1;  // the poisoned prompt token
    out.push_back(r);
  }
  return out;
}

int next_token(const float* row) { return static_cast<int>(std::max_element(row, row + vocab) - row); }

bool fail(const char* what) {
  fmt::print("FAILED: {}\n", what);
  return false;
}

bool run() {
  const model m;
  // --- the served batch, with the poisoned request
  engine e(m, 320);
  e.batch = make_requests(true);
  e.prefill();
  std::vector<float> logits1;
  e.decode(logits1);

  // the logits: one segment (row) per request
  std::vector<std::int64_t> rows, ids;
  for (std::size_t i = 0; i <= e.batch.size(); ++i) rows.push_back(static_cast<std::int64_t>(i));
  for (const request& r : e.batch) ids.push_back(r.id);
  const nanscope::tensor_view lv =
      nanscope::view_of(logits1.data(), {static_cast<std::int64_t>(e.batch.size()), vocab}, "logits");
  const nanscope::segmented_result lr = nanscope::check(lv, nanscope::segments::rows(rows).with_ids(ids));
  fmt::print("step 1 logits: {}\n", lr.total);
  for (const nanscope::segment_health& s : lr.bad)
    fmt::print("  request {} (batch row {}): {} NaN -> aborted\n", s.id, s.index, s.nan);

  // the KV cache: one segment per block of 16 tokens, over the f16 range = would not survive an f16 cache
  std::vector<std::int64_t> block_ids;
  for (int b = 0; b < e.n_blocks; ++b) block_ids.push_back(b);
  const nanscope::tensor_view kv =
      nanscope::view_of(e.k_cache.data(), {static_cast<std::int64_t>(e.n_blocks) * block_tokens, d_model}, "k_cache");
  const nanscope::segmented_result kr = nanscope::check(
      kv, nanscope::segments::every_rows(block_tokens).with_ids(block_ids), {},
      nanscope::segment_options{}.with_level(nanscope::segment_detail::counts).with_threshold(65504.0));
  std::vector<std::size_t> over = kr.over_indices();
  fmt::print("  k_cache blocks over 65504: {} (|x| max {:.3g}), blocks holding NaN/Inf: {}\n", fmt::join(over, " "),
             over.empty() ? 0.0 : kr.per_segment[over[0]].abs_max, kr.bad_count());

  if (lr.bad.size() != 1 || lr.bad[0].id != 1000 + poisoned) return fail("the poisoned request is the only bad one");
  const std::size_t bad_row = lr.bad[0].index;
  std::vector<std::size_t> its_blocks(e.batch[bad_row].blocks.begin(), e.batch[bad_row].blocks.end());
  std::sort(its_blocks.begin(), its_blocks.end());
  // the poisoned token (position 3) is in the request's first block
  if (over != std::vector<std::size_t>{its_blocks.empty() ? 0 : static_cast<std::size_t>(e.batch[bad_row].blocks[0])})
    return fail("the k_cache block over the f16 range is the poisoned request's first block");

  // --- abort the request: zero its KV blocks, free them, drop it from the batch
  for (int b : e.batch[bad_row].blocks) {
    std::fill_n(e.k_cache.begin() + static_cast<std::ptrdiff_t>(b) * block_tokens * d_model, block_tokens * d_model, 0.0f);
    std::fill_n(e.v_cache.begin() + static_cast<std::ptrdiff_t>(b) * block_tokens * d_model, block_tokens * d_model, 0.0f);
    e.free_blocks.push_back(b);
  }
  std::vector<float> kept1;
  std::vector<request> kept;
  for (std::size_t i = 0; i < e.batch.size(); ++i) {
    if (i == bad_row) continue;
    kept1.insert(kept1.end(), logits1.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                 logits1.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
    kept.push_back(e.batch[i]);
  }
  e.batch = kept;
  for (std::size_t i = 0; i < e.batch.size(); ++i) e.batch[i].tokens.push_back(next_token(kept1.data() + i * vocab));
  std::vector<float> logits2;
  e.decode(logits2);
  const nanscope::segmented_result lr2 = nanscope::check(
      nanscope::view_of(logits2.data(), {static_cast<std::int64_t>(e.batch.size()), vocab}, "logits"),
      nanscope::segments::every_rows(1));
  fmt::print("step 2 logits: {} ({} requests, {} bad)\n", lr2.total, e.batch.size(), lr2.bad_count());
  if (lr2.total.has_nonfinite() || e.batch.size() != n_requests - 1) return fail("step 2 is clean, with 63 requests");
  const nanscope::segmented_result kr2 = nanscope::check(
      kv, nanscope::segments::every_rows(block_tokens), {}, nanscope::segment_options{}.with_threshold(65504.0));
  if (!kr2.over_indices().empty() || kr2.bad_count() != 0) return fail("the k_cache holds nothing over the f16 range");

  // --- the reference: a batch that never held the poisoned request
  engine ref(m, 320);
  ref.batch = make_requests(false);
  ref.prefill();
  std::vector<float> ref1, ref2;
  ref.decode(ref1);
  for (std::size_t i = 0; i < ref.batch.size(); ++i) ref.batch[i].tokens.push_back(next_token(ref1.data() + i * vocab));
  ref.decode(ref2);
  if (std::memcmp(ref1.data(), kept1.data(), ref1.size() * sizeof(float)) != 0 ||
      std::memcmp(ref2.data(), logits2.data(), ref2.size() * sizeof(float)) != 0)
    return fail("the other 63 requests' logits are bit-identical to the reference");
  fmt::print("the other 63 requests: steps 1 and 2 bit-identical to a batch without request {}\n", 1000 + poisoned);
  return true;
}

}  // namespace

int main() { return run() ? 0 : 1; }
