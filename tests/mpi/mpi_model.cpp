// A small Eigen model split over the ranks of a real MPI job, with faults injected at known places, for the
// multi-rank tests (tests/mpi/run_scenario.py runs it under mpirun and checks nanscope-merge's answer).
//
//   mpi_model --out DIR [--steps N] [--mode tp|pipe] [--fault RANK:STEP:SITE:nan|inf]... [--all-stop]
//             [--write-at-exit] [--kill RANK:STEP]
//
// tp (tensor-parallel, every rank holds a shard of each layer; per step):
//   model.layer0 (x -> p0 = W0_r x)   model.probe0 (p0 -> |p0|, a local diagnostic nothing else reads)
//   all_reduce "world" #2s   (p0 -> h1 = sum over ranks)
//   model.layer1 (h1 -> p1 = W1_r tanh(h1))   model.probe1 (p1 -> |p1|)
//   all_reduce "world" #2s+1 (p1 -> h2)
//   model.head (h2 -> loss, local: after the step's last collective)
//   fault sites: data (the input x), layer0, probe0, layer1, probe1, head
// pipe (pipeline: rank r is stage r): stage 0 reads the data; each stage runs pipe.stage<r> and sends its
//   activation to stage r+1 (tag 7); the last stage runs pipe.head. fault sites: data, stage, head
// Each rank prints "rank R: completed N steps" when it leaves the loop.
#include <nanscope/macros.hpp>
#include <nanscope/mpi.hpp>
#include <nanscope/rank_evidence.hpp>

#include <Eigen/Dense>
#include <mpi.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

constexpr int D = 8;
using vec = Eigen::VectorXf;
using mat = Eigen::MatrixXf;

struct fault {
  int rank = -1;
  int step = -1;
  std::string site;
  bool inf = false;
};

std::vector<fault> g_faults;
int g_rank = 0;

// Replaces element 1 of v (0 of a one-element v) with NaN or +Inf when a fault is planned here.
void maybe_inject(vec& v, int step, const char* site) {
  for (const auto& f : g_faults)
    if (f.rank == g_rank && f.step == step && f.site == site)
      v[v.size() > 1 ? 1 : 0] = f.inf ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
}

mat weights(int layer, int rank) {
  mat w(D, D);
  for (int i = 0; i < D; ++i)
    for (int j = 0; j < D; ++j) w(i, j) = 0.05f * static_cast<float>(((i * 7 + j * 3 + layer * 5 + rank * 11) % 13) - 6);
  return w;
}

vec data(int step, int rank) {
  vec x(D);
  for (int i = 0; i < D; ++i) x[i] = 0.1f * static_cast<float>(((step * 5 + rank * 3 + i) % 9) - 4);
  return x;
}

bool parse_fault(const char* s, fault& f) {
  char site[64] = {}, kind[8] = {};
  if (std::sscanf(s, "%d:%d:%63[^:]:%7s", &f.rank, &f.step, site, kind) != 4) return false;
  f.site = site;
  f.inf = std::strcmp(kind, "inf") == 0;
  return f.inf || std::strcmp(kind, "nan") == 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  g_rank = rank;

  std::string out, mode = "tp";
  int steps = 8, kill_rank = -1, kill_step = -1;
  bool all_stop_on = false, write_at_exit = false, continue_after_stop = false, manual_steps = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mpi_model: %s needs a value\n", a.c_str());
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      return argv[++i];
    };
    if (a == "--out") {
      out = next();
    } else if (a == "--steps") {
      steps = std::atoi(next());
    } else if (a == "--mode") {
      mode = next();
    } else if (a == "--fault") {
      fault f;
      if (!parse_fault(next(), f)) {
        std::fprintf(stderr, "mpi_model: bad --fault %s\n", argv[i]);
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      g_faults.push_back(f);
    } else if (a == "--all-stop") {
      all_stop_on = true;
    } else if (a == "--continue-after-stop") {
      continue_after_stop = true;
    } else if (a == "--manual-steps") {
      manual_steps = true;
    } else if (a == "--write-at-exit") {
      write_at_exit = true;
    } else if (a == "--kill") {
      if (std::sscanf(next(), "%d:%d", &kill_rank, &kill_step) != 2) MPI_Abort(MPI_COMM_WORLD, 2);
    } else {
      std::fprintf(stderr, "mpi_model: unknown argument %s\n", a.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (out.empty() || (mode != "tp" && mode != "pipe")) {
    std::fprintf(stderr, "mpi_model: --out DIR is required; --mode is tp or pipe\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  nanscope::mpi::use_communicator(MPI_COMM_WORLD);
  const nanscope::communicator world = nanscope::mpi::describe(MPI_COMM_WORLD, "world");

  nanscope::recorder_options ro;
  ro.policy = nanscope::on_detect::print_and_continue;
  ro.sink = [](std::string_view) {};  // the reports are not what these tests look at
  ro.warn_abs_max[0] = 0.0;
  ro.auto_step = !manual_steps;  // --manual-steps: the engine sets each step (set_step) itself
  nanscope::recorder rec(ro);

  nanscope::rank_evidence_options eo;
  eo.dir = out;
  eo.write_at_exit = write_at_exit;
  int completed = 0, stops = 0;
  std::uint64_t stop_collectives = 0;
  {
    nanscope::rank_evidence ev(rec, eo);
    nanscope::mpi::all_stop stop(ev, MPI_COMM_WORLD, all_stop_on);
    const mat w0 = weights(0, rank), w1 = weights(1, rank), ws = weights(2, rank);
    for (int step = 0; step < steps; ++step) {
      if (kill_rank == rank && kill_step == step) std::raise(SIGKILL);
      if (manual_steps) rec.set_step(static_cast<std::uint64_t>(step));
      if (mode == "tp") {
        nanscope::scope model(rec, "model", "TPModel");
        vec x = data(step, rank);
        maybe_inject(x, step, "data");
        vec p0, h1(D), p1, h2(D);
        {
          nanscope::scope s(rec, "layer0", "Linear");
          s.input(x);
          s.parameter(w0, "weight");
          p0 = w0 * x;
          maybe_inject(p0, step, "layer0");
          s.output(p0);
        }
        {
          nanscope::scope s(rec, "probe0", "Probe");
          s.input(p0);
          vec q = p0.cwiseAbs();
          maybe_inject(q, step, "probe0");
          s.output(q);
        }
        NANSCOPE_COLLECTIVE(ev, world, all_reduce, p0, h1,
                            MPI_Allreduce(p0.data(), h1.data(), D, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        {
          nanscope::scope s(rec, "layer1", "Linear");
          s.input(h1);
          s.parameter(w1, "weight");
          p1 = w1 * h1.array().tanh().matrix();
          maybe_inject(p1, step, "layer1");
          s.output(p1);
        }
        {
          nanscope::scope s(rec, "probe1", "Probe");
          s.input(p1);
          vec q = p1.cwiseAbs();
          maybe_inject(q, step, "probe1");
          s.output(q);
        }
        NANSCOPE_COLLECTIVE(ev, world, all_reduce, p1, h2,
                            MPI_Allreduce(p1.data(), h2.data(), D, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        {
          nanscope::scope s(rec, "head", "Loss");
          s.input(h2);
          vec loss(1);
          loss[0] = h2.squaredNorm();
          maybe_inject(loss, step, "head");
          s.output(loss);
        }
      } else {
        nanscope::scope model(rec, "pipe", "Pipeline");
        vec act(D);
        if (rank == 0) {
          act = data(step, rank);
          maybe_inject(act, step, "data");
        } else {
          NANSCOPE_RECV(ev, world, rank - 1, 7, act,
                        MPI_Recv(act.data(), D, MPI_FLOAT, rank - 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        }
        vec y;
        {
          nanscope::scope s(rec, "stage" + std::to_string(rank), "Linear");
          s.input(act);
          s.parameter(ws, "weight");
          y = ws * act.array().tanh().matrix();
          maybe_inject(y, step, "stage");
          s.output(y);
        }
        if (rank + 1 < size) {
          NANSCOPE_SEND(ev, world, rank + 1, 7, y, MPI_Send(y.data(), D, MPI_FLOAT, rank + 1, 7, MPI_COMM_WORLD));
        } else {
          nanscope::scope s(rec, "head", "Loss");
          s.input(y);
          vec loss(1);
          loss[0] = y.squaredNorm();
          maybe_inject(loss, step, "head");
          s.output(loss);
        }
      }
      completed = step + 1;
      if (kill_rank >= 0) MPI_Barrier(MPI_COMM_WORLD);  // every rank has written what this step showed it
      if (stop.step_boundary()) {
        ++stops;
        if (!continue_after_stop) break;
      }
    }
    stop_collectives = stop.collectives_issued();
  }
  std::printf("rank %d: completed %d steps, all-stop collectives %llu stops %d\n", rank, completed,
              static_cast<unsigned long long>(stop_collectives), stops);
  std::fflush(stdout);
  MPI_Finalize();
  return 0;
}
