// Attachments between a recorder and the objects attached to it (attachment.hpp; issue 29 items 1-7). Each case
// is one of the ways the old raw pointers went wrong; under the asan-ubsan and tsan presets the old code failed
// them with heap-use-after-free, stack-use-after-scope or a data race, and the checks below (who was told, what
// was written) failed on it in every preset.
#include <doctest/doctest.h>
#include "support/files.hpp"

#include <nanscope/control.hpp>
#include <nanscope/history.hpp>
#include <nanscope/rank_evidence.hpp>
#include <nanscope/tree.hpp>

#include "support/recorder_support.hpp"

#if NANSCOPE_TEST_HAVE_JSON
#include <nlohmann/json.hpp>
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace attach_test {

/// Counts its events and how often it was told of a detach.
struct told_listener final : nanscope::scope_listener {
  std::atomic<int> opened{0}, told{0};
  void scope_opened(const nanscope::frame&, bool) noexcept override { ++opened; }
  void tensor_recorded(const nanscope::frame&, const nanscope::tensor_record&) noexcept override {}
  void scope_closed(const nanscope::frame&, bool) noexcept override {}
  void detached(nanscope::recorder&) noexcept override { ++told; }
  ~told_listener() override { end_attachments(); }
};

/// A gate that admits everything and counts how often it was told of a detach.
struct told_gate final : nanscope::check_gate {
  std::atomic<int> told{0}, admitted{0};
  std::uint32_t admit(const nanscope::frame&, nanscope::tensor_role, std::string_view,
                      nanscope::check_mode&) noexcept override {
    ++admitted;
    return 0;
  }
  void checked(std::uint32_t, std::uint64_t, std::uint64_t) noexcept override {}
  void step_boundary(std::uint64_t) noexcept override {}
  void detached(nanscope::recorder&) noexcept override { ++told; }
  ~told_gate() override { end_attachments(); }
};

inline nanscope::recorder_options quiet() {
  nanscope::recorder_options o;
  o.policy = nanscope::on_detect::print_and_continue;
  o.sink = [](std::string_view) {};
  return o;
}

inline void pass(nanscope::recorder& rec, const std::vector<float>& x) {
  nanscope::scope root(rec, "", "Net");
  root.input(x);
  nanscope::scope a(rec, "a", "Linear");
  a.output(x);
}

}  // namespace attach_test


TEST_CASE("attachment: objects detached by remove_listener / set_listener / set_gate are told; the recorder may then end first") {
  // Item 1: a detached object was not told and kept its pointer; with the recorder destroyed first, the
  // destructors of the tree writer, the history, the rank evidence and controller::detach used freed memory.
  const std::vector<float> x(8, 0.5f);
  const std::string dir = nstest::make_temp_dir("attach");
  auto rec = std::make_unique<nanscope::recorder>(attach_test::quiet());
  auto w = std::make_unique<nanscope::tree_writer>(*rec, nanscope::tree_options{}.in(dir).with_rank(0));
  auto h = std::make_unique<nanscope::history>();
  h->attach(*rec);
  nanscope::rank_evidence_options eo;
  eo.dir = dir + "/evidence";
  auto ev = std::make_unique<nanscope::rank_evidence>(*rec, eo);
  auto c = std::make_unique<nanscope::controller>();
  c->attach(*rec);
  attach_test::pass(*rec, x);
  CHECK(rec->listener_count() == 3);
  CHECK(w->attached());
  CHECK(h->attached());
  CHECK(ev->attached());
  CHECK(c->attached());

  CHECK(rec->remove_listener(w.get()));  // "remove_listener and attach again" (docs/tree.md), without the again
  CHECK_FALSE(w->attached());
  rec->set_listener(nullptr);  // detaches the history and the evidence
  CHECK_FALSE(h->attached());
  CHECK_FALSE(ev->attached());
  CHECK(rec->set_gate(nullptr) == c.get());
  CHECK_FALSE(c->attached());
  CHECK(rec->listener_count() == 0);
  CHECK(rec->gate() == nullptr);

  rec->set_step(7);
  rec.reset();  // the recorder ends before everything that was attached to it
  c->detach();  // read the recorder's gate through a freed pointer
  c.reset();
  w.reset();
  h.reset();
  CHECK(ev->current_step() == 1);  // detached at step 1 (after one pass): it kept that step
  ev.reset();
  nstest::remove_tree(dir);
}

TEST_CASE("attachment: a second controller replaces the first as the gate, which is told and never touches the recorder again") {
  auto rec = std::make_unique<nanscope::recorder>(attach_test::quiet());
  nanscope::controller c1, c2;
  c1.attach(*rec);
  CHECK(rec->gate() == &c1);
  c2.attach(*rec);
  CHECK(rec->gate() == &c2);
  CHECK_FALSE(c1.attached());
  CHECK(c2.attached());
  c1.attach(*rec);  // attach again: c2 is told now
  CHECK_FALSE(c2.attached());
  rec.reset();
  CHECK_FALSE(c1.attached());
  c1.detach();
  c2.detach();
}

TEST_CASE("attachment: a gate replaced by set_gate from two threads at once is told exactly once per attachment") {
  // Item 4: set_gate stored the "told" flag and the pointer separately, so concurrent calls paired them wrongly.
  attach_test::told_gate g1, g2;
  int calls = 0;
  {
    nanscope::recorder rec(attach_test::quiet());
    constexpr int rounds = 2000;
    std::thread t([&] {
      for (int i = 0; i < rounds; ++i) rec.set_gate(&g1);
    });
    for (int i = 0; i < rounds; ++i) rec.set_gate(&g2);
    t.join();
    calls = 2 * rounds;
    CHECK((rec.gate() == &g1 || rec.gate() == &g2));
  }
  // every attachment ended: replaced by the next set_gate, or by the recorder's end
  CHECK(g1.told + g2.told == calls);
  CHECK(g1.attachment_count() == 0);
  CHECK(g2.attachment_count() == 0);
}

TEST_CASE("attachment: a tree writer and its recorder destroyed at the same moment on two threads") {
  // Item 2: ~recorder told the listeners after unlocking; ~tree_writer on another thread found the list empty,
  // returned, and the writer was freed while being told (heap-use-after-free under ASan).
  const std::string dir = nstest::make_temp_dir("attach");
  const std::vector<float> x(4, 1.0f);
  for (int round = 0; round < 200; ++round) {
    auto* rec = new nanscope::recorder(attach_test::quiet());
    auto* w = new nanscope::tree_writer(*rec, nanscope::tree_options{}.in(dir).with_rank(0));
    auto* h = new nanscope::history();
    h->attach(*rec);
    attach_test::pass(*rec, x);
    std::atomic<int> ready{0};
    std::thread a([&] {
      ++ready;
      while (ready.load() < 2) {
      }
      delete w;
    });
    std::thread b([&] {
      ++ready;
      while (ready.load() < 2) {
      }
      delete rec;
    });
    ++ready;
    delete h;
    a.join();
    b.join();
  }
  nstest::remove_tree(dir);
}

namespace attach_test {
/// One step of a model whose root scope is at the same stack address every call (same caller, same depth).
inline void stepped_pass(nanscope::recorder& rec, nanscope::tree_writer& w, const std::vector<float>& x, int action,
                         std::uintptr_t& root_address) {
  nanscope::scope root(rec, "", "Net");
  root.input(x);
  {
    nanscope::scope a(rec, "a", "Linear");
    a.output(x);
  }
  if (action == 1) rec.remove_listener(&w);  // detached in the middle of the step
  if (action == 2) rec.add_listener(&w);     // attached again in the middle of the next step
  {
    nanscope::scope b(rec, "b", "Linear");
    b.output(x);
  }
  root_address = reinterpret_cast<std::uintptr_t>(static_cast<const void*>(&root));
}
}  // namespace attach_test

TEST_CASE("attachment: a tree writer re-attached in the middle of a step never splices that step into a stale pass") {
  // Item 3: passes were matched by the root frame's address: step 1's children went into step 0's stale pass,
  // written as "step": 0, with no error.
  const std::string dir = nstest::make_temp_dir("attach");
  nanscope::recorder rec(attach_test::quiet());
  std::vector<std::string> errors;
  nanscope::tree_options o = nanscope::tree_options{}.in(dir).with_rank(0);
  o.on_error = [&](std::string_view m) { errors.emplace_back(m); };
  nanscope::tree_writer w(rec, o);
  const std::vector<float> x(4, 2.0f);
  std::uintptr_t r0 = 0, r1 = 0, r2 = 0;
  attach_test::stepped_pass(rec, w, x, 1, r0);  // step 0: detached midway
  attach_test::stepped_pass(rec, w, x, 2, r1);  // step 1: attached midway
  CHECK(r0 == r1);  // the condition of the old failure (if the compiler moved the frame, the rest still holds)
  CHECK(w.trees_written() == 0);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].find("detached from its recorder while a pass was open") != std::string::npos);
  CHECK_FALSE(nstest::exists(dir + "/Net_debug_tree_SUMMARY.json"));
  attach_test::stepped_pass(rec, w, x, 0, r2);  // step 2: a whole pass
  CHECK(w.trees_written() == 1);
#if NANSCOPE_TEST_HAVE_JSON
  const auto t = nlohmann::json::parse(nstest::read_text(dir + "/Net_debug_tree_SUMMARY.json"));
  CHECK(t["nanscope"]["step"] == 2);
  REQUIRE(t["children"].size() == 2);
  CHECK(t["children"][0]["module_path"] == "Net.a");
  CHECK(t["children"][1]["module_path"] == "Net.b");
#endif
  nstest::remove_tree(dir);
}

namespace attach_test {
inline void other_recorder_pass(nanscope::recorder& rec2, const std::vector<float>& x) {
  nanscope::scope root(rec2, "", "Other");
  nanscope::scope inner(rec2, "inner", "Linear");
  inner.output(x);
}
}  // namespace attach_test

TEST_CASE("attachment: one tree writer also attached to a second recorder writes only its own recorder's scopes") {
  // Item 4: the second recorder's frames were taken for nodes of the first one's pass: stack-use-after-scope.
  const std::string dir = nstest::make_temp_dir("attach");
  nanscope::recorder rec1(attach_test::quiet()), rec2(attach_test::quiet());
  nanscope::tree_writer w(rec1, nanscope::tree_options{}.in(dir).with_rank(0));
  CHECK(rec2.add_listener(&w));
  const std::vector<float> x(4, 3.0f);
  {
    nanscope::scope root(rec1, "", "Net");
    root.input(x);
    attach_test::other_recorder_pass(rec2, x);
    nanscope::scope a(rec1, "a", "Linear");
    attach_test::other_recorder_pass(rec2, x);
    a.output(x);
  }
  attach_test::other_recorder_pass(rec2, x);
  CHECK(w.trees_written() == 1);
  CHECK(w.last_error().empty());
#if NANSCOPE_TEST_HAVE_JSON
  const auto t = nlohmann::json::parse(nstest::read_text(dir + "/Net_debug_tree_SUMMARY.json"));
  REQUIRE(t["children"].size() == 1);
  CHECK(t["children"][0]["module_path"] == "Net.a");
  CHECK_FALSE(t["children"][0].contains("children"));
#endif
  CHECK_FALSE(nstest::exists(dir + "/Other_debug_tree_SUMMARY.json"));
  CHECK(rec2.remove_listener(&w));
  nstest::remove_tree(dir);
}

namespace attach_test {
/// When the recorder's end tells it, attaches `late` to that recorder.
struct attaching_listener final : nanscope::scope_listener {
  told_listener* late = nullptr;
  std::atomic<int> added{-1};
  void scope_opened(const nanscope::frame&, bool) noexcept override {}
  void tensor_recorded(const nanscope::frame&, const nanscope::tensor_record&) noexcept override {}
  void scope_closed(const nanscope::frame&, bool) noexcept override {}
  void detached(nanscope::recorder& r) noexcept override { added = r.add_listener(late) ? 1 : 0; }
  ~attaching_listener() override { end_attachments(); }
};
}  // namespace attach_test

TEST_CASE("attachment: a listener attached while the recorder is being destroyed is refused, never left attached") {
  // Item 4: remove_all took the list, then told it: a listener added meanwhile (here from the telling itself)
  // was never told and stayed pointed at the freed recorder.
  attach_test::told_listener late;
  attach_test::attaching_listener l;
  l.late = &late;
  {
    nanscope::recorder rec(attach_test::quiet());
    rec.add_listener(&l);
    const std::vector<float> x(4, 1.0f);
    attach_test::pass(rec, x);
  }
  CHECK(l.added == 0);  // refused: the recorder was ending
  CHECK(late.told == 0);
  CHECK(late.attachment_count() == 0);
  CHECK(late.opened == 0);
}

TEST_CASE("attachment: rank evidence used after its recorder ended records the last step and no site") {
  // Item 5: collective_call read the step and the site through owner(), the freed recorder.
  const std::string dir = nstest::make_temp_dir("attach");
  auto rec = std::make_unique<nanscope::recorder>(attach_test::quiet());
  nanscope::rank_evidence_options eo;
  eo.dir = dir;
  eo.rank = 0;
  eo.world_size = 1;
  nanscope::rank_evidence ev(*rec, eo);
  rec->set_step(3);
  {
    nanscope::scope s(*rec, "layer", "Linear");
    nanscope::collective_call c(ev, nanscope::communicator{"world", 1, 0, {}}, nanscope::collective_kind::all_reduce);
    CHECK(c.record().site == "layer");
    CHECK(c.record().step == 3);
  }
  rec->set_step(4);
  rec.reset();
  CHECK_FALSE(ev.attached());
  CHECK(ev.current_step() == 4);
  std::vector<float> x(4, nsrec::qnan_f());
  {
    nanscope::collective_call c(ev, nanscope::communicator{"world", 1, 0, {}}, nanscope::collective_kind::all_reduce);
    c.input(x);
    CHECK(c.record().step == 4);
    CHECK(c.record().site.empty());
  }
  std::uint64_t step = 99;
  CHECK(ev.take_new_detection(step));
  CHECK(step == 4);
  ev.write("after the recorder");
#if NANSCOPE_TEST_HAVE_JSON
  const auto j = nlohmann::json::parse(nstest::read_text(ev.path()));
  CHECK(j["step"] == 4);
  CHECK(j["events"].size() == 3);  // the first transfer, the scope "layer", the second transfer
#endif
  nstest::remove_tree(dir);
}

TEST_CASE("attachment: the evidence's detections for the all-stop are taken once, with their own step") {
  // Item 7: mpi::all_stop asked detected(), true for ever after one detection (a continuing policy stopped at
  // every later step), and wrote the stop at the recorder's step - 1 (wrong with manual stepping).
  const std::string dir = nstest::make_temp_dir("attach");
  nanscope::recorder_options o = attach_test::quiet();
  o.auto_step = false;
  nanscope::recorder rec(o);
  nanscope::rank_evidence_options eo;
  eo.dir = dir;
  eo.rank = 0;
  eo.world_size = 1;
  nanscope::rank_evidence ev(rec, eo);
  const std::vector<float> good(4, 1.0f);
  std::vector<float> bad(4, 1.0f);
  bad[2] = nsrec::pos_inf_f();
  std::uint64_t step = 0;
  for (std::uint64_t s = 0; s < 6; ++s) {
    rec.set_step(s);
    nanscope::scope root(rec, "model", "M");
    root.output(s == 1 || s == 4 ? bad : good);
  }
  CHECK(ev.take_new_detection(step));
  CHECK(step == 1);  // the first since the last take
  CHECK_FALSE(ev.take_new_detection(step));
  {
    rec.set_step(6);
    nanscope::scope root(rec, "model", "M");
    root.output(bad);
  }
  CHECK(ev.take_new_detection(step));
  CHECK(step == 6);
  CHECK_FALSE(ev.take_new_detection(step));
  CHECK(ev.detected());
  nstest::remove_tree(dir);
}

TEST_CASE("attachment: connect() gives a handle; the listener, the handle or the recorder may end it, each once") {
  const std::vector<float> x(4, 1.0f);
  nanscope::recorder rec(attach_test::quiet());
  attach_test::told_listener a;
  {
    nanscope::connection c = rec.connect(a);
    CHECK(c.connected());
    CHECK_FALSE(rec.connect(a).connected());  // attached already: an empty handle, nothing changes
    CHECK(rec.listener_count() == 1);
    attach_test::pass(rec, x);
    CHECK(a.opened == 2);
    std::uint64_t seen = 99;
    CHECK(c.with_recorder([&](nanscope::recorder& r) { seen = r.step(); }));
    CHECK(seen == 1);
  }  // the handle ends it: the listener is not told (its own side ended it)
  CHECK(rec.listener_count() == 0);
  CHECK(a.told == 0);
  attach_test::pass(rec, x);
  CHECK(a.opened == 2);
  nanscope::connection c;
  {
    attach_test::told_listener b;
    c = rec.connect(b);
    CHECK(c.connected());
  }  // the listener ends first: it detaches itself
  CHECK_FALSE(c.connected());
  CHECK(rec.listener_count() == 0);
  attach_test::pass(rec, x);
  c.disconnect();  // nothing left to end
  nanscope::connection d;
  {
    nanscope::recorder r2(attach_test::quiet());
    d = r2.connect(a);
    CHECK(d.connected());
  }  // the recorder ends first: the listener is told once
  CHECK_FALSE(d.connected());
  CHECK(a.told == 1);
  CHECK_FALSE(d.with_recorder([](nanscope::recorder&) {}));
}
