// A writer in another pid namespace (a container on the same host that shares the output directory, as with
// `docker run --net=host -v out:/out`): its live temporary must survive this process's stale-temporary cleanup,
// and its commit must land. Its pid (1, there) names another process here, started at another time, so a tag of
// the host name alone judged it dead and deleted the file it was writing. The writer runs under
// `unshare --pid --fork --mount-proc` (as root) or, failing that, the same in a new user namespace; where
// neither can run the test exits 77 (skipped).
//
//   nanscope_process_test                  the test
//   nanscope_process_test writer PATH      (internal) writes PATH atomically, commits after a line on stdin
#include <nanscope/detail/atomic_file.hpp>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>

#include <dirent.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
}

bool exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

int count_temporaries(const std::string& dir) {
  int n = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) n += std::strstr(e->d_name, ".tmp.") != nullptr ? 1 : 0;
    ::closedir(d);
  }
  return n;
}

void remove_tree(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        ::unlink((dir + "/" + e->d_name).c_str());
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

/// A line from fd within `seconds` (empty on timeout or end of file).
std::string read_line(int fd, int seconds) {
  std::string line;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, seconds * 1000) <= 0) return std::string();
    char c;
    const ssize_t n = ::read(fd, &c, 1);
    if (n <= 0) return std::string();
    if (c == '\n') return line;
    line += c;
  }
}

int writer(const char* path) {
  nanscope::detail::atomic_file f(path);
  f.write("evidence\n", 9);
  std::printf("%s\n", f.temp_path().c_str());
  std::fflush(stdout);
  char go[16];
  if (std::fgets(go, sizeof go, stdin) == nullptr) return 3;
  f.commit();
  return 0;
}

/// Runs `unshare ARGS... true` quietly; true when it exits 0 (the namespaces can be made here).
bool unshare_works(const std::vector<const char*>& args) {
  const pid_t p = ::fork();
  if (p < 0) return false;
  if (p == 0) {
    const int null_fd = ::open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
      ::dup2(null_fd, 0);
      ::dup2(null_fd, 1);
      ::dup2(null_fd, 2);
    }
    std::vector<const char*> argv{"unshare"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("true");
    argv.push_back(nullptr);
    ::execvp("unshare", const_cast<char* const*>(argv.data()));
    std::_Exit(127);
  }
  int status = 0;
  pid_t got;
  while ((got = ::waitpid(p, &status, 0)) < 0 && errno == EINTR) {
  }
  return got == p && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "writer") == 0) return writer(argv[2]);
  std::signal(SIGCHLD, SIG_DFL);  // inherited as ignored, waitpid would find no child to report

  char tmpl[] = "/tmp/nanscope_pidns_XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;
  const std::string target = dir + "/evidence.txt";

  // A writer of this pid namespace killed midway: its temporary is stale, and the cleanup still removes it.
  const pid_t dead = ::fork();
  if (dead == 0) {
    nanscope::detail::atomic_file f(dir + "/dead.txt");
    f.write("x", 1);
    std::_Exit(0);  // no destructor: the temporary stays, as after SIGKILL
  }
  int status = 0;
  ::waitpid(dead, &status, 0);
  expect(count_temporaries(dir) == 1, "a dead writer of this namespace left its temporary");
  expect(nanscope::detail::remove_stale_temporaries(dir, {"dead.txt"}) == 1 && count_temporaries(dir) == 0,
         "the cleanup removes a dead writer's temporary of this namespace");

  // The writer in its own pid namespace: as root, or in a user namespace of its own where those are allowed.
  // Which one works is probed first, so that a writer that then fails is a failure, not a skip.
  const std::vector<std::vector<const char*>> ways = {
      {"--pid", "--fork", "--mount-proc"}, {"--user", "--map-root-user", "--pid", "--fork", "--mount-proc"}};
  const std::vector<const char*>* way = nullptr;
  for (const auto& w : ways)
    if (unshare_works(w)) {
      way = &w;
      break;
    }
  if (way == nullptr) {
    remove_tree(dir);
    std::printf("skipped: neither `unshare --pid --fork --mount-proc` nor the same in a new user namespace "
                "(--user --map-root-user) can run here (no unshare, or not permitted)\n");
    return 77;
  }
  int to_child[2], from_child[2];
  if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) {
    std::perror("pipe");
    return 1;
  }
  const pid_t child = ::fork();
  if (child == 0) {
    ::dup2(to_child[0], 0);
    ::dup2(from_child[1], 1);
    ::close(to_child[1]);
    ::close(from_child[0]);
    std::vector<const char*> args{"unshare"};
    args.insert(args.end(), way->begin(), way->end());
    for (const char* a : {static_cast<const char*>(argv[0]), "writer", target.c_str()}) args.push_back(a);
    args.push_back(nullptr);
    ::execvp("unshare", const_cast<char* const*>(args.data()));
    std::fprintf(stderr, "cannot run unshare: %s\n", std::strerror(errno));
    std::_Exit(127);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);
  const std::string temp = read_line(from_child[0], 60);
  if (temp.empty()) {
    ::close(to_child[1]);
    ::waitpid(child, &status, 0);
    remove_tree(dir);
    expect(false, std::string("the writer started under unshare ") + (way == &ways[0] ? "--pid" : "--user --pid") +
                      " (it exited with status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                      " before naming its temporary)");
    return 1;
  }
  // ".evidence.txt.tmp.{pid}.{start}.{host}.{n}": the writer's pid as it sees it
  const std::size_t at = temp.find(".tmp.");
  const long inner_pid = at == std::string::npos ? -1 : std::strtol(temp.c_str() + at + 5, nullptr, 10);
  expect(inner_pid > 0 && inner_pid != child, "the writer runs in its own pid namespace (pid " +
                                                  std::to_string(inner_pid) + " there)");
  expect(exists(temp), "the writer's temporary exists: " + temp);

  const std::size_t removed = nanscope::detail::remove_stale_temporaries(dir, {"evidence.txt"});
  expect(removed == 0 && exists(temp), "the cleanup leaves the live temporary of the other namespace's writer");

  const ssize_t w = ::write(to_child[1], "go\n", 3);
  ::close(to_child[1]);
  ::waitpid(child, &status, 0);
  ::close(from_child[0]);
  expect(w == 3 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the writer committed (exit status " +
                                                                      std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
  std::ifstream in(target);
  std::stringstream got;
  got << in.rdbuf();
  expect(got.str() == "evidence\n", "the target holds the writer's evidence");
  expect(count_temporaries(dir) == 0, "no temporary is left");
  remove_tree(dir);
  std::printf("%s\n", failures == 0 ? "all passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
