// The tools' file writer (tools/cli.h write_file_atomic) on real files, symlinks, FIFOs and
// devices: a regular file is replaced whole with its mode kept, a symlink is written through
// and stays a link, a FIFO, a socket, a device or a directory is refused and left as it was,
// errors carry strerror, "-" is standard output, and no temporary file is left behind.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tools/cli.h"

namespace trainplan {
namespace {

namespace fs = std::filesystem;

class WriteFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/trainplan-cli-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string read(const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Files in the folder other than `expected` (a temporary file left behind shows here).
  std::size_t entries() const {
    return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir_), {}));
  }
  fs::path dir_;
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_F(WriteFileTest, ReplacesARegularFileKeepingItsMode) {
  const std::string p = path("out.json");
  { std::ofstream(p) << "old contents, longer than the new ones\n"; }
  ASSERT_EQ(::chmod(p.c_str(), 0640), 0);
  ASSERT_TRUE(cli::write_file_atomic(p, "{}\n").ok());
  EXPECT_EQ(read(p), "{}\n");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(entries(), 1u);  // no temporary file left
}

TEST_F(WriteFileTest, NewFileGetsTheUmaskMode) {
  const mode_t old = ::umask(022);
  const std::string p = path("new.json");
  ASSERT_TRUE(cli::write_file_atomic(p, "x").ok());
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
}

TEST_F(WriteFileTest, WritesThroughASymlinkAndKeepsTheLink) {
  fs::create_directory(dir_ / "results");
  const std::string target = path("results/run.json");
  { std::ofstream(target) << "old"; }
  const std::string link = path("latest.json");
  fs::create_symlink("results/run.json", link);
  ASSERT_TRUE(cli::write_file_atomic(link, "new").ok());
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read(target), "new");
  // A dangling link creates its target.
  const std::string dangling = path("dangling.json");
  fs::create_symlink("results/fresh.json", dangling);
  ASSERT_TRUE(cli::write_file_atomic(dangling, "fresh").ok());
  EXPECT_TRUE(fs::is_symlink(dangling));
  EXPECT_EQ(read(path("results/fresh.json")), "fresh");
}

TEST_F(WriteFileTest, RefusesAFifoAndLeavesIt) {
  const std::string fifo = path("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Status st = cli::write_file_atomic(fifo, "data");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), ExitCode::kIo);
  EXPECT_TRUE(contains(st.message(), "'" + fifo + "'") && contains(st.message(), "a FIFO"))
      << st.message();
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(entries(), 1u);
  // Through a symlink too: the link's target is what counts.
  const std::string link = path("pipe-link");
  fs::create_symlink(fifo, link);
  const Status via = cli::write_file_atomic(link, "data");
  ASSERT_FALSE(via.ok());
  EXPECT_TRUE(contains(via.message(), "a FIFO")) << via.message();
  EXPECT_TRUE(fs::is_symlink(link) && fs::is_fifo(fifo));
}

TEST_F(WriteFileTest, RefusesASocketAndADirectory) {
  const std::string sock = path("s");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const Status st = cli::write_file_atomic(sock, "x");
  ::close(fd);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "a socket")) << st.message();
  EXPECT_TRUE(fs::is_socket(sock));
  fs::create_directory(dir_ / "d");
  const Status d = cli::write_file_atomic(path("d"), "x");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(contains(d.message(), "a directory")) << d.message();
  EXPECT_TRUE(fs::is_directory(path("d")));
}

// /dev/full (and /dev/null) are character devices: refused, and the node stays a device
// (before, root running `plan --emit-plan /dev/full` turned it into a regular file).
TEST_F(WriteFileTest, RefusesADeviceNode) {
  for (const char* dev : {"/dev/full", "/dev/null"}) {
    if (!fs::exists(dev)) GTEST_SKIP() << dev << " is not available";
    const Status st = cli::write_file_atomic(dev, "x");
    ASSERT_FALSE(st.ok()) << dev;
    EXPECT_TRUE(contains(st.message(), "a character device")) << st.message();
    EXPECT_TRUE(fs::is_character_file(dev)) << dev;
  }
}

TEST_F(WriteFileTest, ErrorsCarryStrerror) {
  const Status st = cli::write_file_atomic(path("no/such/dir/out.json"), "x");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), std::strerror(ENOENT))) << st.message();
  EXPECT_TRUE(contains(st.message(), "no/such/dir/out.json")) << st.message();
}

// "-" is standard output; a full standard output is an error with strerror. The child writes
// to /dev/full in place of stdout.
TEST_F(WriteFileTest, DashIsStandardOutputAndAFullOneFails) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "/dev/full is not available";
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  const int full = ::open("/dev/full", O_WRONLY);
  ASSERT_GE(full, 0);
  ::dup2(full, STDOUT_FILENO);
  const Status st = cli::write_file_atomic("-", std::string(1 << 16, 'x'));
  std::clearerr(stdout);
  std::fflush(stdout);
  std::clearerr(stdout);
  ::dup2(saved, STDOUT_FILENO);
  ::close(full);
  ::close(saved);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), ExitCode::kIo);
  EXPECT_TRUE(contains(st.message(), std::strerror(ENOSPC))) << st.message();
}

}  // namespace
}  // namespace trainplan
