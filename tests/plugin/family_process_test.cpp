// The family kit's process runner: arguments reach the program unchanged (no shell), stdout and
// stderr land in the log, the environment is set and pruned as asked, the working directory is
// the one given, and exit statuses, signals and programs that cannot start are told apart.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "support/temp_dir.hpp"
#include "yeto/family/process.hpp"

namespace fs = std::filesystem;
using yeto::family::ProcessOptions;
using yeto::family::run_process;

TEST(FamilyProcess, RunsWithoutAShellAndLogsBothStreams) {
  yeto::test::TempDir tmp;
  ProcessOptions o;
  o.argv = {"sh", "-c", "printf '%s|' \"$@\"; echo; echo to-stderr >&2; pwd; exit 3", "sh", "a b", "$HOME", "'q'"};
  o.cwd = tmp.path();
  o.log = tmp / "run.log";
  tmp.write("run.log", "header\n");
  const auto r = run_process(o);
  EXPECT_TRUE(r.started);
  EXPECT_EQ(r.exit_status, 3);
  EXPECT_EQ(r.signal, 0);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(yeto::family::describe(r), "exit status 3");
  EXPECT_EQ(yeto::test::read_text(o.log),
            "header\na b|$HOME|'q'|\nto-stderr\n" + fs::canonical(tmp.path()).string() + "\n")
      << "appended to the log, arguments unexpanded, in the working directory given";
  EXPECT_EQ(yeto::family::tail_lines(o.log, 2), "to-stderr\n" + fs::canonical(tmp.path()).string());
}

TEST(FamilyProcess, SetsAndPrunesTheEnvironment) {
  yeto::test::TempDir tmp;
  ::setenv("YETO_FAMILY_PROCESS_TEST_SECRET", "s3cret", 1);
  ::setenv("YETO_FAMILY_PROCESS_TEST_KEEP", "kept", 1);
  ::setenv("FAMILY_PROCESS_TEST_DROP", "x", 1);
  ProcessOptions o;
  o.argv = {"sh", "-c", "env | sort | grep FAMILY_PROCESS_TEST"};
  o.env = {{"YETO_FAMILY_PROCESS_TEST_KEEP", "replaced"}, {"FAMILY_PROCESS_TEST_NEW", "new value"}};
  o.unset_env = {"YETO_*", "FAMILY_PROCESS_TEST_DROP"};
  o.log = tmp / "env.log";
  const auto r = run_process(o);
  ASSERT_TRUE(r.ok()) << yeto::family::describe(r);
  EXPECT_EQ(yeto::test::read_text(o.log),
            "FAMILY_PROCESS_TEST_NEW=new value\nYETO_FAMILY_PROCESS_TEST_KEEP=replaced\n");
  const auto env = yeto::family::child_environment(o);
  EXPECT_TRUE(std::is_sorted(env.begin(), env.end()));
  EXPECT_EQ(std::count(env.begin(), env.end(), "YETO_FAMILY_PROCESS_TEST_SECRET=s3cret"), 0);
}

TEST(FamilyProcess, TellsSignalsAndUnstartableProgramsApart) {
  yeto::test::TempDir tmp;
  ProcessOptions o;
  o.log = tmp / "x.log";
  o.argv = {"sh", "-c", "kill -9 $$"};
  auto r = run_process(o);
  EXPECT_TRUE(r.started);
  EXPECT_EQ(r.signal, 9);
  EXPECT_EQ(yeto::family::describe(r).rfind("killed by signal 9", 0), 0u) << yeto::family::describe(r);
  o.argv = {"yeto-no-such-program-anywhere"};
  r = run_process(o);
  EXPECT_FALSE(r.started);
  EXPECT_NE(yeto::family::describe(r).find("'yeto-no-such-program-anywhere' is not an executable on the PATH"),
            std::string::npos);
  o.argv = {(tmp / "missing.py").string()};
  r = run_process(o);
  EXPECT_FALSE(r.ok());
  o.argv = {"true"};
  o.cwd = tmp / "no-such-dir";
  r = run_process(o);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(yeto::family::describe(r).find("does not exist"), std::string::npos) << yeto::family::describe(r);
  o.argv = {};
  EXPECT_THROW(run_process(o), std::invalid_argument);
  o.argv = {"true"};
  o.cwd.clear();
  o.log = tmp / "no-dir/x.log";
  EXPECT_THROW(run_process(o), std::runtime_error);
  o.log.clear();
  EXPECT_THROW(run_process(o), std::invalid_argument);
}
