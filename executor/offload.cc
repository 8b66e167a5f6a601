// See offload.h.
#include "executor/offload.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace trainplan::executor {
namespace {

std::string reason(int err) { return std::strerror(err); }

}  // namespace

std::string offload_file_path(const std::string& dir, std::int64_t rank) {
  return dir + "/trainplan-offload.rank" + std::to_string(rank) + ".bin";
}

Status check_offload_dir(const std::string& dir, const std::string& flag) {
  if (dir.empty())
    return Status::Error(flag + " is empty: name the directory for the offloaded states",
                         ExitCode::kUsage);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    return Status::Error(flag + " '" + dir + "': " + reason(errno), ExitCode::kIo);
  if (!S_ISDIR(st.st_mode))
    return Status::Error(flag + " '" + dir + "' is not a directory", ExitCode::kIo);
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return Status::Error(flag + " '" + dir + "' is not writable: " + reason(errno), ExitCode::kIo);
  return Status::Ok();
}

Result<std::unique_ptr<OffloadFile>> OffloadFile::create(const std::string& dir,
                                                          std::int64_t rank, std::int64_t bytes) {
  TRAINPLAN_RETURN_IF_ERROR(check_offload_dir(dir, "--offload-dir"));
  std::string path = offload_file_path(dir, rank);
  // O_EXCL: a file already there (another run's, or the user's) is never opened, let alone
  // truncated.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    if (err == EEXIST)
      return Status::Error("--offload-dir: '" + path + "' already exists; refusing to overwrite "
                           "it (another run's offload file? remove it, or name another directory)",
                           ExitCode::kIo);
    return Status::Error("--offload-dir: cannot create '" + path + "': " + reason(err),
                         ExitCode::kIo);
  }
  // From here the file is ours: the destructor removes it, whatever happens next.
  std::unique_ptr<OffloadFile> file(new OffloadFile(path, fd, bytes));
  if (bytes > 0) {
    // posix_fallocate returns the error (it does not set errno).
    const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (err != 0)
      return Status::Error("--offload-dir: cannot reserve " + std::to_string(bytes) +
                               " bytes for '" + path + "': " + reason(err) +
                               (err == ENOSPC ? " (the offloaded states need that much free "
                                                "space on the directory's device)"
                                              : ""),
                           ExitCode::kIo);
  }
  return file;
}

OffloadFile::~OffloadFile() {
  if (fd_ >= 0) ::close(fd_);
  ::unlink(path_.c_str());
}

Status OffloadFile::read(std::int64_t offset, void* into, std::int64_t bytes) const {
  auto* at = static_cast<char*>(into);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, at, static_cast<std::size_t>(bytes), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return Status::Error("offload file '" + path_ + "': read of " + std::to_string(bytes) +
                               " bytes at " + std::to_string(offset) + " failed: " +
                               (n < 0 ? reason(errno) : std::string("end of file")),
                           ExitCode::kIo);
    at += n;
    offset += n;
    bytes -= n;
  }
  return Status::Ok();
}

Status OffloadFile::write(std::int64_t offset, const void* from, std::int64_t bytes) const {
  const auto* at = static_cast<const char*>(from);
  while (bytes > 0) {
    const ssize_t n =
        ::pwrite(fd_, at, static_cast<std::size_t>(bytes), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return Status::Error("offload file '" + path_ + "': write of " + std::to_string(bytes) +
                               " bytes at " + std::to_string(offset) + " failed: " +
                               (n < 0 ? reason(errno) : std::string("nothing written")),
                           ExitCode::kIo);
    at += n;
    offset += n;
    bytes -= n;
  }
  return Status::Ok();
}

BackgroundReader::BackgroundReader() : thread_([this] { run(); }) {}

BackgroundReader::~BackgroundReader() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return !has_job_; });
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void BackgroundReader::start(const OffloadFile& file, std::int64_t offset, void* into,
                             std::int64_t bytes) {
  TRAINPLAN_CHECK(!pending_) << "a background read is already in flight";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    file_ = &file;
    offset_ = offset;
    into_ = into;
    bytes_ = bytes;
    has_job_ = true;
    finished_ = false;
  }
  pending_ = true;
  wake_.notify_one();
}

Status BackgroundReader::wait() {
  TRAINPLAN_CHECK(pending_) << "no background read to wait for";
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return finished_; });
  pending_ = false;
  return status_;
}

void BackgroundReader::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return has_job_ || stop_; });
    if (stop_) return;
    const OffloadFile* file = file_;
    const std::int64_t offset = offset_, bytes = bytes_;
    void* into = into_;
    lock.unlock();
    Status s = file->read(offset, into, bytes);
    lock.lock();
    status_ = std::move(s);
    has_job_ = false;
    finished_ = true;
    done_.notify_all();
  }
}

}  // namespace trainplan::executor
